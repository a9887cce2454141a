from __future__ import annotations

import pytest

from net import batch as batch_fmt
from net.compression import CODEC_GZIP, CODEC_LZ4, CODEC_SNAPPY, CODEC_ZSTD


@pytest.mark.parametrize("codec", [0, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD])
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


def legacy_batch(records: list, first_ts: int, codec: int = 0) -> bytes:
    """A Kafka Lite 0.1 batch (magic 1, msgpack records), byte for byte as 0.1 wrote it."""
    import struct

    import msgpack
    from crc32c import crc32c

    from net.compression import compress

    payload = msgpack.packb(records, use_bin_type=True)
    if codec:
        payload = compress(codec, payload)
    tail = struct.pack(">hiqqqhii", codec, len(records) - 1, first_ts, first_ts, -1, -1, -1, len(records))
    crc = crc32c(payload, crc32c(tail))
    return struct.pack(">qiibI", 0, 49 + len(payload), -1, 1, crc) + tail + payload


@pytest.mark.parametrize("codec", [0, CODEC_ZSTD])
def test_legacy_magic_1_batches_are_still_validated_and_read(codec):
    from client.fetcher import decode_records

    raw = legacy_batch([[0, 0, b"k", b"old", None], [1, 3, None, b"older", [["h", b"x"]]]], 1000, codec)
    h = batch_fmt.validate(raw)
    assert h.magic == batch_fmt.LEGACY_MAGIC
    assert batch_fmt.records_of(raw, 0, h) == ((0, 0, b"k", b"old", None), (1, 3, None, b"older", (("h", b"x"),)))
    new = batch_fmt.build([[0, 0, b"k2", b"new", None]], 2000, 2000)
    bumped = bytearray(new)
    batch_fmt.stamp(bumped, 2, 0)
    recs, nxt = decode_records("t", 0, raw + bytes(bumped), 0)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in recs] == [
        (0, 1000, b"k", b"old", ()),
        (1, 1003, None, b"older", (("h", b"x"),)),
        (2, 2000, b"k2", b"new", ()),
    ]
    assert nxt == 3


def test_snappy_in_the_xerial_framing_java_clients_write_is_read():
    import struct

    import cramjam

    from net.compression import decompress

    data = b"kafka lite " * 1000
    chunks = [data[:5000], data[5000:]]
    framed = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    for c in chunks:
        raw = bytes(cramjam.snappy.compress_raw(c))
        framed += struct.pack(">i", len(raw)) + raw
    assert decompress(CODEC_SNAPPY, framed) == data


def test_records_are_kafka_varint_records_that_another_kafka_reader_decodes():
    # aiokafka's pure-Python reader (not the C codec that wrote them) reads what we build
    from aiokafka.record.default_records import _DefaultRecordBatchPy

    raw = bytearray(batch_fmt.build([[0, 0, b"k1", b"v1", None], [1, 5, None, b"v2", [("h", b"x")]]], 17, 22))
    batch_fmt.stamp(raw, 100, 3)
    b = _DefaultRecordBatchPy(bytes(raw))
    assert b.validate_crc() and b.magic == 2 and b.base_offset == 100
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in b] == [
        (100, 17, b"k1", b"v1", []),
        (101, 22, None, b"v2", [("h", b"x")]),
    ]


def test_decoding_leaves_the_garbage_collector_alone_unless_asked(monkeypatch):
    import gc

    from client.fetcher import decode_records

    calls = []
    monkeypatch.setattr(gc, "disable", lambda: calls.append("disable"))
    monkeypatch.setattr(gc, "enable", lambda: calls.append("enable"))
    raw = batch_fmt.build([[0, 0, None, b"v", None]], 1, 1)
    assert len(decode_records("t", 0, raw, 0)[0]) == 1
    assert calls == []  # a library call changes no process-wide state
    assert len(decode_records("t", 0, raw, 0, pause_gc=True)[0]) == 1
    assert calls == ["disable", "enable"]


