"""Batch compression codecs. Codec ids match Kafka's attribute bits."""

from __future__ import annotations

import lz4.frame
import zstandard

CODEC_NONE = 0
CODEC_LZ4 = 3
CODEC_ZSTD = 4
CODEC_MASK = 0x07

CODECS = {"none": CODEC_NONE, "lz4": CODEC_LZ4, "zstd": CODEC_ZSTD}

_zc = zstandard.ZstdCompressor(level=3)
_zd = zstandard.ZstdDecompressor()


def codec_id(name: str) -> int:
    try:
        return CODECS[name]
    except KeyError:
        raise ValueError(f"unknown compression.type {name!r}; expected one of {', '.join(CODECS)}") from None


def compress(codec: int, data: bytes) -> bytes:
    if codec == CODEC_ZSTD:
        return _zc.compress(data)
    if codec == CODEC_LZ4:
        return lz4.frame.compress(data)
    raise ValueError(f"unsupported compression codec {codec}")


def decompress(codec: int, data: bytes) -> bytes:
    if codec == CODEC_ZSTD:
        return _zd.decompress(data)
    if codec == CODEC_LZ4:
        return lz4.frame.decompress(data)
    raise ValueError(f"unsupported compression codec {codec}")
