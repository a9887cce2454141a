from __future__ import annotations

import pytest

from net import batch as batch_fmt
from net.compression import CODEC_LZ4, CODEC_ZSTD


@pytest.mark.parametrize("codec", [0, CODEC_LZ4, CODEC_ZSTD])
def test_build_validate_stamp_decode(codec):
    recs = [[i, i * 2, f"k{i}".encode(), b"v" * i, [["h", b"x"]] if i % 2 else None] for i in range(50)]
    raw = bytearray(batch_fmt.build(recs, 1000, 1098, codec, producer_id=7, producer_epoch=1, base_sequence=3))
    batch_fmt.stamp(raw, 12345, 9)
    h = batch_fmt.validate(raw)
    assert (h.base_offset, h.leader_epoch, h.record_count, h.last_offset_delta) == (12345, 9, 50, 49)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.codec) == (7, 1, 3, codec)
    assert h.size == len(raw) and batch_fmt.HEADER_SIZE == 61
    out = batch_fmt.records_of(raw, 0, h)
    assert [r[2] for r in out] == [r[2] for r in recs]
    assert out[1][4] == (("h", b"x"),)


def test_crc_detects_any_flipped_byte_after_the_crc_field():
    raw = batch_fmt.build([[0, 0, None, b"payload", None]], 1, 1)
    for i in range(batch_fmt.CRC_START, len(raw)):
        bad = bytearray(raw)
        bad[i] ^= 0x01
        with pytest.raises(batch_fmt.InvalidBatch):
            batch_fmt.validate(bad)


def test_truncated_and_bad_magic():
    raw = batch_fmt.build([[0, 0, None, b"payload", None]], 1, 1)
    with pytest.raises(batch_fmt.InvalidBatch, match="truncated"):
        batch_fmt.validate(raw[:-1])
    with pytest.raises(batch_fmt.InvalidBatch, match="truncated"):
        batch_fmt.validate(raw[:30])
    bad = bytearray(raw)
    bad[16] = 9
    with pytest.raises(batch_fmt.InvalidBatch, match="magic"):
        batch_fmt.validate(bad)


def test_iter_batches_stops_at_partial_tail():
    a = batch_fmt.build([[0, 0, None, b"a", None]], 1, 1)
    b = batch_fmt.build([[0, 0, None, b"b", None], [1, 0, None, b"c", None]], 1, 1)
    blob = a + b + b[:20]
    assert [h.record_count for _, h in batch_fmt.iter_batches(blob)] == [1, 2]