def test_transaction_markers_round_trip_and_read_as_kafka_does() -> None:
    """A commit / abort marker is one control record in a TRANSACTIONAL|CONTROL batch (KIP-98), which a Kafka
    client's decoder (aiokafka's, as librdkafka's) takes for a control batch with a valid CRC."""
    from aiokafka.record.default_records import DefaultRecordBatch

    from net.batch import build, build_marker, control_record, validate

    for commit in (True, False):
        raw = build_marker(42, 3, commit, 9, 1_000)
        h = validate(raw)
        assert (h.is_control, h.is_transactional, h.producer_id, h.producer_epoch) == (True, True, 42, 3)
        assert control_record(raw, 0, h) == (commit, 9)
        kafka = DefaultRecordBatch(raw)
        assert kafka.is_control_batch and kafka.is_transactional and kafka.validate_crc()
    data = build([(0, 0, b"k", b"v", None)], 1, 1, producer_id=1, producer_epoch=0, base_sequence=0)
    assert control_record(data, 0, validate(data)) is None  # a data batch is no marker


def test_a_delete_horizon_batch_keeps_its_record_timestamps_for_every_kafka_decoder() -> None:
    """KIP-534: attribute bit 6 set, the base timestamp holding the delete horizon, the records' deltas counted
    from it (negative here), so every record's timestamp is what it was. Read back by our decoder, aiokafka's C
    one (our consumer's) and kafka-python's pure-Python one; the CRC covers the new attributes."""
    from aiokafka.record.default_records import DefaultRecordBatch
    from kafka.record.default_records import DefaultRecordBatch as KafkaPythonBatch

    from client.fetcher import decode_records

    recs = [[0, 0, b"gone", None, None], [2, 7, b"kept", b"v", [("h", b"x")]]]
    horizon = 1_700_000_086_400_000
    for codec in (0, CODEC_ZSTD):
        raw = bytearray(batch_fmt.build(recs, 5_000, 5_007, codec, last_offset_delta=3, delete_horizon=horizon))
        batch_fmt.stamp(raw, 40, 2)
        h = batch_fmt.validate(raw)
        assert h.attributes & batch_fmt.DELETE_HORIZON == 0x40 and h.codec == codec
        assert (h.delete_horizon_ms, h.first_timestamp, h.max_timestamp) == (horizon, horizon, 5_007)
        assert [(r[0], h.first_timestamp + r[1], r[2], r[3]) for r in batch_fmt.records_of(raw, 0, h)] == [
            (0, 5_000, b"gone", None),
            (2, 5_007, b"kept", b"v"),
        ]
        expected = [(40, 5_000, b"gone", None), (42, 5_007, b"kept", b"v")]
        assert [(r.offset, r.timestamp, r.key, r.value) for r in DefaultRecordBatch(bytes(raw))] == expected
        theirs = KafkaPythonBatch(bytes(raw))
        assert theirs.validate_crc() and [(r.offset, r.timestamp, r.key, r.value) for r in theirs] == expected
        ours = decode_records("t", 0, bytes(raw), 0)[0]
        assert [(r.offset, r.timestamp, r.key, r.value) for r in ours] == expected
    plain = batch_fmt.validate(batch_fmt.build(recs, 5_000, 5_007))
    assert plain.delete_horizon_ms is None and not plain.attributes & batch_fmt.DELETE_HORIZON


def test_build_counts_deltas_from_the_base_even_when_the_first_record_is_not_at_it() -> None:
    """aiokafka's builder counts from its first record; build() anchors it at the batch's base timestamp."""
    raw = batch_fmt.build([[0, 3, b"a", b"1", None], [1, -2, b"b", b"2", None]], 100, 103)
    h = batch_fmt.validate(raw)
    assert h.first_timestamp == 100 and [100 + r[1] for r in batch_fmt.records_of(raw, 0, h)] == [103, 98]


def test_a_marker_with_a_delete_horizon_stays_a_marker() -> None:
    from aiokafka.record.default_records import DefaultRecordBatch

    raw = batch_fmt.build_marker(42, 3, False, 9, 1_000)
    h = batch_fmt.validate(raw)
    flagged = batch_fmt.build(
        batch_fmt.records_of(raw, 0, h), 1_000, 1_000, producer_id=42, producer_epoch=3, transactional=True,
        control=True, delete_horizon=9_999,
    )  # fmt: skip
    fh = batch_fmt.validate(flagged)
    assert (fh.is_control, fh.is_transactional, fh.delete_horizon_ms, fh.max_timestamp) == (True, True, 9_999, 1_000)
    assert batch_fmt.control_record(flagged, 0, fh) == (False, 9)
    kafka = DefaultRecordBatch(flagged)
    assert kafka.is_control_batch and kafka.validate_crc() and [r.timestamp for r in kafka] == [1_000]
