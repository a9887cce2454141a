"""broker/metadata/applier.py: what committed metadata makes of a broker's replicas, decided without I/O, and
carried out by the broker's ReplicaManager (the replication simulator carries out the same actions)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from broker.log.config import LogConfig
from broker.log.manager import LogManager
from broker.metadata import applier as metadata_apply
from broker.metadata.applier import (
    FOLLOWER,
    ISR,
    LEADER,
    NONE,
    OFFLINE,
    ApplyPartitionState,
    CreateReplica,
    FenceReplicas,
    MetadataApplier,
    RemoveReplica,
    ReplicaRole,
    StartFetching,
    StopFetching,
    role_change,
)
from broker.metadata.image import MetadataImage, PartitionState, partition_record
from broker.metadata.records import (
    BrokerRecord,
    ClusterRecord,
    ConfigRecord,
    GroupConfigRecord,
    MetadataDelta,
    MetadataRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from broker.replica.replica_manager import ReplicaManager

ME = 1


def topic(name: str = "t") -> TopicRecord:
    return TopicRecord(name, "id-" + name, {})


def part(
    p: int, leader: int, epoch: int, replicas: list[int], isr: list[int] | None = None, pe: int = 0
) -> PartitionRecord:
    return partition_record("t", PartitionState(p, leader, epoch, replicas, isr or replicas, pe))


def broker(b: int, fenced: bool = False) -> BrokerRecord:
    return BrokerRecord(b, "h", 9000 + b, fenced)


def entries(first: int, records: list[MetadataRecord]) -> list[tuple[int, int, dict[str, Any]]]:
    """Committed log entries of these records, from offset `first`: each as the log holds it."""
    return [(first + i, 0, r.to_dict()) for i, r in enumerate(records)]


class Replicas:
    """A broker's hosted replicas as the unit sees them, changed as a driver would carry the actions out."""

    def __init__(self) -> None:
        self.roles: dict[int, ReplicaRole] = {}
        self.fetching: dict[int, int] = {}
        self.applier = MetadataApplier(ME, lambda _t, p: self.roles.get(p), lambda _t: list(self.roles))
        self.image = MetadataImage()
        self.offset = 0

    def publish(self, *records: MetadataRecord) -> list[Any]:
        committed = entries(self.offset, list(records))
        self.offset += len(records)
        _, after = self.applier.publish(self.image, committed)
        done: list[Any] = []
        for actions in [*self.applier.steps(self.image), after]:
            for a in actions:
                done.append(a)
                if isinstance(a, CreateReplica):
                    self.roles[a.partition] = metadata_apply.NEW_REPLICA
                elif isinstance(a, ApplyPartitionState):
                    st = a.state
                    self.roles[st.partition] = ReplicaRole(st.leader_epoch, a.change in (LEADER, ISR), st.leader >= 0)
                elif isinstance(a, RemoveReplica):
                    del self.roles[a.partition]
                elif isinstance(a, StartFetching):
                    self.fetching[a.partition] = a.leader
                elif isinstance(a, StopFetching):
                    self.fetching.pop(a.partition, None)
        return done


def test_role_change_fences_an_old_leader_epoch():
    st = PartitionState(0, ME, 5, [1, 2, 3], [1, 2, 3], 7)
    assert role_change(ME, ReplicaRole(5, True, False), st) == ISR  # same leadership: only the ISR changed
    assert role_change(ME, ReplicaRole(4, True, False), st) == LEADER  # re-elected in a newer epoch: fresh state
    assert role_change(ME, ReplicaRole(5, False, True), st) == LEADER
    other = PartitionState(0, 2, 5, [1, 2, 3], [1, 2, 3], 7)
    assert role_change(ME, ReplicaRole(5, False, True), other) == NONE
    assert role_change(ME, ReplicaRole(4, False, True), other) == FOLLOWER  # a new epoch: fetch afresh
    assert role_change(ME, ReplicaRole(5, True, False), other) == FOLLOWER
    assert role_change(ME, ReplicaRole(5, True, False), PartitionState(0, -1, 6, [1, 2, 3], [], 8)) == OFFLINE


def delta_of(*records: MetadataRecord) -> MetadataDelta:
    image, delta = MetadataImage(), MetadataDelta()
    for offset, _, record in entries(0, list(records)):
        image.apply(offset, record, delta)
    return delta


