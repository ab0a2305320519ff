"""Tell the usage format of a file from its first bytes (the file name is only a fallback).

Rules, first match wins (content is trusted over names because exports get renamed):
* JSON (first non-blank byte `{` or `[`):
  `"resourceSpans"` -> otlp-json; `"custom_id"` -> openai-batch;
  `"startTime"` with `"request_id"`/`"call_type"`/`"spend"` -> litellm (checked before
  canonical because LiteLLM metadata may itself contain a `task_id`); `"task_id"` -> canonical.
* otherwise a CSV header line naming `request_id` and `startTime` -> litellm.
* an empty (or whitespace-only) sample: the name decides (`.csv` -> litellm, else canonical),
  which is harmless because there is nothing to parse.
Anything else raises `UnknownFormat` saying what was looked for. gzip-compressed first bytes
are decompressed here, so callers may pass either the raw or the decompressed sample.
"""

from __future__ import annotations

import re
import zlib

_GZIP_MAGIC = b"\x1f\x8b"
_UTF8_BOM = b"\xef\xbb\xbf"


class UnknownFormat(ValueError):
    """The first bytes match no supported usage format."""


def _key(name: str) -> re.Pattern[bytes]:
    return re.compile(rb'"' + name.encode() + rb'"\s*:')


_OTLP = (_key("resourceSpans"), _key("resource_spans"))
_BATCH = _key("custom_id")
_LITELLM_TIME = _key("startTime")
_LITELLM_OTHER = (_key("request_id"), _key("call_type"), _key("spend"))
_CANONICAL = _key("task_id")


def detect_format(first_bytes: bytes, filename: str = "") -> str:
    """Return one of canonical | openai-batch | litellm | otlp-json, or raise UnknownFormat."""
    sample = _decompressed(first_bytes)
    if sample.startswith(_UTF8_BOM):
        sample = sample[len(_UTF8_BOM) :]
    sample = sample.lstrip()
    name = filename.lower().removesuffix(".gz")
    if not sample:
        return "litellm" if name.endswith(".csv") else "canonical"
    if sample[:1] in (b"{", b"["):
        if any(p.search(sample) for p in _OTLP):
            return "otlp-json"
        if _BATCH.search(sample):
            return "openai-batch"
        if _LITELLM_TIME.search(sample) and any(p.search(sample) for p in _LITELLM_OTHER):
            return "litellm"
        if _CANONICAL.search(sample):
            return "canonical"
        raise UnknownFormat(
            f"{filename or 'input'}: JSON, but none of the keys we recognise was found "
            '("resourceSpans" for otlp-json, "custom_id" for openai-batch, "startTime"+"request_id" '
            'for litellm, "task_id" for canonical); pass --format explicitly'
        )
    header = sample.split(b"\n", 1)[0]
    columns = {c.strip().strip('"').lower() for c in header.decode("utf-8", errors="replace").split(",")}
    if {"request_id", "starttime"} <= columns:
        return "litellm"
    raise UnknownFormat(
        f"{filename or 'input'}: neither JSON nor a LiteLLM_SpendLogs CSV header "
        "(expected columns request_id and startTime); pass --format explicitly"
    )


def _decompressed(data: bytes) -> bytes:
    if not data.startswith(_GZIP_MAGIC):
        return data
    # A partial gzip member: decompress what is there; truncation is expected in a sample.
    try:
        return zlib.decompressobj(wbits=31).decompress(data, 256 * 1024)
    except zlib.error:
        return b""
