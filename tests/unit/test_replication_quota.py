"""Replication throttles, sans-IO (broker/quota/replication_quota.py, broker/server/dynamic_config.py): which partitions
a
throttled-replica list throttles on a broker, the quota over its window, and the dynamic broker config rules."""

from __future__ import annotations

import pytest

from broker.quota.client_quota import Rate
from broker.quota.replication_quota import ALL_PARTITIONS, UNLIMITED, ReplicationQuota, throttled_partitions
from broker.server.dynamic_config import altered, broker_resource, effective
from net.errors import ErrorCode, KafkaLiteError

RATE = "leader.replication.throttled.rate"


def test_a_list_throttles_the_partitions_named_with_this_broker():
    assert throttled_partitions("0:1,1:2,2:1", 1) == {0, 2}
    assert throttled_partitions("0:1,1:2", 3) == frozenset()
    assert throttled_partitions("*", 3) is ALL_PARTITIONS
    assert throttled_partitions("", 1) == frozenset()


def test_the_quota_is_exceeded_once_the_window_rate_passes_the_rate_and_recovers_as_samples_age():
    rate = {"value": 1000}
    lists = {"t": "0:1"}
    q = ReplicationQuota(1, lambda: rate["value"], lambda t: lists.get(t, ""), window_num=2, window_size_s=1.0)
    assert q.is_throttled("t", 0) and not q.is_throttled("t", 1) and not q.is_throttled("other", 0)
    assert not q.exceeded(0.0)
    q.record(900, 0.0)  # 900 B over the minimum elapsed of 1 s: under 1000 B/s
    assert not q.exceeded(0.1)
    q.record(300, 0.2)  # 1200 B/s
    assert q.exceeded(0.3)
    assert q.exceeded(1.1)  # 1200 B over 1.1 s: still above
    assert not q.exceeded(1.3)  # 1200 B over 1.3 s
    assert not q.exceeded(5.0)  # the samples aged out
    lists["t"] = "*"  # a new value is parsed again
    assert q.is_throttled("t", 7)
    rate["value"] = UNLIMITED  # no throttle whatever was recorded
    q.record(10**9, 5.0)
    assert not q.exceeded(5.0) and not q.limited


def test_rate_measure_records_nothing():
    r = Rate(3, 1.0)
    assert r.measure(0.0) == 0.0
    r.record(2000, 0.0)
    assert r.measure(0.5) == r.measure(0.5) == 1000.0  # over the minimum elapsed: 2 samples of 1 s


def test_dynamic_broker_config_rules_are_kafkas():
    static = frozenset({"log.dirs", "num.partitions", RATE})
    assert altered({}, {RATE: "1000"}, static) == {RATE: "1000"}
    assert altered({RATE: "5", "follower.replication.throttled.rate": "6"}, {RATE: None}, static) == {
        "follower.replication.throttled.rate": "6"
    }
    refusals = [
        ({"log.dirs": "/tmp"}, ErrorCode.INVALID_REQUEST, "Cannot update these configs dynamically"),
        ({RATE: "-1"}, ErrorCode.INVALID_REQUEST, "at least 0"),  # Kafka's code for a bad value (KAFKA-13609)
        ({RATE: "fast"}, ErrorCode.INVALID_REQUEST, "LONG"),
        ({RATE: str(2**63)}, ErrorCode.INVALID_REQUEST, "at least 0"),
        ({RATE: ["append", "5"]}, ErrorCode.INVALID_CONFIG, "append is not allowed"),
    ]
    for changes, code, text in refusals:
        with pytest.raises(KafkaLiteError) as e:
            altered({}, changes, static)
        assert e.value.code == code and text in str(e.value), changes
    # a key that is no broker config is kept, as Kafka keeps it (kafkajs's suite sets cleanup.policy on a broker)
    assert altered({}, {"cleanup.policy": "delete"}, static) == {"cleanup.policy": "delete"}
    assert broker_resource(" 2 ") == "2" and broker_resource("") == ""
    with pytest.raises(KafkaLiteError) as e:
        broker_resource("broker-1")
    assert e.value.code == ErrorCode.INVALID_REQUEST


def test_the_most_specific_dynamic_value_wins():
    dynamic = {"1": {RATE: "10"}, "": {RATE: "20"}}
    assert effective(dynamic, 1, RATE, 99)[0] == 10
    assert effective(dynamic, 2, RATE, 99)[0] == 20
    assert effective({}, 2, RATE, 99)[0] == 99