def test_the_delta_names_partitions_of_partition_records_and_whole_topics_otherwise():
    delta = delta_of(topic("a"), topic("t"), part(1, 1, 0, [1]), part(2, 1, 0, [1]), broker(3))
    assert delta.topics == {"a": None, "t": None} and delta.brokers == {3}  # t created: the whole topic
    delta = delta_of(part(1, 1, 0, [1]), part(2, 1, 0, [1]))
    assert delta.topics == {"t": {1, 2}} and not delta.brokers
    assert delta_of(ConfigRecord("t", {})).topics == {"t": None}
    assert delta_of(RemoveTopicRecord("t")).topics == {"t": None}
    # Records about no topic or broker change neither.
    quiet = delta_of(ClusterRecord("c"), GroupConfigRecord("g", {}))
    assert quiet == MetadataDelta()


def test_a_typed_record_read_from_its_dict_applies_as_the_dict_did():
    image = MetadataImage()
    for offset, _, record in entries(0, [broker(2), topic(), part(0, 2, 4, [2, 1], [2]), broker(2, fenced=True)]):
        image.apply(offset, record)
    st = image.topics["t"].partitions[0]
    assert (st.leader, st.leader_epoch, st.replicas, st.isr) == (2, 4, [2, 1], [2])
    assert image.brokers[2].fenced and image.offset == 3 and 2 in image.fenced_since


def test_a_new_topic_creates_then_leads_or_follows_and_a_follower_starts_at_its_log_end_and_epoch():
    r = Replicas()
    done = r.publish(broker(1), broker(2), topic(), part(0, ME, 0, [1, 2]), part(1, 2, 3, [2, 1]), part(2, 2, 0, [2]))
    assert CreateReplica("t", 0) in done and CreateReplica("t", 1) in done and CreateReplica("t", 2) not in done
    applied = {a.state.partition: a for a in done if isinstance(a, ApplyPartitionState)}
    assert applied[0].change == LEADER and applied[0].follow_from is None
    assert applied[1].change == FOLLOWER and applied[1].follow_from == (0, -1)  # an empty log
    assert r.fetching == {1: 2}
    # The leader moves to us: stop fetching. Then the partition is reassigned away: removed.
    done = r.publish(part(1, ME, 4, [2, 1], pe=1))
    assert [a.change for a in done if isinstance(a, ApplyPartitionState)] == [LEADER] and r.fetching == {}
    assert r.publish(part(1, 2, 5, [2, 3], pe=2)) == [RemoveReplica("t", 1)]
    # A whole-topic change removes what is no longer assigned here.
    assert RemoveReplica("t", 0) in r.publish(RemoveTopicRecord("t"))
    assert r.roles == {}


def test_an_isr_change_touches_its_partition_only_and_fenced_brokers_are_named():
    r = Replicas()
    r.publish(broker(1), broker(2), broker(3), topic(), *(part(p, ME, 0, [1, 2, 3]) for p in range(50)))
    done = r.publish(broker(3, fenced=True), part(7, ME, 0, [1, 2, 3], [1, 2], pe=1))
    applied = [a for a in done if isinstance(a, ApplyPartitionState)]
    assert [(a.state.partition, a.change, a.fenced) for a in applied] == [(7, ISR, (3,))]
    assert done[-1] == FenceReplicas(frozenset({3}))


def test_the_broker_carries_out_the_units_decisions(tmp_path: Path, monkeypatch):
    """ReplicaManager drives the unit: a decision changed there changes what the broker does."""
    logs = LogManager([tmp_path], LogConfig())
    rm = ReplicaManager(ME, logs, lambda _t: LogConfig(), 30_000, lambda *a: None)
    followed: list[int] = []
    rm.on_follow = lambda p: followed.append(p.leader)
    image = MetadataImage()
    rm.publish(image, entries(0, [broker(1), broker(2), topic(), part(0, 2, 3, [2, 1])]))
    p = rm.partitions[("t", 0)]
    assert followed == [2] and p.follower_state is not None and p.follower_state.next_fetch() == (0, -1, 3)
    # A planted bug in the unit (a follower that never names its last epoch) is what the broker then does.
    monkeypatch.setattr(metadata_apply, "initial_fetch_state", lambda local: (local.log_end_offset, -2))
    rm.publish(image, entries(4, [part(0, 2, 4, [2, 1], pe=1)]))
    assert p.follower_state.next_fetch() == (0, -2, 4)
    rm.close()
