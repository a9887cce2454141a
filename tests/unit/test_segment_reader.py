"""pipeline/segments.py + pipeline/options.py + pipeline/arrow_reader.py: reading partition logs from
the files the broker's own `Log` writes (several segments, compression, torn tails, corruption,
replicas, high watermark checkpoints) and the Spark Kafka-source options. No Spark, no Java."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pytest

from broker.log.checkpoint import write_checkpoint
from broker.log.config import LogConfig
from broker.log.log import Log
from net import batch as fmt
from net.compression import CODEC_LZ4, CODEC_NONE, CODEC_ZSTD
from pipeline import options as opt
from pipeline import segments as seg
from pipeline.arrow_reader import arrow_schema, record_batches

T0 = 1_700_000_000_000


def make_log(data_dir: Path, topic: str = "tweets", partition: int = 0, **config) -> Log:
    cfg = LogConfig(**{"segment_bytes": 1024, "index_interval_bytes": 0, **config})
    return Log(data_dir / f"{topic}-{partition}", topic, partition, cfg, clean_shutdown=True)


def append(lg: Log, n: int, codec: int = CODEC_NONE, start: int = 0, epoch: int = 0, headers=None) -> None:
    """n records in one batch: key k<i>, value v<i>, timestamps T0 + i."""
    recs = [[i, i, f"k{start + i}".encode(), f"v{start + i}".encode(), headers] for i in range(n)]
    lg.append_as_leader(fmt.build(recs, T0 + start, T0 + start + n - 1, codec=codec), epoch)


def fill(lg: Log, batches: int, per_batch: int = 10, codec: int = CODEC_NONE) -> int:
    done = lg.log_end_offset
    for _ in range(batches):
        append(lg, per_batch, codec, start=done)
        done += per_batch
    return done


def read_all(options: dict) -> list[tuple]:
    plan = opt.plan_read(options)
    out = []
    for sl in plan.slices:
        for h, recs in seg.read_slice(sl):
            out += [(sl.topic, sl.partition, h.base_offset + r[0], r[2], r[3]) for r in recs]
    return out


def test_several_segments_compressed_and_plain_read_in_order(tmp_path):
    d = tmp_path / "d1"
    lg = make_log(d)
    fill(lg, 10, codec=CODEC_NONE)
    fill(lg, 10, codec=CODEC_ZSTD)
    fill(lg, 10, codec=CODEC_LZ4)
    lg.close()
    assert len(seg.list_segments(d / "tweets-0")) >= 3, "segment.bytes=1024 should have rolled"
    rows = read_all({"path": str(d), "subscribe": "tweets"})
    assert [r[2] for r in rows] == list(range(300))
    assert rows[123][3:] == (b"k123", b"v123")
    plan = opt.plan_read({"path": str(d), "subscribe": "tweets"})
    # One task per segment, each covering its own offsets.
    assert len(plan.slices) == len(seg.list_segments(d / "tweets-0"))
    assert plan.partitions[0].committed_source == seg.COMMITTED_LOG_END  # no metadata log here: not single-broker


def test_arrow_batches_match_the_kafka_schema(tmp_path):
    d = tmp_path / "d1"
    lg = make_log(d)
    append(lg, 3, headers=[["h", b"x"], ["n", None]])
    append(lg, 2, start=3)
    lg.close()
    plan = opt.plan_read({"path": str(d), "subscribe": "tweets", "includeHeaders": "true"})
    (sl,) = plan.slices
    (rb,) = list(record_batches(sl, True, rows=1000))
    assert rb.schema.equals(arrow_schema(True))
    t = pa.Table.from_batches([rb]).to_pydict()
    assert t["offset"] == [0, 1, 2, 3, 4]
    assert t["key"][4] == b"k4" and t["value"][0] == b"v0"
    assert t["topic"] == ["tweets"] * 5 and t["partition"] == [0] * 5
    assert [ts.timestamp() for ts in t["timestamp"]][:2] == [T0 / 1000, (T0 + 1) / 1000]
    assert t["timestampType"] == [0] * 5
    assert t["headers"][0] == [{"key": "h", "value": b"x"}, {"key": "n", "value": None}]
    assert t["headers"][4] == []


def test_log_append_time_batches_take_the_broker_time(tmp_path):
    d = tmp_path / "d1"
    lg = make_log(d, message_timestamp_type="LogAppendTime")
    append(lg, 3)
    lg.close()
    (sl,) = opt.plan_read({"path": str(d), "subscribe": "tweets"}).slices
    (rb,) = list(record_batches(sl, False))
    t = rb.to_pydict()
    assert t["timestampType"] == [1, 1, 1]
    assert len({ts for ts in t["timestamp"]}) == 1 and t["timestamp"][0].timestamp() * 1000 > T0 + 2


def test_torn_tail_of_the_active_segment_is_not_read(tmp_path):
    d = tmp_path / "d1"
    lg = make_log(d, segment_bytes=1 << 20)
    fill(lg, 5)
    lg.close()
    (active,) = seg.list_segments(d / "tweets-0")
    whole = fmt.build([[0, 0, b"k", b"torn", None]], T0, T0)
    with open(active.path, "ab") as f:
        f.write(whole[: len(whole) // 2])
    rows = read_all({"path": str(d), "subscribe": "tweets"})
    assert len(rows) == 50 and rows[-1][2] == 49
    # A complete batch with a bad CRC at the tail (a crash mid-write) is not trusted either.
    with open(active.path, "r+b") as f:
        f.truncate(active.size)
        bad = bytearray(fmt.build([[0, 0, b"k", b"bad", None]], T0, T0, base_offset=50))
        bad[-1] ^= 0xFF
        f.seek(0, os.SEEK_END)
        f.write(bad)
    assert len(read_all({"path": str(d), "subscribe": "tweets"})) == 50


def test_corrupt_batch_in_a_closed_segment_names_file_and_position(tmp_path):
    d = tmp_path / "d1"
    lg = make_log(d)
    fill(lg, 30)
    lg.close()
    first = seg.list_segments(d / "tweets-0")[0]
    # Flip a byte inside the second batch's records: its CRC no longer matches.
    with open(first.path, "rb") as f:
        data = f.read()
    h0 = fmt.parse_header(data, 0)
    pos = h0.size
    with open(first.path, "r+b") as f:
        f.seek(pos + fmt.HEADER_SIZE + 3)
        f.write(bytes([data[pos + fmt.HEADER_SIZE + 3] ^ 0xFF]))
    with pytest.raises(seg.CorruptBatchError, match=rf"{first.path} at position {pos}: CRC mismatch") as e:
        read_all({"path": str(d), "subscribe": "tweets"})
    assert e.value.path == first.path and e.value.position == pos


def test_truncated_closed_segment_is_an_error(tmp_path):
    d = tmp_path / "d1"
    lg = make_log(d)
    fill(lg, 30)
    lg.close()
    first = seg.list_segments(d / "tweets-0")[0]
    with open(first.path, "r+b") as f:
        f.truncate(first.size - 7)
    with pytest.raises(seg.CorruptBatchError, match=str(first.path)):
        read_all({"path": str(d), "subscribe": "tweets"})


def test_high_watermark_checkpoint_caps_the_read(tmp_path):
    d = tmp_path / "d1"
    lg = make_log(d)
    fill(lg, 20)
    lg.close()
    write_checkpoint(d / seg.HW_CHECKPOINT, {("tweets", 0): 137})
    rows = read_all({"path": str(d), "subscribe": "tweets"})
    assert [r[2] for r in rows] == list(range(137)), "nothing at or above the high watermark"
    (pp,) = opt.plan_read({"path": str(d), "subscribe": "tweets"}).partitions
    assert (pp.committed, pp.committed_source) == (137, seg.COMMITTED_CHECKPOINT)


def test_each_partition_read_from_the_replica_with_the_highest_committed_offset(tmp_path):
    dirs = [tmp_path / f"broker-{i}" for i in (1, 2, 3)]
    ends = [120, 200, 160]  # replica logs of different lengths (followers behind)
    hws = [120, 150, 160]  # what each broker last checkpointed
    for d, end, hw in zip(dirs, ends, hws):
        lg = make_log(d)
        fill(lg, end // 10)
        lg.close()
        write_checkpoint(d / seg.HW_CHECKPOINT, {("tweets", 0): hw})
    plan = opt.plan_read({"path": ",".join(map(str, dirs)), "subscribe": "tweets"})
    (pp,) = plan.partitions
    assert pp.data_dir == str(dirs[2]) and pp.committed == 160
    rows = read_all({"path": ",".join(map(str, dirs)), "subscribe": "tweets"})
    assert [r[2] for r in rows] == list(range(160)), "read once, from one replica"
    assert all(s.path.startswith(str(dirs[2])) for s in plan.slices)


def test_without_checkpoints_the_most_up_to_date_replica_wins(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    la, lb = make_log(a), make_log(b)
    fill(la, 10)
    fill(lb, 8)
    append(lb, 10, start=80, epoch=1)  # b led a later epoch: a's longer tail is stale
    la.close()
    lb.close()
    (pp,) = opt.plan_read({"path": f"{a},{b}", "subscribe": "tweets"}).partitions
    assert pp.data_dir == str(b) and pp.committed == 90


def test_cluster_root_expands_to_its_broker_dirs(tmp_path):
    for i in (1, 2):
        lg = make_log(tmp_path / f"broker-{i}")
        fill(lg, 2)
        lg.close()
    (tmp_path / "cluster.json").write_text("{}")
    assert [p.name for p in seg.expand_paths(str(tmp_path))] == ["broker-1", "broker-2"]
    assert len(read_all({"path": str(tmp_path), "subscribe": "tweets"})) == 20


def test_starting_and_ending_offsets_cut_inside_batches(tmp_path):
    d = tmp_path / "d1"
    for p in (0, 1, 2):
        lg = make_log(d, partition=p)
        fill(lg, 10)
        lg.close()
    options = {
        "path": str(d),
        "subscribe": "tweets",
        "startingOffsets": '{"tweets":{"0":23,"1":-2}}',
        "endingOffsets": '{"tweets":{"0":57,"2":5}}',
    }
    rows = read_all(options)
    by_p = {p: [r[2] for r in rows if r[1] == p] for p in (0, 1, 2)}
    assert by_p[0] == list(range(23, 57))
    assert by_p[1] == list(range(100)), "partition left out of endingOffsets ends at latest"
    assert by_p[2] == list(range(5)), "partition left out of startingOffsets starts at earliest"


def test_slices_split_by_records_cover_everything_once(tmp_path):
    d = tmp_path / "d1"
    lg = make_log(d, segment_bytes=1 << 20)
    fill(lg, 50, codec=CODEC_ZSTD)
    lg.close()
    plan = opt.plan_read({"path": str(d), "subscribe": "tweets", "maxRecordsPerPartition": "70"})
    assert len(plan.slices) == 8  # 500 records, batches of 10, at most 70 per slice
    assert [r[2] for r in read_all({"path": str(d), "subscribe": "tweets", "maxRecordsPerPartition": "70"})] == list(
        range(500)
    )
    plan = opt.plan_read({"path": str(d), "subscribe": "tweets", "minPartitions": "4"})
    assert len(plan.slices) >= 4
    assert sum(len(list(seg.read_slice(s))) for s in plan.slices) == 50


def test_log_start_checkpoint_and_fail_on_data_loss(tmp_path):
    d = tmp_path / "d1"
    lg = make_log(d)
    fill(lg, 10)
    lg.close()
    write_checkpoint(d / seg.LOG_START_OFFSET_CHECKPOINT, {("tweets", 0): 40})
    assert [r[2] for r in read_all({"path": str(d), "subscribe": "tweets"})][0] == 40
    late = {"path": str(d), "subscribe": "tweets", "startingOffsets": '{"tweets":{"0":10}}'}
    with pytest.raises(seg.LogReadError, match="below the log start offset 40.*failOnDataLoss=false"):
        opt.plan_read(late)
    assert [r[2] for r in read_all({**late, "failOnDataLoss": "false"})][0] == 40


def test_segment_deleted_after_planning(tmp_path):
    d = tmp_path / "d1"
    lg = make_log(d)
    fill(lg, 30)
    lg.close()
    plan = opt.plan_read({"path": str(d), "subscribe": "tweets"})
    os.unlink(plan.slices[0].path)
    with pytest.raises(seg.SegmentChangedError, match="deleted after the query was planned"):
        list(seg.read_slice(plan.slices[0]))


def test_subscribe_pattern_skips_internal_topics_and_assign_picks_partitions(tmp_path):
    d = tmp_path / "d1"
    for topic, p in (("tweets", 0), ("tweets", 1), ("tweets-archive", 0), ("__consumer_offsets", 0)):
        lg = make_log(d, topic=topic, partition=p)
        fill(lg, 1)
        lg.close()
    plan = opt.plan_read({"path": str(d), "subscribePattern": "tweets.*|__.*"})
    assert sorted({(p.topic, p.partition) for p in plan.partitions}) == [
        ("tweets", 0),
        ("tweets", 1),
        ("tweets-archive", 0),
    ]
    plan = opt.plan_read({"path": str(d), "assign": '{"tweets":[1],"__consumer_offsets":[0]}'})
    assert sorted((p.topic, p.partition) for p in plan.partitions) == [("__consumer_offsets", 0), ("tweets", 1)]
    plan = opt.plan_read({"path": str(d), "SUBSCRIBE": "tweets"})  # option names are case-insensitive, as in Spark
    assert len(plan.partitions) == 2


@pytest.mark.parametrize(
    "options, message",
    [
        ({"subscribe": "tweets"}, "option 'path' is required"),
        ({"path": "/nonexistent/kl", "subscribe": "tweets"}, "data directory /nonexistent/kl does not exist"),
        ({"subscribe": "nope"}, "unknown topic 'nope'.*topics there: tweets"),
        ({}, "exactly one of the options subscribe, subscribePattern, assign"),
        ({"subscribe": "tweets", "assign": '{"tweets":[0]}'}, "exactly one of .* \\(got assign, subscribe\\)"),
        ({"subscribePattern": "zzz.*"}, "matches no topic"),
        ({"subscribePattern": "(("}, "not a valid regular expression"),
        ({"assign": "{not json"}, "assign is not valid JSON"),
        ({"assign": '{"tweets":[7]}'}, "tweets-7 has no replica"),
        ({"subscribe": "tweets", "startingOffsets": "{bad json"}, "startingOffsets is neither earliest/latest nor"),
        ({"subscribe": "tweets", "startingOffsets": '{"tweets":[1,2]}'}, "must be an object of partitions"),
        ({"subscribe": "tweets", "startingOffsets": '{"tweets":{"x":1}}'}, "partition 'x' of topic 'tweets'"),
        ({"subscribe": "tweets", "startingOffsets": '{"other":{"0":1}}'}, "names topic 'other', which is not read"),
        ({"subscribe": "tweets", "startingOffsets": "latest"}, "latest \\(-1\\) is not allowed"),
        ({"subscribe": "tweets", "endingOffsets": '{"tweets":{"0":-2}}'}, "earliest \\(-2\\) is not allowed"),
        (
            {"subscribe": "tweets", "startingOffsets": '{"tweets":{"0":9}}', "endingOffsets": '{"tweets":{"0":3}}'},
            "is after endingOffsets",
        ),
        ({"subscribe": "tweets", "includeHeaders": "yes"}, "includeHeaders must be true or false"),
        ({"subscribe": "tweets", "minPartitions": "0"}, "minPartitions must be a positive integer"),
    ],
)
def test_bad_options_give_clear_errors(tmp_path, options, message):
    d = tmp_path / "d1"
    lg = make_log(d)
    fill(lg, 1)
    lg.close()
    if "path" not in options and not message.startswith("option 'path'"):
        options = {"path": str(d), **options}
    with pytest.raises(seg.LogReadError, match=message):
        opt.plan_read(options)


def test_a_partition_missing_from_every_dir_is_an_error(tmp_path):
    d = tmp_path / "d1"
    for p in (0, 2):
        lg = make_log(d, partition=p)
        fill(lg, 1)
        lg.close()
    with pytest.raises(seg.LogReadError, match="tweets-1 has no replica"):
        opt.plan_read({"path": str(d), "subscribe": "tweets"})


def test_not_a_data_dir(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(seg.LogReadError, match="no Kafka Lite data"):
        opt.plan_read({"path": str(tmp_path / "empty"), "subscribe": "tweets"})


def test_paths_json_list_as_load_passes_it(tmp_path):
    d = tmp_path / "d1"
    lg = make_log(d)
    fill(lg, 1)
    lg.close()
    assert len(read_all({"paths": json.dumps([str(d)]), "subscribe": "tweets"})) == 10


def test_read_committed_skips_aborted_transactions_and_stops_at_the_last_stable_offset(tmp_path):
    """kafka.isolation.level=read_committed over segment files: the aborted transactions from the .txnindex
    files are skipped, markers never shown, and the read stops at the first offset of a transaction still open
    (from the producer-state snapshot and the headers after it); read_uncommitted still reads everything."""
    from broker.metadata.image import PartitionState
    from broker.replica.partition import Partition

    d = tmp_path / "d1"
    lg = make_log(d, segment_bytes=400)
    p = Partition("tweets", 0, lg, 1, 1, 30_000, lambda *a: None)
    p.apply_state(PartitionState(0, 1, 0, [1], [1]), T0)

    def txn(pid: int, seq: int, values: list[str]) -> None:
        recs = [(i, 0, b"k", v.encode(), None) for i, v in enumerate(values)]
        raw = fmt.build(recs, T0, T0, producer_id=pid, producer_epoch=0, base_sequence=seq, transactional=True)
        p.append_as_leader(raw, 1, T0)

    def end(pid: int, commit: bool) -> None:
        p.append_as_leader(fmt.build_marker(pid, 0, commit, 1, T0), 1, T0, markers=True)

    txn(1, 0, ["c1", "c2"])
    end(1, True)
    txn(2, 0, ["a1", "a2", "a3"])  # aborted, across segments with producer 3's committed records
    txn(3, 0, ["c3"])
    txn(2, 3, ["a4"])
    end(2, False)
    end(3, True)
    append(lg, 2, start=100)  # plain records k100, k101
    txn(4, 0, ["open"])  # still open: the LSO
    append(lg, 1, start=200)  # after the LSO: not read committed
    p.take_producer_snapshot()
    lg.close()
    assert len(list((d / "tweets-0").glob("*.txnindex"))) == 1

    base = {"path": str(d), "subscribe": "tweets"}
    committed = [r[4] for r in read_all({**base, "kafka.isolation.level": "read_committed"})]
    assert committed == [b"c1", b"c2", b"c3", b"v100", b"v101"]
    everything = [r[4] for r in read_all(base)]
    assert everything == [b"c1", b"c2", b"a1", b"a2", b"a3", b"c3", b"a4", b"v100", b"v101", b"open", b"v200"]
    with pytest.raises(seg.LogReadError, match="kafka.isolation.level"):
        opt.plan_read({**base, "kafka.isolation.level": "committed"})


def test_a_cleaned_log_with_delete_horizon_batches_reads_with_its_own_timestamps(tmp_path):
    """The Spark segment reader over a log the cleaner flagged (KIP-534): a tombstone's batch and a lone abort
    marker carry the delete horizon as base timestamp; rows keep their records' timestamps, the tombstone reads
    as a null value, the marker never shows, read_committed and read_uncommitted alike."""
    from broker.log.cleaner import LogCleaner
    from broker.metadata.image import PartitionState
    from broker.replica.partition import Partition
    from tests.unit.test_log_support import FakeClock

    clock = FakeClock(T0 + 10**6)
    d = tmp_path / "d1"
    cfg = LogConfig(segment_bytes=200, index_interval_bytes=0, cleanup_policy="compact", min_cleanable_dirty_ratio=0.01)
    lg = Log(d / "tweets-0", "tweets", 0, cfg, clean_shutdown=True, clock=clock)
    p = Partition("tweets", 0, lg, 1, 1, 30_000, lambda *a: None)
    p.apply_state(PartitionState(0, 1, 0, [1], [1]), T0)

    def put(key: bytes, value: bytes | None, ts: int, pid: int = -1) -> None:
        raw = fmt.build([(0, 0, key, value, None)], ts, ts, producer_id=pid, producer_epoch=0,
                        base_sequence=0 if pid >= 0 else -1, transactional=pid >= 0)  # fmt: skip
        p.append_as_leader(raw, 1, T0)

    put(b"gone", b"old", T0 + 1)
    put(b"gone", None, T0 + 2)
    put(b"aborted", b"never", T0 + 3, pid=7)
    p.append_as_leader(fmt.build_marker(7, 0, False, 1, T0 + 4), 1, T0, markers=True)
    put(b"kept", b"v", T0 + 5)
    lg.roll()
    cleaner = LogCleaner(clock)
    for i in range(2):  # the second cleaning finds the abort marker alone
        assert len(cleaner.clean_logs({d: {("tweets", 0): lg}}, lambda tp: p.last_stable_offset)) == 1
        put(b"more-%d" % i, b"x", T0 + 10 + i)
        lg.roll()
    flagged = [(h.is_control, h.delete_horizon_ms) for _, h in fmt.iter_batches(lg.read(0, 10**6))]
    horizon = clock.ms + 86_400_000
    assert flagged[:2] == [(False, horizon), (True, horizon)]
    lg.close()

    for isolation in ("read_committed", "read_uncommitted"):
        plan = opt.plan_read({"path": str(d), "subscribe": "tweets", "kafka.isolation.level": isolation})
        t = pa.Table.from_batches([rb for sl in plan.slices for rb in record_batches(sl, False)]).to_pydict()
        rows = list(zip(t["offset"], t["key"], t["value"], [round(ts.timestamp() * 1000) for ts in t["timestamp"]]))
        assert rows == [
            (1, b"gone", None, T0 + 2),
            (4, b"kept", b"v", T0 + 5),
            (5, b"more-0", b"x", T0 + 10),
            (6, b"more-1", b"x", T0 + 11),
        ], isolation
