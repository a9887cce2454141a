"""The sans-IO parts of share group offsets (Alter/DeleteShareGroupOffsets, issue 29 §2): kl-share-groups'
--to-datetime as Kafka reads it, the topics a group keeps for its offsets, which leaders' share sessions a group
has, and a leader forgetting an idle group's share-partitions once their state is written."""

from __future__ import annotations

import asyncio
import datetime

import click
import pytest

from broker.group.share_membership import ShareGroupMembership
from broker.share.manager import Key, SharePartitionManager
from broker.share.partition import SharePartition, StateBatch
from broker.share.sessions import ShareSessionCache
from client.cli.share_groups import parse_datetime
from net.errors import ErrorCode, KafkaLiteError

UTC_2024 = int(datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC).timestamp() * 1000)


@pytest.mark.parametrize(
    "text,ms",
    [
        ("2024-01-01T00:00:00.000", UTC_2024),  # no zone: UTC (Kafka's Utils.getDateTime appends "Z")
        ("2024-01-01T00:00:00.000Z", UTC_2024),
        ("2024-01-01T01:00:00.000+01:00", UTC_2024),
        ("2024-01-01T01:00:00.000+0100", UTC_2024),
        ("2024-01-01T01:00:00.000+01", UTC_2024),
        ("2023-12-31T22:30:00.250-01:30", UTC_2024 + 250),
    ],
)
def test_to_datetime_is_read_as_kafka_reads_it(text, ms):
    assert parse_datetime(text) == ms


@pytest.mark.parametrize(
    "text", ["2024-01-01", "2024-01-01T00:00:00", "2024-02-30T00:00:00.000", "2024-01-01T25:00:00.000", "yesterday"]
)
def test_a_datetime_kafka_would_not_parse_is_a_usage_error(text):
    with pytest.raises(click.UsageError):
        parse_datetime(text)


def test_a_group_keeps_the_topics_its_members_subscribed_to_after_they_leave():
    g = ShareGroupMembership(45_000)
    r = g.heartbeat(0, "g", "m1", 0, ("a",), {"a": 1, "b": 1}, now_ms=0)
    g.heartbeat(0, "g", "m1", r.member_epoch, ("b",), {"a": 1, "b": 1}, now_ms=1)
    g.heartbeat(0, "g", "m1", -1, None, {"a": 1, "b": 1}, now_ms=2)
    assert g.groups["g"].state == "Empty" and g.groups["g"].topics == {"a", "b"}


def test_a_leader_knows_whether_a_group_has_sessions_here():
    c = ShareSessionCache(max_sessions=10, idle_ms=1000)
    c.open("g", "m1", now_ms=0)
    c.open("h", "m1", now_ms=0)
    assert c.has_group("g") and c.has_group("h") and not c.has_group("other")
    c.close("g", "m1")
    assert not c.has_group("g") and c.has_group("h")
    assert [s.group_id for s in c.evict_idle(now_ms=5000)] == ["h"]
    assert not c.has_group("h")


class MemoryPersister:
    """The Persister protocol over a dict (the share coordinator's part is tested with brokers)."""

    def __init__(self) -> None:
        self.states: dict[Key, tuple[int, int, list[StateBatch]]] = {}
        self.fail = False

    async def read(self, key: Key) -> tuple[int, int, list[StateBatch]] | None:
        return self.states.get(key)

    async def write(self, key: Key, state_epoch: int, start_offset: int, batches: list[StateBatch]) -> None:
        if self.fail:
            raise KafkaLiteError("the coordinator is away", ErrorCode.COORDINATOR_NOT_AVAILABLE)
        self.states[key] = (state_epoch, start_offset, list(batches))

    async def initialize(self, key: Key, start_offset: int) -> None:
        epoch = self.states[key][0] + 1 if key in self.states else 1
        self.states[key] = (epoch, start_offset, [])

    async def delete(self, key: Key) -> None:
        self.states.pop(key, None)


def _manager(persister: MemoryPersister) -> SharePartitionManager:
    return SharePartitionManager(None, None, persister)  # type: ignore[arg-type]  # no loads here


def _partition(start: int) -> SharePartition:
    sp = SharePartition(start, lock_duration_ms=30_000, delivery_count_limit=5)
    sp.state_epoch = 1
    return sp


def test_an_idle_groups_share_partitions_are_forgotten_once_written():
    async def go() -> None:
        persister = MemoryPersister()
        m = _manager(persister)
        mine, other = ("g", "t", 0), ("h", "t", 0)
        m.partitions[mine], m.partitions[other] = _partition(7), _partition(3)
        m.partitions[mine].dirty = True  # released records, say: written before it is dropped
        m.forget_group("g", lambda: True)
        await asyncio.sleep(0.01)
        assert mine not in m.partitions and other in m.partitions
        assert persister.states[mine][1] == 7  # written first: nothing the leader knew is lost

    asyncio.run(go())


