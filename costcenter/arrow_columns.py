"""Arrow arrays from lists of Python values, built from typed buffers.

``pyarrow.array(list)`` imports pandas the first time it runs whenever pandas is installed (its
"is this array-like?" check), which costs a web worker ~50 MB of resident memory for the rest of
its life — a quarter of the export's memory budget. Here each column is laid out in the Arrow
format directly (``array.array`` of int64/float64, 16-byte two's-complement decimals, UTF-8
offsets and data, a validity bitmap) and wrapped with ``pyarrow.Array.from_buffers``, which
touches neither pandas nor NumPy and is as fast as the generic converter.
"""

from __future__ import annotations

from array import array
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from itertools import accumulate

import pyarrow as pa

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
# decimal128(38, 12): every amount is rounded half-even to 12 places (rollup amounts have exactly
# 12 already, so nothing changes for them) and stored as its unscaled integer.
DECIMAL_SCALE = 12
_QUANTUM = Decimal(1).scaleb(-DECIMAL_SCALE)
_BOOL_BYTES = (b"\x00", b"\x01")
_GATHER_BITS = 0x0102040810204080


def _pack_bits(flags: bytes) -> pa.Buffer:
    """One byte 0/1 per value → Arrow's LSB-first bitmap.

    Eight flags at a time: read as a little-endian int (flag j in byte j), the multiplication
    gathers bit 0 of each byte into the top byte (checked against all 256 patterns in the tests).
    Done here rather than with ``Array.cast(pa.bool_())``, which would import ``pyarrow.compute``
    (~13 MB per worker) for this alone.
    """
    packed = bytearray((len(flags) + 7) // 8)
    for start in range(0, len(flags), 8):
        octet = int.from_bytes(flags[start : start + 8], "little")
        packed[start >> 3] = ((octet * _GATHER_BITS) >> 56) & 0xFF
    return pa.py_buffer(packed)


def _validity(values: list) -> pa.Buffer | None:
    """The validity bitmap of ``values`` (bit i set when value i is not None); None when no nulls."""
    if None not in values:
        return None
    return _pack_bits(bytes(value is not None for value in values))


def _int64(values: list) -> array:
    return array("q", [0 if value is None else value for value in values])


def _micros(values: list) -> array:
    # Subtracting aware datetimes compares instants, so any time zone lands on the right UTC µs.
    return array("q", [0 if value is None else (value - _EPOCH) // _MICROSECOND for value in values])


def _float64(values: list) -> array:
    return array("d", [0.0 if value is None else value for value in values])


def _decimal_bytes(values: list) -> bytes:
    # 40 digits of precision so quantizing a 26-digit amount never raises (the default is 28).
    with localcontext(prec=40):
        return b"".join(
            b"\x00" * 16
            if value is None
            else int(
                (value if isinstance(value, Decimal) else Decimal(value))
                .quantize(_QUANTUM, rounding=ROUND_HALF_EVEN)
                .scaleb(DECIMAL_SCALE)
            ).to_bytes(16, "little", signed=True)
            for value in values
        )


def _bool_array(values: list, validity) -> pa.Array:
    flags = b"".join(_BOOL_BYTES[bool(value)] for value in values)
    return pa.Array.from_buffers(pa.bool_(), len(values), [validity, _pack_bits(flags)])


def _string_array(values: list, validity) -> pa.Array:
    encoded = [b"" if value is None else value.encode() for value in values]
    offsets = array("i", [0])
    offsets.extend(accumulate(map(len, encoded)))  # int32 offsets: a batch holds far less than 2 GB
    return pa.Array.from_buffers(
        pa.string(), len(values), [validity, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
    )


def column_array(values: list, arrow_type: pa.DataType) -> pa.Array:
    """An Arrow array of ``arrow_type`` holding ``values`` (None is null).

    Values arrive already in their Arrow-facing Python form: ``str`` for string columns, ``int``,
    ``float``, ``bool``, aware ``datetime`` for timestamps, ``Decimal`` (or int) for decimals.
    """
    validity = _validity(values)
    count = len(values)
    if pa.types.is_string(arrow_type):
        built = _string_array(values, validity)
    elif pa.types.is_boolean(arrow_type):
        built = _bool_array(values, validity)
    elif pa.types.is_decimal(arrow_type):
        if arrow_type.scale != DECIMAL_SCALE or arrow_type.byte_width != 16:
            raise ValueError(f"only decimal128(_, {DECIMAL_SCALE}) is supported, not {arrow_type}")
        built = pa.Array.from_buffers(arrow_type, count, [validity, pa.py_buffer(_decimal_bytes(values))])
    elif pa.types.is_timestamp(arrow_type):
        if arrow_type.unit != "us":
            raise ValueError(f"only microsecond timestamps are supported, not {arrow_type}")
        built = pa.Array.from_buffers(arrow_type, count, [validity, pa.py_buffer(_micros(values))])
    elif pa.types.is_int64(arrow_type):
        built = pa.Array.from_buffers(arrow_type, count, [validity, pa.py_buffer(_int64(values))])
    elif pa.types.is_float64(arrow_type):
        built = pa.Array.from_buffers(arrow_type, count, [validity, pa.py_buffer(_float64(values))])
    else:
        raise ValueError(f"no Arrow column builder for {arrow_type}")
    built.validate()  # buffer sizes and offsets: a mistake here must fail now, not in a reader
    return built
