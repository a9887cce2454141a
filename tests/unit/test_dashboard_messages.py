"""The Messages page's reading plan (client/dashboard/messages.py): where each partition's read starts, and
how records of several partitions merge by time, newest first, with batches that share one timestamp."""

from client.consumer import TopicPartition
from client.dashboard.messages import merge_key, render_bytes, start_offset
from client.fetcher import ConsumerRecord


def rec(partition: int, offset: int, ts: int) -> ConsumerRecord:
    return ConsumerRecord(("t", partition, offset, ts, b"k", b"v", []))


def test_start_offsets_per_mode():
    assert start_offset("newest", 10, 100, 50, None, None) == 50
    assert start_offset("newest", 80, 100, 50, None, None) == 80  # not before the log start
    assert start_offset("beginning", 10, 100, 50, None, None) == 10
    assert start_offset("offset", 10, 100, 50, 5, None) == 10
    assert start_offset("offset", 10, 100, 50, 500, None) == 100
    assert start_offset("timestamp", 10, 100, 50, None, 42) == 42
    assert start_offset("timestamp", 10, 100, 50, None, -1) == 100  # nothing at/after the time: nothing to read


def test_partitions_merge_newest_first_and_take_turns_within_one_batch_time():
    end = {TopicPartition("t", 0): 10, TopicPartition("t", 1): 20}
    first = {TopicPartition("t", 0): 7, TopicPartition("t", 1): 17}
    # Partition 0's last three records share one batch time, partition 1's too; partition 1 has one newer.
    records = [rec(0, 7, 100), rec(0, 8, 100), rec(0, 9, 100), rec(1, 17, 100), rec(1, 18, 100), rec(1, 19, 200)]
    newest = sorted(records, key=lambda r: merge_key(r, True, end, first), reverse=True)
    assert [(r.partition, r.offset) for r in newest] == [(1, 19), (0, 9), (1, 18), (0, 8), (1, 17), (0, 7)]
    oldest = sorted(records, key=lambda r: merge_key(r, False, end, first))
    assert [(r.partition, r.offset) for r in oldest] == [(0, 7), (1, 17), (0, 8), (1, 18), (0, 9), (1, 19)]


def test_values_render_as_json_text_or_hex():
    assert render_bytes(b'{"a": 1}') == {"kind": "json", "text": '{\n  "a": 1\n}'}
    assert render_bytes(b"plain") == {"kind": "text", "text": "plain"}
    assert render_bytes(b"\xff\x00")["kind"] == "hex"
    assert render_bytes(None) == {"kind": "null", "text": "null"}
