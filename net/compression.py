"""Batch compression codecs, with Kafka's ids (the low 3 bits of a batch's attributes) and names
(the `compression.type` values). The codecs are cramjam's (Rust, no hand-written code): gzip, snappy,
LZ4 frames and zstd frames, the formats Kafka clients write. Snappy is read both raw and in the
xerial framing that Java clients write (snappy-java's stream format)."""

from __future__ import annotations

import struct

import cramjam

CODEC_NONE = 0
CODEC_GZIP = 1
CODEC_SNAPPY = 2
CODEC_LZ4 = 3
CODEC_ZSTD = 4
CODEC_MASK = 0x07

CODECS = {"none": CODEC_NONE, "gzip": CODEC_GZIP, "snappy": CODEC_SNAPPY, "lz4": CODEC_LZ4, "zstd": CODEC_ZSTD}

# snappy-java's stream header: magic, then version 1 and compatible version 1 (int32 each).
_XERIAL_HEADER = b"\x82SNAPPY\x00"
_XERIAL_CHUNK = struct.Struct(">i")


def codec_id(name: str) -> int:
    try:
        return CODECS[name]
    except KeyError:
        raise ValueError(f"unknown compression.type {name!r}; expected one of {', '.join(CODECS)}") from None


def compress(codec: int, data: bytes | bytearray | memoryview, level: int | None = None) -> bytes:
    """`level`: the codec's compression level (Kafka's compression.<codec>.level; gzip -1: its default);
    None: zstd 3, lz4 and gzip their defaults."""
    if codec == CODEC_ZSTD:
        return bytes(cramjam.zstd.compress(data, level=3 if level is None else level))
    if codec == CODEC_LZ4:
        return bytes(cramjam.lz4.compress(data) if level is None else cramjam.lz4.compress(data, level=level))
    if codec == CODEC_SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == CODEC_GZIP:
        if level is None or level < 0:
            return bytes(cramjam.gzip.compress(data))
        return bytes(cramjam.gzip.compress(data, level=level))
    raise ValueError(f"unsupported compression codec {codec}")


def decompress(codec: int, data: bytes | bytearray | memoryview) -> bytes:
    if codec == CODEC_ZSTD:
        return bytes(cramjam.zstd.decompress(data))
    if codec == CODEC_LZ4:
        return bytes(cramjam.lz4.decompress(data))
    if codec == CODEC_SNAPPY:
        return _snappy_decompress(data)
    if codec == CODEC_GZIP:
        return bytes(cramjam.gzip.decompress(data))
    raise ValueError(f"unsupported compression codec {codec}")


def _snappy_decompress(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data)
    if bytes(view[:8]) != _XERIAL_HEADER:
        return bytes(cramjam.snappy.decompress_raw(view))
    out = bytearray()
    pos = 16  # the header and its two version ints
    while pos < len(view):
        (n,) = _XERIAL_CHUNK.unpack_from(view, pos)
        pos += 4
        if n < 0 or pos + n > len(view):
            raise ValueError("truncated xerial snappy chunk")
        out += cramjam.snappy.decompress_raw(view[pos : pos + n])
        pos += n
    return bytes(out)
