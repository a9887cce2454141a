"""MetadataApplier: what a broker does with committed metadata, as a sans-IO unit.

Committed records come in (publish); per partition step, actions come out: remove a replica this broker
no longer hosts, create one, make it leader, follower (from which offset and epoch) or offline in the
committed leader epoch, start or stop fetching it from its leader, and, when brokers were fenced, stop
waiting for them. Nothing
here opens a file, a socket or reads a clock: broker/replica/replica_manager.py and broker/server/broker_server.py carry
the
actions out with real logs and fetchers, and the replication simulator (tests/sim/replication_sim.py)
carries out the same actions in its simulated world, so the rules it checks are the ones that ship.

Leadership changes are decided once, by `role_change`: the actions name the change, and
broker/replica/partition.py Partition.apply_state carries out the one it is told.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from broker.metadata.records import MetadataDelta

if TYPE_CHECKING:
    from broker.metadata.image import MetadataImage, PartitionState

# What Partition.apply_state does, as role_change decides it.
LEADER = "leader"  # a new LeaderState in the committed leader epoch
ISR = "isr"  # still the leader: the committed ISR settles the pending proposal
FOLLOWER = "follower"  # a new FollowerState: fetch from the leader of the committed epoch
OFFLINE = "offline"  # no leader: neither lead nor fetch
NONE = "none"  # still following the same leader in the same epoch


@dataclass(frozen=True, slots=True)
class ReplicaRole:
    """The local state the decisions need of a hosted replica (Partition.role)."""

    leader_epoch: int
    leading: bool  # it has a LeaderState
    following: bool  # it has a FollowerState
    log_end_offset: int = 0
    latest_epoch: int = -1  # the leader epoch of its last record (-1: an empty log)


NEW_REPLICA = ReplicaRole(-1, False, False)  # a replica this broker has not created (CreateReplica)


def role_change(broker_id: int, local: ReplicaRole, st: "PartitionState") -> str:
    """What a committed partition state makes of this broker's replica. A leader keeps its LeaderState only
    within the same leader epoch: a new epoch fences everything the old one knew of its followers, since
    another leader may have written in between (Kafka's Partition.makeLeader). A follower starts fetching
    afresh on a new epoch, as the leader of a new epoch may have a different history to truncate to."""
    new_epoch = st.leader_epoch != local.leader_epoch
    if st.leader == broker_id:
        return LEADER if new_epoch or not local.leading else ISR
    if st.leader < 0:
        return OFFLINE
    return FOLLOWER if new_epoch or local.leading or not local.following else NONE


def initial_fetch_state(local: ReplicaRole) -> tuple[int, int]:
    """Where a new follower starts fetching (Kafka's InitialFetchState): (fetch offset, last fetched epoch).
    At its log end, naming the epoch its log ends in: the leader checks that epoch against its own history
    (KIP-101, KIP-320) and answers with where they diverge, so a tail the new leader never had (written by
    an old leader, or by this replica when it led) is truncated before anything is appended after it."""
    return local.log_end_offset, local.latest_epoch


# --- actions ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CreateReplica:
    """Host the partition: open (or create) its log and its Partition, the HW as last checkpointed."""

    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class RemoveReplica:
    """This broker no longer hosts the partition (reassigned, or its topic deleted): stop fetching it, close
    it and delete its log."""

    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class ApplyPartitionState:
    """Partition.remove_replicas(fenced), Partition.apply_state(state, now, change, follow_from), then
    remove_replicas(fenced) again: an ISR commit must not re-admit a fenced broker whose last fetch offset
    still looks caught up. `follow_from`: a new follower's initial fetch state (initial_fetch_state)."""

    topic: str
    state: "PartitionState"
    change: str
    fenced: tuple[int, ...] = ()
    follow_from: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class StartFetching:
    """Fetch the partition from `leader` (in the leader epoch its FollowerState names)."""

    topic: str
    partition: int
    leader: int


@dataclass(frozen=True, slots=True)
class StopFetching:
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class FenceReplicas:
    """The controller fenced these brokers: no hosted leader waits for them, or re-admits them into its ISR."""

    broker_ids: frozenset[int]


Action = CreateReplica | RemoveReplica | ApplyPartitionState | StartFetching | StopFetching | FenceReplicas

# The topics (and, for a partition record, the partitions) that committed records changed: None for a whole
# topic (created, removed, its configs changed).
Changed = dict[str, "set[int] | None"]


class MetadataApplier:
    """The committed changes still to apply on this broker, in commit order, and the actions that apply them.

    `hosted(topic, partition)` answers the local state of a replica this broker hosts (None: not hosted), and
    `hosted_partitions(topic)` lists them; both are read as each step is computed, after the actions of the
    steps before were carried out."""

    def __init__(
        self,
        broker_id: int,
        hosted: Callable[[str, int], ReplicaRole | None],
        hosted_partitions: Callable[[str], Iterable[int]],
    ) -> None:
        self.broker_id = broker_id
        self.hosted = hosted
        self.hosted_partitions = hosted_partitions
        self._pending: Changed = {}

    def publish(
        self, image: "MetadataImage", entries: Iterable[tuple[int, int, dict[str, Any]]]
    ) -> tuple[int, list[Action]]:
        """Apply committed (offset, epoch, record) entries to `image` and queue what they changed. Returns how
        many partition changes were queued (they come out of `steps`) and the actions to carry out after
        them (FenceReplicas)."""
        delta = MetadataDelta()
        for offset, _epoch, record in entries:
            image.apply(offset, record, delta)
        size = self.queue(image, delta.topics)
        if not delta.brokers:
            return size, []
        return size, [FenceReplicas(frozenset(b.id for b in image.brokers.values() if b.fenced))]

    def queue(self, image: "MetadataImage", changed: Changed) -> int:
        """Queue `changed` behind what is already queued; returns how many partition changes it adds."""
        size = 0
        for topic, parts in changed.items():
            queued = self._pending.get(topic, ())
            if parts is None or queued is None:
                self._pending[topic] = None
                info = image.topics.get(topic)
                size += len(info.partitions) if info is not None else 1
            else:
                self._pending[topic] = set(queued) | parts
                size += len(parts)
        return size

    @property
    def pending(self) -> bool:
        return bool(self._pending)

    def steps(self, image: "MetadataImage") -> Iterator[list[Action]]:
        """One step per partition created, changed or removed, over every queued topic in turn. Each step
        reads the image as it is then: a driver that lets newer commits in between steps (applying a flood
        of partitions in slices) never gives a partition an outdated state; its topic is queued again anyway
        and applied once more in commit order."""
        while self._pending:
            topic = next(iter(self._pending))
            parts = self._pending.pop(topic)
            yield from self._topic_steps(image, topic, parts)

    def _topic_steps(self, image: "MetadataImage", topic: str, parts: set[int] | None) -> Iterator[list[Action]]:
        me = self.broker_id
        info = image.topics.get(topic)
        if parts is None:
            mine = [p for p, st in info.partitions.items() if me in st.replicas] if info is not None else []
        else:
            mine = [p for p in sorted(parts) if info is not None and p in info.partitions]
            mine = [p for p in mine if me in info.partitions[p].replicas]  # type: ignore[union-attr]
        stale = parts if parts is not None else set(self.hosted_partitions(topic))
        for p in sorted(stale - set(mine)):
            if self.hosted(topic, p) is not None:
                yield [RemoveReplica(topic, p)]
        for p in mine:
            if self.hosted(topic, p) is None and self._current(image, topic, p) is not None:
                yield [CreateReplica(topic, p)]  # then decide on the log as it was opened
            st = self._current(image, topic, p)
            if st is not None:
                yield self.partition_actions(image, topic, st)

    def _current(self, image: "MetadataImage", topic: str, p: int) -> "PartitionState | None":
        """The partition's state as the image has it now (an earlier step may have let a newer commit in),
        if this broker still hosts it; else None: changed since, and its topic is queued again."""
        info = image.topics.get(topic)
        st = info.partitions.get(p) if info is not None else None
        return st if st is not None and self.broker_id in st.replicas else None

    def partition_actions(self, image: "MetadataImage", topic: str, st: "PartitionState") -> list[Action]:
        """Make the local replica of `st`'s partition follow its committed state."""
        local = self.hosted(topic, st.partition) or NEW_REPLICA
        change = role_change(self.broker_id, local, st)
        fenced = tuple(sorted(b.id for b in image.brokers.values() if b.fenced and b.id in st.replicas))
        follow_from = initial_fetch_state(local) if change == FOLLOWER else None
        actions: list[Action] = [ApplyPartitionState(topic, st, change, fenced, follow_from)]
        if change == FOLLOWER:
            actions.append(StartFetching(topic, st.partition, st.leader))
        elif change in (LEADER, OFFLINE):
            actions.append(StopFetching(topic, st.partition))
        return actions
