"""KIP-599's controller mutation quota (broker/quota/mutation_quota.py) and KIP-578's partition caps
(broker/controller/logic.py), sans-IO."""

from __future__ import annotations

import asyncio

import pytest

from broker.controller.channel import envelope, unwrap
from broker.controller.logic import ControllerLogic, PartitionLimits
from broker.network.server import INTER_BROKER_LISTENER, ConnectionContext
from broker.quota.client_quota import CONTROLLER_MUTATION_RATE, ClientQuotaManager
from broker.quota.mutation_quota import ControllerMutationQuota, MutationMeter
from broker.server.admin_apis import strict_quota
from net.errors import ErrorCode, PolicyViolationError, ThrottlingQuotaExceededError
from net.messages import MessageError
from net.protocol import ApiKey
from net.schema.create_topics import CreateTopicsRequest
from tests.unit.test_controller import apply, cluster


def quota(quotas: dict, window_num: int = 10) -> ControllerMutationQuota:
    return ControllerMutationQuota(ClientQuotaManager(lambda: quotas), window_num, 1.0)


def test_a_user_may_burst_rate_times_window_then_waits_for_tokens():
    q = quota({(("user", "mallory"),): {CONTROLLER_MUTATION_RATE: 5.0}})  # burst 5 x 10 s = 50
    assert q.throttle_ms("mallory", "c", 0.0) == 0
    assert q.record("mallory", "c", 40, 0.0) == 0
    assert q.throttle_ms("mallory", "c", 0.0) == 0  # 10 tokens left: one more topic is admitted...
    assert q.record("mallory", "c", 30, 0.0) == 4000  # ...and may take the bucket below zero (-20 / 5 per s)
    assert q.throttle_ms("mallory", "c", 2.0) == 2000
    assert q.throttle_ms("mallory", "c", 4.0) == 0
    assert q.throttle_ms("alice", "c", 4.0) == 0  # no quota for alice: never throttled
    assert q.record("alice", "c", 10**6, 4.0) == 0


def test_the_default_user_quota_is_metered_per_user():
    q = quota({(("user", None),): {CONTROLLER_MUTATION_RATE: 1.0}})  # burst 10 each
    q.record("a", "", 11, 0.0)
    assert q.throttle_ms("a", "", 0.0) > 0
    assert q.throttle_ms("b", "", 0.0) == 0


def run(coro):
    return asyncio.run(coro)


def test_strict_meter_refuses_with_throttling_quota_exceeded_and_gives_back_failed_changes():
    q = quota({(("user", "m"),): {CONTROLLER_MUTATION_RATE: 1.0}}, window_num=5)  # burst 5
    meter = MutationMeter(q, "m", "", True, lambda: 0.0)
    done = []

    async def create() -> None:
        done.append(1)

    async def fail() -> None:
        raise PolicyViolationError("over a cap")

    with pytest.raises(PolicyViolationError):
        run(meter.mutate(4, fail))
    assert q.throttle_ms("m", "", 0.0) == 0  # the failed creation took nothing
    run(meter.mutate(6, create))
    assert meter.throttle_ms == 1000
    with pytest.raises(ThrottlingQuotaExceededError) as e:
        run(meter.mutate(1, create))
    assert e.value.code == ErrorCode.THROTTLING_QUOTA_EXCEEDED == 89
    assert "controller_mutation_rate" in str(e.value) and done == [1]
    permissive = MutationMeter(q, "m", "", False, lambda: 0.0)  # an old Kafka client: admitted, throttled
    run(permissive.mutate(1, create))
    assert done == [1, 1] and permissive.throttle_ms == 2000


def test_partition_caps_refuse_the_whole_creation_naming_the_cap():
    image, logic = cluster(3)
    logic.limits = PartitionLimits(max_partitions=100, max_broker_partitions=80)
    apply(image, logic.create_topic("a", 40, 3, {}))  # 40 partitions, 40 replicas on each broker
    with pytest.raises(PolicyViolationError, match=r"on broker \d, above max\.broker\.partitions=80") as e:
        logic.create_topic("b", 41, 3, {})  # 81 replicas per broker
    assert e.value.code == ErrorCode.POLICY_VIOLATION
    with pytest.raises(PolicyViolationError, match=r"to 101, above max\.partitions=100"):
        logic.create_topic("b", 61, 1, {})  # 61 more replicas spread over 3 brokers fit; 101 partitions do not
    with pytest.raises(PolicyViolationError, match=r"max\.broker\.partitions=80"):
        logic.create_partitions("a", 81)
    assert set(image.topics) == {"a"} and len(image.topics["a"].partitions) == 40
    apply(image, logic.create_topic("b", 40, 3, {}))  # exactly at the per-broker cap
    logic.limits = PartitionLimits(max_partitions=100, max_broker_partitions=200)
    apply(image, logic.create_topic("c", 20, 1, {}))  # exactly at the cluster cap
    assert sum(len(t.partitions) for t in image.topics.values()) == 100
    with pytest.raises(PolicyViolationError, match=r"max\.partitions=100"):
        logic.create_topic("d", 1, 1, {})


def test_no_caps_by_default_in_the_logic():
    image, logic = cluster(1)
    assert isinstance(logic, ControllerLogic) and logic.limits == PartitionLimits()
    apply(image, logic.create_topic("big", 10000, 1, {}))
    assert len(image.topics["big"].partitions) == 10000


def test_kafka_clients_too_old_for_the_error_are_throttled_instead():
    """KIP-599: THROTTLING_QUOTA_EXCEEDED from CreateTopics v6, CreatePartitions v3, DeleteTopics v5; older
    versions are admitted (permissive) and only their response is throttled. The version is the request's as the
    Kafka client made it (the connection's kafka_version, or the one an ENVELOPE carried); a native request is
    strict."""
    strict = {
        (ApiKey.CREATE_TOPICS, 5): False,
        (ApiKey.CREATE_TOPICS, 6): True,
        (ApiKey.CREATE_PARTITIONS, 2): False,
        (ApiKey.CREATE_PARTITIONS, 3): True,
        (ApiKey.DELETE_TOPICS, 4): False,
        (ApiKey.DELETE_TOPICS, 5): True,
    }
    broker = ConnectionContext("10.0.0.1:9000", INTER_BROKER_LISTENER)
    for (api, version), expected in strict.items():
        ctx = ConnectionContext("127.0.0.1:5000", wire="kafka")
        ctx.kafka_version = version
        assert strict_quota(api, ctx) is expected, (api.name, version)
        # forwarded to the controller: the envelope carries the version, its context is the client's
        wrapped = envelope(CreateTopicsRequest(), ctx)
        _, forwarded = unwrap(wrapped, broker)
        assert strict_quota(api, forwarded) is expected, (api.name, version, "forwarded")
        assert strict_quota(api, ConnectionContext("127.0.0.1:5000")) is True  # native
    _, native = unwrap(envelope(CreateTopicsRequest(), ConnectionContext("127.0.0.1:5000")), broker)
    assert native.kafka_version is None and strict_quota(ApiKey.CREATE_TOPICS, native)
    with pytest.raises(MessageError):  # a forged version is the envelope's INVALID_REQUEST
        unwrap(dict(wrapped, kafka_version=2**15), broker)
