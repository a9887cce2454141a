"""pipeline/columnar.py decodes batches into the same Arrow columns as the per-record decoder, for every case
the log holds: null and empty keys and values, big records (multi-byte varints), LogAppendTime, every codec,
headers (skipped), Kafka Lite 0.1's msgpack batches, a range that starts and ends inside batches; and a
record that runs past its batch is an error, not a crash."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from net import batch as fmt
from net.compression import CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, CODEC_ZSTD
from pipeline.arrow_reader import arrow_batches, arrow_schema
from pipeline.columnar import RecordFormatError, columnar_batches
from pipeline.segments import records_in
from tests.unit.test_batch import legacy_batch


def random_records(rng: random.Random, n: int) -> list:
    out = []
    for i in range(n):
        key = rng.choice([None, b"", b"k%d" % i, bytes(rng.randrange(256) for _ in range(rng.choice([1, 200, 70000])))])
        value = rng.choice([None, b"", b"v" * rng.choice([1, 127, 128, 16384, 300000])])
        headers = rng.choice([None, [("h", b"x")], [("a", b""), ("b", b"yy")]])
        out.append([i, rng.randrange(0, 5000), key, value, headers])
    return out


def make_log(seed: int) -> tuple[bytes, list[tuple[fmt.BatchHeader, int]]]:
    """Several batches one after the other (offsets contiguous), as a segment holds them."""
    rng = random.Random(seed)
    blob = b""
    base = 0
    for codec in (CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD, CODEC_NONE):
        recs = random_records(rng, rng.randrange(1, 40))
        blob += fmt.build(recs, 1_700_000_000_000, 1_700_000_005_000, codec, base_offset=base)
        base += len(recs)
    legacy = bytearray(legacy_batch([[0, 1, b"old", b"v0", None], [1, 2, None, b"v1", [["h", b"x"]]]], 1000))
    legacy[0:8] = base.to_bytes(8, "big")  # the base offset is outside the CRC
    blob += bytes(legacy)
    return blob, [(h, pos) for pos, h in fmt.iter_batches(blob, validate_crc=True)]


def columns(batches) -> dict:  # type: ignore[no-untyped-def]
    t = pa.Table.from_batches(list(batches), schema=arrow_schema(False))
    return t.to_pydict()


@pytest.mark.parametrize("seed", range(6))
def test_same_columns_as_the_per_record_decoder(seed):
    blob, batches = make_log(seed)
    last = batches[-1][0].next_offset
    for start, end in ((0, last), (3, last - 2), (5, 6)):
        chunks = [(blob, batches)]
        new = columns(columnar_batches("t", 4, chunks, start, end, arrow_schema(False), 50))
        old = columns(arrow_batches("t", 4, records_in(chunks, start, end), False))
        assert new == old
        assert new["offset"] == list(range(start, end))


def test_log_append_time_gives_every_record_the_batch_max_timestamp():
    recs = [[0, 0, None, b"a", None], [1, 7, None, b"b", None]]
    raw = bytearray(fmt.build(recs, 1000, 2000))
    # set the timestamp-type bit and fix the CRC, as a broker with LogAppendTime stamps a batch
    attrs = int.from_bytes(raw[21:23], "big") | fmt.TIMESTAMP_LOG_APPEND
    raw[21:23] = attrs.to_bytes(2, "big")
    from crc32c import crc32c

    raw[fmt.CRC_OFFSET : fmt.CRC_START] = crc32c(bytes(raw[fmt.CRC_START :])).to_bytes(4, "big")
    h = fmt.validate(bytes(raw))
    got = columns(columnar_batches("t", 0, [(bytes(raw), [(h, 0)])], 0, 2, arrow_schema(False), 10))
    assert got["timestampType"] == [1, 1]
    assert [ts.timestamp() * 1000 for ts in got["timestamp"]] == [2000, 2000]


def test_a_cleaned_batch_with_a_delete_horizon_gives_each_record_its_own_timestamp():
    """KIP-534: the base timestamp is the delete horizon and the deltas (negative) count from it: both Spark
    readers (compiled and per record) give the records their timestamps, tombstones as null values."""
    recs = [[0, 0, b"gone", None, None], [2, 9, b"kept", b"v", None]]
    raw = fmt.build(recs, 1_700_000_000_000, 1_700_000_000_009, last_offset_delta=2, delete_horizon=1_800_000_000_000)
    h = fmt.validate(raw)
    chunks = [(raw, [(h, 0)])]
    for got in (
        columns(columnar_batches("t", 0, chunks, 0, 3, arrow_schema(False), 10)),
        columns(arrow_batches("t", 0, records_in(chunks, 0, 3), False)),
    ):
        assert got["offset"] == [0, 2] and got["key"] == [b"gone", b"kept"] and got["value"] == [None, b"v"]
        assert [round(ts.timestamp() * 1000) for ts in got["timestamp"]] == [1_700_000_000_000, 1_700_000_000_009]
        assert got["timestampType"] == [0, 0]


def test_a_record_running_past_its_batch_is_an_error():
    raw = bytearray(fmt.build([[0, 0, b"key", b"value" * 10, None]], 1, 1))
    raw[fmt.HEADER_SIZE] = 0x7E  # the record's length varint: 63 bytes, more than the batch holds
    h = fmt.parse_header(bytes(raw))
    with pytest.raises(RecordFormatError, match="runs past"):
        list(columnar_batches("t", 0, [(bytes(raw), [(h, 0)])], 0, 1, arrow_schema(False), 10))
