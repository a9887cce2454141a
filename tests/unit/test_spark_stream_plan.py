"""The streaming source's pure parts: option checks, offsets JSON, rate limits, range splits."""

from __future__ import annotations

import dataclasses
import json

import pytest
from pyspark.sql.datasource_internal import ReadLimitRegistry
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMinRows

from pipeline import options as opt
from pipeline.remote import OffsetRange, split_ranges
from pipeline.segments import LogReadError
from pipeline.stream import KafkaLiteStreamReader, from_json, max_rows, rate_limit, to_json


def test_offsets_json_round_trips_in_sparks_kafka_form():
    offs = {("a", 0): 5, ("a", 1): 7, ("b", 0): 0}
    assert to_json(offs) == {"a": {"0": 5, "1": 7}, "b": {"0": 0}}
    assert from_json(to_json(offs)) == offs


def test_rate_limit_shares_the_cap_by_backlog_and_never_passes_the_latest():
    start = {("t", 0): 0, ("t", 1): 100}
    latest = {("t", 0): 300, ("t", 1): 200}
    end = rate_limit(start, latest, 200)
    assert end == {("t", 0): 150, ("t", 1): 150}  # backlogs 300 and 100: 3/4 and 1/4 of 200
    assert rate_limit(start, latest, 10_000) == latest
    assert sum(v - start[k] for k, v in rate_limit(start, latest, 1).items()) == 1


def test_read_limits_as_pyspark_hands_them_to_latest_offset():
    """The default limit goes to the JVM and back as PySpark's streaming runner sends it (a dataclass as JSON,
    rebuilt by its registry), so the field names are the installed PySpark's, not its docstrings'."""
    opts = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t", "maxOffsetsPerTrigger": "200"}
    default = KafkaLiteStreamReader(opts).getDefaultReadLimit()
    wire = json.dumps(dataclasses.asdict(default) | {"_type": type(default).__name__})
    assert max_rows(ReadLimitRegistry().get(json.loads(wire))) == 200
    uncapped = KafkaLiteStreamReader({k: v for k, v in opts.items() if k != "maxOffsetsPerTrigger"})
    assert max_rows(uncapped.getDefaultReadLimit()) is None
    assert max_rows(ReadAllAvailable()) is None
    for other in (ReadMinRows(5), ReadMaxBytes(1 << 20)):
        with pytest.raises(LogReadError, match="does not support the read limit"):
            max_rows(other)


def test_split_ranges_by_records_and_by_task_count():
    r = [OffsetRange("t", 0, 10, 110), OffsetRange("t", 1, 0, 0)]
    assert split_ranges(r, None, None) == [OffsetRange("t", 0, 10, 110)]
    pieces = split_ranges(r, None, 30)
    assert [(x.start, x.end) for x in pieces] == [(10, 40), (40, 70), (70, 100), (100, 110)]
    assert len(split_ranges(r, 4, None)) == 4


@pytest.mark.parametrize(
    "options, message",
    [
        ({}, "exactly one of the options subscribe"),
        ({"subscribe": "t", "endingOffsets": "latest"}, "batch queries only"),
        ({"subscribe": "t", "startingOffsets": "earliest", "startingTimestamp": "5"}, "not both"),
        ({"subscribe": "t", "startingTimestamp": "yesterday"}, "milliseconds since the epoch"),
        ({"subscribe": "t", "maxOffsetsPerTrigger": "0"}, "positive integer"),
        ({"subscribe": "t", "startingOffsets": "{bad"}, "neither earliest/latest nor valid JSON"),
    ],
)
def test_stream_options_fail_with_one_clear_sentence(options, message):
    with pytest.raises(LogReadError, match=message):
        opt.stream_spec(options)


def test_stream_defaults_are_sparks():
    spec = opt.stream_spec({"subscribe": "t"})
    assert spec.starting == "latest" and spec.fail_on_data_loss and not spec.include_headers
    assert spec.max_offsets_per_trigger is None and spec.timestamp_strategy == "error"


def test_offsets_of_a_topic_deleted_since_listing_leave_it_out_for_fail_on_data_loss_to_judge():
    """Found by CI: a query's latestOffset listed the partitions of a topic being deleted, whose ListOffsets then
    answered UNKNOWN_TOPIC_OR_PARTITION; the query failed with that error instead of failOnDataLoss's verdict.
    The partitions still there are answered, the gone topic's left out (and a topic still listed is an error)."""
    from client.topic_partition import TopicPartition
    from net.errors import KafkaLiteError, UnknownTopicOrPartitionError
    from pipeline.remote import LATEST, BrokerView

    class Cluster:  # what the view's consumer answers: "gone" was deleted after the partitions were listed
        topics = {"kept": [0, 1]}
        leaders_know = {"kept"}

        def list_offsets(self, tps: list[TopicPartition], which: int) -> dict[TopicPartition, int]:
            if any(tp.topic not in self.leaders_know for tp in tps):
                raise UnknownTopicOrPartitionError("list offsets for gone-0")
            return {tp: 10 * tp.partition + 5 for tp in tps}

        def list_topics(self) -> dict[str, list[int]]:
            return self.topics

    view = BrokerView.__new__(BrokerView)
    view.consumer, view.retries, view.retry_interval = Cluster(), 0, 0.0
    assert view.offsets([("gone", 0), ("kept", 0), ("kept", 1)], LATEST) == {("kept", 0): 5, ("kept", 1): 15}
    Cluster.topics["gone"] = [0]  # listed, yet unknown to its leader: not a deletion, so the error stands
    with pytest.raises(KafkaLiteError):
        view.offsets([("gone", 0), ("kept", 0)], LATEST)
