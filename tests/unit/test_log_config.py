from __future__ import annotations

import pytest

from broker.log.config import LogConfig
from net.errors import ErrorCode, InvalidConfigError


def test_kafka_defaults():
    props = LogConfig().to_props()
    assert props["segment.bytes"] == "1073741824"
    assert props["segment.ms"] == "604800000"
    assert props["retention.ms"] == "604800000"
    assert props["retention.bytes"] == "-1"
    assert props["index.interval.bytes"] == "4096"
    assert props["segment.index.bytes"] == "10485760"
    assert props["max.message.bytes"] == "1048588"
    assert props["message.timestamp.type"] == "CreateTime"
    assert props["min.insync.replicas"] == "1"
    assert props["cleanup.policy"] == "delete"
    assert props["unclean.leader.election.enable"] == "false"
    assert props["flush.messages"] == str(2**63 - 1)
    assert props["flush.ms"] == str(2**63 - 1)


def test_from_props_parses_strings_and_ints():
    cfg = LogConfig.from_props(
        {
            "segment.bytes": "1024",
            "retention.ms": -1,
            "message.timestamp.type": "LogAppendTime",
            "unclean.leader.election.enable": "true",
            "cleanup.policy": "delete,compact",
        }
    )
    assert cfg.segment_bytes == 1024 and cfg.retention_ms == -1
    assert cfg.log_append_time and cfg.unclean_leader_election_enable
    # Kafka's list type keeps the order given (Kafka describes `delete,compact` as written)
    assert cfg.cleanup_policy == "delete,compact" and cfg.delete_enabled and cfg.compact_enabled
    assert LogConfig.from_props(cfg.to_props()) == cfg


def test_merged_keeps_base_values():
    base = LogConfig.from_props({"segment.bytes": "2048"})
    merged = base.merged({"retention.bytes": "100"})
    assert (merged.segment_bytes, merged.retention_bytes) == (2048, 100)
    assert base.retention_bytes == -1
    assert not LogConfig.from_props({"cleanup.policy": "compact"}).delete_enabled


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("segment.bytes", "abc"),
        ("segment.bytes", "10"),  # below Kafka's minimum of 14
        ("segment.bytes", str(2**31)),
        ("retention.ms", "-2"),
        ("segment.ms", "0"),
        ("min.insync.replicas", 0),
        ("message.timestamp.type", "WallClock"),
        ("cleanup.policy", "forever"),
        ("unclean.leader.election.enable", "maybe"),
        ("index.interval.bytes", 1.5),
        ("max.message.bytes", True),
        ("no.such.config", "1"),
    ],
)
def test_invalid_values_name_the_key(key, value):
    with pytest.raises(InvalidConfigError) as ei:
        LogConfig.from_props({key: value})
    assert key in str(ei.value)
    assert ei.value.code == ErrorCode.INVALID_CONFIG
