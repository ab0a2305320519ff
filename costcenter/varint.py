"""Unsigned LEB128 varints: the integer encoding of Protocol Buffers and of Thrift's compact
protocol (OTLP error bodies in ``ingest/api.py``, Parquet metadata in ``costcenter/parquet.py``)."""

from __future__ import annotations


def varint(value: int) -> bytes:
    """``value`` (≥ 0) in 7-bit groups, least significant first, the high bit marking "more"."""
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)
