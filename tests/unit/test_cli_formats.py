"""kl-metadata-quorum's and kl-log-dirs's output, from answers built here: Kafka's lag rules and layouts on a
three-voter quorum with an observer, and Kafka's error names."""

from __future__ import annotations

import dataclasses

from client.cli.log_dirs import as_json, exception_name
from client.cli.metadata_quorum import replication_rows, status_lines, table
from net.errors import ErrorCode
from net.schema.describe_log_dirs import DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic
from net.schema.describe_quorum import DescribeQuorumResponsePartitionData, ReplicaState


def _quorum() -> DescribeQuorumResponsePartitionData:
    return DescribeQuorumResponsePartitionData(
        leader_id=2,
        leader_epoch=7,
        high_watermark=100,
        current_voters=(
            ReplicaState(replica_id=1, log_end_offset=90, last_fetch_timestamp=5_000, last_caught_up_timestamp=4_000),
            ReplicaState(replica_id=2, log_end_offset=100, last_fetch_timestamp=6_000, last_caught_up_timestamp=6_000),
            ReplicaState(replica_id=3, log_end_offset=100, last_fetch_timestamp=5_900, last_caught_up_timestamp=5_900),
        ),
        observers=(ReplicaState(replica_id=4, log_end_offset=80),),  # never fetched: its timestamps -1
    )


def test_status_lag_is_the_leader_against_the_furthest_behind_voter():
    lines = status_lines("cid", _quorum())
    assert lines == [
        "ClusterId:              cid",
        "LeaderId:               2",
        "LeaderEpoch:            7",
        "HighWatermark:          100",
        "MaxFollowerLag:         10",
        "MaxFollowerLagTimeMs:   2000",
        "CurrentVoters:          [1,2,3]",
        "CurrentObservers:       [4]",
    ]


def test_replication_lists_the_leader_first_then_followers_then_observers():
    rows = replication_rows(_quorum(), human=False, now_ms=7_000)
    assert [r[0] for r in rows[1:]] == ["2", "1", "3", "4"]
    assert rows[1] == ["2", "100", "0", "6000", "6000", "Leader"]
    assert rows[2] == ["1", "90", "10", "5000", "4000", "Follower"]
    assert rows[4] == ["4", "80", "20", "-1", "-1", "Observer"]
    ahead = dataclasses.replace(_quorum(), observers=(ReplicaState(replica_id=5, log_end_offset=101),))
    assert replication_rows(ahead, human=False, now_ms=7_000)[-1][2] == "-1"  # Kafka prints the raw difference
    assert replication_rows(_quorum(), human=True, now_ms=7_000)[2][3:5] == ["2000 ms ago", "3000 ms ago"]
    lines = table(rows)
    assert lines[0].split("\t")[0].strip() == "NodeId" and lines[0].split() == rows[0]
    assert lines[0].index("LogEndOffset") == lines[1].index("100")  # padded columns, tab-separated


def test_log_dirs_json_and_error_names():
    assert exception_name(0) is None
    assert exception_name(ErrorCode.KAFKA_STORAGE_ERROR) == "org.apache.kafka.common.errors.KafkaStorageException"
    result = DescribeLogDirsResult(
        error_code=0,
        log_dir="/d",
        topics=(
            DescribeLogDirsTopic(name="a", partitions=(DescribeLogDirsPartition(partition_index=1, partition_size=5),)),
            DescribeLogDirsTopic(name="b", partitions=(DescribeLogDirsPartition(partition_index=0),)),
        ),
    )
    out = as_json({1: (result,)}, {"a"})
    assert out == {
        "brokers": [
            {
                "broker": 1,
                "logDirs": [
                    {
                        "partitions": [{"partition": "a-1", "size": 5, "offsetLag": 0, "isFuture": False}],
                        "error": None,
                        "logDir": "/d",
                    }
                ],
            }
        ],
        "version": 1,
    }


def test_get_offsets_filters_and_times():
    import click
    import pytest

    from client.cli.get_offsets import _selected, parse_time, parse_topic_partitions

    assert [parse_time(t) for t in ("latest", "earliest", "max-timestamp", "-4", "1700000000000")] == [
        -1, -2, -3, -4, 1700000000000,
    ]  # fmt: skip
    for bad in ("-6", "later", "1.5"):
        with pytest.raises(click.ClickException):
            parse_time(bad)
    (rx, parts), (rx2, parts2), (rx3, parts3) = parse_topic_partitions("a.*:2-4,b:7,:-2")
    assert rx.fullmatch("abc") and not rx.fullmatch("xa")
    assert [p for p in range(6) if _selected(p, parts)] == [2, 3]  # the upper bound is exclusive, as Kafka's
    assert [p for p in range(9) if _selected(p, parts2)] == [7] and rx2.fullmatch("b")
    assert [p for p in range(4) if _selected(p, parts3)] == [0, 1] and rx3.fullmatch("anything")
    ((rx4, parts4),) = parse_topic_partitions("a:")  # `topic:` is every partition
    assert parts4 is None and rx4.fullmatch("a")
    for bad in ("a:x", "a:1-2-3", ","):
        with pytest.raises(click.ClickException):
            parse_topic_partitions(bad)