def test_a_group_whose_member_came_back_or_whose_write_failed_is_kept():
    async def go() -> None:
        persister = MemoryPersister()
        m = _manager(persister)
        key = ("g", "t", 0)
        m.partitions[key] = _partition(4)
        m.forget_group("g", lambda: False)  # a member opened a session meanwhile: it goes on with this state
        await asyncio.sleep(0.01)
        assert key in m.partitions
        persister.fail = True
        m.partitions[key].dirty = True
        m.forget_group("g", lambda: True)
        await asyncio.sleep(0.01)
        assert key in m.partitions and m.partitions[key].dirty  # not written: kept, written again by a tick

    asyncio.run(go())


# --- the share coordinator's initialize and delete, over a real __share_group_state partition ----------------


def _coordinator(tmp_path):
    from broker.log.config import LogConfig
    from broker.log.log import Log
    from broker.metadata.image import PartitionState
    from broker.replica.partition import Partition
    from broker.replica.replica_manager import ReplicaManager
    from broker.share.coordinator import ShareCoordinator
    from broker.share.state_records import SHARE_STATE_TOPIC

    log = Log(tmp_path / f"{SHARE_STATE_TOPIC}-0", SHARE_STATE_TOPIC, 0, LogConfig.from_props({}))
    part = Partition(SHARE_STATE_TOPIC, 0, log, 1, 1, 30_000, propose_isr=lambda *a: None)
    part.apply_state(PartitionState(0, 1, 1, [1], [1], 1), 0)
    rm = ReplicaManager(1, None, None, 30_000, lambda *a: None)  # type: ignore[arg-type]
    rm.partitions = {(SHARE_STATE_TOPIC, 0): part}
    return ShareCoordinator(rm, 1, 5000), part


async def _led(coordinator, part) -> None:
    coordinator.on_partition_change(part, "leader")
    for _ in range(100):
        if isinstance(coordinator.states.get(0), dict):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the coordinator did not load")


def test_initialize_fences_the_leader_that_held_the_old_state(tmp_path):
    from broker.share.coordinator import StateError
    from broker.share.state_records import ShareSnapshot

    async def go() -> None:
        c, part = _coordinator(tmp_path)
        await _led(c, part)
        key = ("g", "ab" * 16, 0)
        await c.write(0, key, ShareSnapshot(3, 40, [StateBatch(40, 41, 0, 1)]))  # a leader of state epoch 3
        reset = await c.initialize(0, key, -1, 7)  # AlterShareGroupOffsets
        assert (reset.state_epoch, reset.start_offset, reset.batches) == (4, 7, [])
        with pytest.raises(StateError) as e:
            await c.write(0, key, ShareSnapshot(3, 42, []))  # the old leader's next write
        assert e.value.code == ErrorCode.FENCED_STATE_EPOCH
        assert c.read(0, key).start_offset == 7

    asyncio.run(go())


def test_a_deleted_state_is_not_written_back_and_survives_a_new_coordinator(tmp_path):
    from broker.share.coordinator import StateError
    from broker.share.state_records import ShareSnapshot

    async def go() -> None:
        c, part = _coordinator(tmp_path)
        await _led(c, part)
        key = ("g", "cd" * 16, 0)
        await c.write(0, key, ShareSnapshot(5, 10, []))
        await c.delete(0, key)  # DeleteShareGroupOffsets
        await c.delete(0, key)  # again: nothing to delete, no error
        assert (c.read(0, key).state_epoch, c.read(0, key).start_offset) == (5, -1)  # no start: auto.offset.reset
        with pytest.raises(StateError) as e:
            await c.write(0, key, ShareSnapshot(5, 12, []))  # a leader that still held the state
        assert e.value.code == ErrorCode.FENCED_STATE_EPOCH
        # a new coordinator (the partition's next leader) reads the tombstone: the same answers
        again = type(c)(c.replica_manager, 1, 5000)
        await _led(again, part)
        assert (again.read(0, key).state_epoch, again.read(0, key).start_offset) == (5, -1)
        with pytest.raises(StateError):
            await again.write(0, key, ShareSnapshot(5, 12, []))
        await again.write(0, key, ShareSnapshot(6, 0, []))  # the next leader's state, one epoch past
        assert again.read(0, key).start_offset == 0 and key not in again.deleted[0]

    asyncio.run(go())
