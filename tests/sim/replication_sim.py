"""A seeded, deterministic simulator of partition replication, checked after every step.

tests/sim/election_sim.py verifies the controller quorum; this verifies what the brokers do with its decisions:
partition leaders chosen by the controller, the ISR, the high watermark (HW), followers fetching and
truncating, leader-epoch fencing, idempotent producers' retries. It drives the production code, not a model
of it: broker/controller/logic.py (ControllerLogic: topic creation, fencing, registration, AlterPartition),
broker/controller/service.py (its liveness rule), and every replica as a broker holds it: broker/replica/partition.py's
Partition (leadership, appends with producer-state de-duplication, follower reads, truncation, LeaderState
and FollowerState of broker/replica/replication.py) over broker/log/log.py's Log (segments, indexes, epoch cache,
producer-state snapshots) as real files on a scratch disk, and broker/replica/replica_fetcher.py's handle_fetch_row
for what a follower does with an answer. What a broker decides in between is production code too, sans-IO
units the broker drives with real I/O and this simulator drives in its simulated world: broker/metadata/applier.py's
MetadataApplier (what committed metadata makes of the replicas: ReplicaManager.publish), replica_fetcher.py's
FollowedPartitions (what a fetch asks for, which answers still apply: ReplicaFetcher) and replication.py's
AlterPartitionAttempts (ISR proposals, their verdicts and retries: AlterPartitionManager). The simulator plays
only the I/O: opening logs, timers, quorum_driver.py's metadata catch-up, the network (tests/sim/engine.py,
the event loop the quorum simulator runs on too).

The controller is ONE authority holding the committed metadata log. That is a composition argument:
tests/sim/election_sim.py checks that the quorum behaves as one such log (records commit once, in one order,
never change, survive controller failover), so here a controller failover is an outage after which a
new controller starts with no fetch history (broker/controller/service.py's grace rules), and an
AlterPartition whose response is lost may or may not have been committed.

Brokers learn metadata only by fetching it from the controller, with delay and loss, and apply records
in log order, a fetched batch at a time, so their views are stale: deposed leaders that do not know
yet, followers fetching from old leaders, AlterPartition proposals racing elections. A broker's
fetched metadata log is durable (brokers keep it on disk); on restart its image is rebuilt from it once
the broker has caught up to the committed end its first fetch answer reports (METADATA_POLICIES says
why; broker/controller/quorum_driver.py does the same). Partition logs are files and survive crashes (a crash
kills the process, the page cache survives): a restarted broker reopens them with the Log's crash recovery
and the Partition's producer-state load (newest snapshot, then the batches after it); LeaderState,
FollowerState, HWs, fetchers, AlterPartition requests and acks=all waiters are lost.

One `random.Random(seed)` draws the schedule: cluster shape (3-5 brokers, 1-3 partitions, RF 3,
min.insync.replicas 1 or 2, unclean election off), timings, and the faults: message loss, duplication,
delay (so reordering), rare very late deliveries, network partitions (the controller is a node too),
crashes (at random, of leaders, right after becoming leader, right after any event) with restarts from
the durable state, pauses (SIGSTOP: events wait), and controller outages; segment sizes small enough that
logs roll and producer-state snapshots are taken. Clients send acks=all values to a random broker or to the
leader some broker's (stale) image names: fire-and-forget ones, and idempotent producers' batches, each
sent again with its sequence until acknowledged (replication_checks.py: none may be stored twice).

Answers are matched to requests as the real RPC layer does (correlation ids; one fetch in flight per
fetcher, answers to a crashed process never reach its successor), so a duplicated or overtaken answer is
dropped, while duplicated and reordered requests are served. AlterPartition alone is never duplicated
(see _send_alter). How leaders treat a failed AlterPartition is ALTER_POLICIES.

A schedule runs `steps` events with faults, then heals everything (all nodes up, one network, no loss,
delays capped) and checks liveness: every partition must acknowledge a marker value, and every producer
its last batch, within a bound.
The invariants of tests/sim/replication_checks.py are checked after every step; a failure names the
seed and step, and `run_schedule(seed, steps)` replays it exactly.

    python -m tests.sim.replication_sim --seeds 1000
    python -m tests.sim.replication_sim --replay 1234 --trace
    python -m tests.sim.replication_sim --seeds 300 --alter-policy server    # broker_server.py's old rule: fails
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from broker.controller.logic import check_broker_incarnation
from broker.controller.service import ControllerService
from broker.log.config import LogConfig
from broker.log.log import Log
from broker.metadata.applier import (
    FOLLOWER,
    LEADER,
    OFFLINE,
    Action,
    ApplyPartitionState,
    CreateReplica,
    FenceReplicas,
    MetadataApplier,
    RemoveReplica,
    StartFetching,
    StopFetching,
)
from broker.metadata.image import MetadataImage, PartitionState
from broker.metadata.records import BrokerRecord, MetadataRecord, PartitionRecord, TopicRecord
from broker.replica.fetch_session import FetchSessionCache, FetchSessionError, FetchSessionHandler, SessionFetch
from broker.replica.partition import FetchResult as PartitionFetch
from broker.replica.partition import FetchSpec, Partition
from broker.replica.replica_fetcher import FollowedPartitions, handle_fetch_row
from broker.replica.replication import (
    AlterAttempt,
    AlterOutcome,
    AlterPartitionAttempts,
    FollowerSilence,
    alter_partition_outcome,
)
from election.coordination import fetch_liveness_expiry
from net import batch as batch_fmt
from net.errors import ErrorCode, KafkaLiteError, OffsetNotAvailableError
from tests.sim.engine import DELIVER, EventLoop
from tests.sim.replication_checks import Checker, ReplicaView, SimFailure

TOPIC = "t"
CONTROLLER = 0  # node id of the controller; brokers are 1..n
CLIENT = -1  # producers: reach every broker (a partition between brokers does not cut them off)
RF = 3
# How AlterPartition failures are handled. "server" is what broker/server/broker_server.py and
# broker/controller/logic.py did: the leader called LeaderState.on_isr_rejected on any error or timeout, and
# the controller took a proposal from any process of the leader. Both are unsafe (the simulator finds them): a
# lost answer or a stale-epoch rejection can hide a committed expansion, and the HW then passes a replica the controller
# counts in the ISR; and a proposal sent before the leader restarted (in the same leader epoch) can be
# committed after its new LeaderState started computing the HW without that replica. "kafka" is Kafka's
# rule and the default here: the leader retries on timeout, keeps a proposal pending on a stale-epoch
# rejection until metadata brings the newer state, and calls on_isr_rejected only for a rejection against
# the current state (which cannot have been applied); the controller refuses proposals from a process
# older than the newest it has seen fetching (broker epochs, KIP-903). "no-broker-epochs" is Kafka's
# leader rule with the old controller, to show the second problem alone. Production now does "kafka":
# broker/replica/alter_partition_manager.py and _alter_answered here decide with the same AlterPartitionAttempts
# (broker/replica/replication.py: alter_partition_outcome, alter_partition_retry_wanted), and
# broker/controller/service.py alter_partition makes the checks of _controller_receive (overtaken
# requests, check_broker_incarnation with incarnations learned from quorum fetches).
ALTER_POLICIES = ("kafka", "no-broker-epochs", "server")
# When a restarted broker starts acting on its metadata. "as-fetched" is what broker/controller/quorum_driver.py did:
# every committed record was applied as soon as it was fetched, so a broker whose durable metadata log lagged
# the controller by more than one fetch (fetch_max_records, 1000 in production; meta_batch here) acts
# on an old image for a while: it may re-create a LeaderState with an ISR that the controller has
# since grown, and let the HW jump over records the other ISR members lack (the simulator finds it).
# "catch-up" is KRaft's MetadataLoader and the default here: publish nothing until the log reached the
# committed end the controller reported in the first answer after the restart. Production does this now
# (broker/controller/quorum_driver.py QuorumDriver.catch_up_to and _apply; a broker elected controller is caught up).
METADATA_POLICIES = ("catch-up", "as-fetched")

_TIMER, _FAULT, _CLIENT, _RESTART, _RESUME, _CTRL_BACK, _CTRL_TICK, _RETRY = range(DELIVER + 1, DELIVER + 9)
_META, _TICK, _FETCH, _FETCH_TIMEOUT, _ALTER_TIMEOUT = range(5)  # broker timers
BATCH_BYTES = 80  # about one single-record batch here: a fetch's max bytes is fetch_max_records of them


@dataclass(frozen=True, slots=True)
class SimParams:
    """Everything about a schedule that is drawn from its seed (times in virtual ms)."""

    brokers: int
    partitions: int
    min_isr: int
    session_timeout_ms: int  # broker.session.timeout.ms: no metadata fetch for this long -> fenced
    meta_interval_ms: int  # how often a broker fetches metadata (also its heartbeat)
    meta_batch: int  # records per metadata fetch response (the quorum's fetch_max_records, scaled down)
    ctrl_tick_ms: int
    lag_time_max_ms: int  # replica.lag.time.max.ms
    tick_ms: int  # ReplicaManager.tick (ISR expiration)
    fetch_idle_ms: int  # a follower's next fetch after an empty answer (a long poll, coarsely)
    fetch_max_records: int
    rpc_timeout_ms: int  # fetch and AlterPartition requests time out (NetworkError) after this
    min_delay_ms: int
    max_delay_ms: int
    late_p: float  # probability that a message is delayed by up to two session timeouts
    loss_p: float
    dup_p: float
    fault_mean_ms: float
    client_mean_ms: float
    crash_after_p: float  # a broker crashes right after handling an event
    crash_leader_p: float  # ... right after becoming a partition leader
    segment_bytes: int  # segment.bytes: small, so logs roll and producer-state snapshots are taken and used
    producers: int  # idempotent producers (acks=all, retrying one batch per partition until acknowledged)

    @property
    def silence_time_max_ms(self) -> int:
        """replica.silence.time.max.ms: derived, not drawn, so every seed's schedule draws what it drew before.
        A fifth of the lag time: quick shrinks come first whenever a follower goes quiet."""
        return self.lag_time_max_ms // 5

    @classmethod
    def draw(cls, rng: random.Random, brokers: int | None = None) -> SimParams:
        session = rng.choice([150, 300, 600])
        max_delay = rng.choice([2, 5, 15, 40])
        drawn = rng.randint(3, 5)  # drawn even when overridden, so the rest of the schedule is the seed's
        return cls(
            brokers=brokers or drawn,
            partitions=rng.randint(1, 3),
            min_isr=rng.choice([1, 2]),
            session_timeout_ms=session,
            meta_interval_ms=rng.choice([10, 30]),
            meta_batch=rng.choice([1, 3, 1000]),
            ctrl_tick_ms=rng.choice([5, 20]),
            lag_time_max_ms=rng.choice([50, 150, 500]),
            tick_ms=rng.choice([10, 30]),
            fetch_idle_ms=rng.choice([2, 10, 30]),
            fetch_max_records=rng.choice([1, 3, 1000]),
            rpc_timeout_ms=4 * max_delay + rng.choice([20, 100]),
            min_delay_ms=1,
            max_delay_ms=max_delay,
            late_p=rng.choice([0.0, 0.005, 0.02]),
            loss_p=rng.choice([0.0, 0.02, 0.1, 0.3]),
            dup_p=rng.choice([0.0, 0.05, 0.2]),
            fault_mean_ms=session * rng.choice([0.3, 1.0, 3.0]),
            client_mean_ms=rng.choice([2, 10, 40]),
            crash_after_p=rng.choice([0.0, 0.001, 0.005]),
            crash_leader_p=rng.choice([0.0, 0.1, 0.3]),
            segment_bytes=rng.choice([400, 1500, 1 << 20]),
            producers=rng.randint(1, 3),
        )


@dataclass
class Result:
    seed: int
    brokers: int
    partitions: int
    steps: int
    ok: bool
    failure: str | None = None
    failed_step: int | None = None
    virtual_ms: int = 0
    max_leader_epoch: int = 0
    leaderships: int = 0  # LeaderStates created
    isr_changes: int = 0  # AlterPartition records committed
    quick_shrinks: int = 0  # shrinks proposed for followers owing a fetch (LeaderState.on_followers_silent)
    recoveries_fetched: int = 0  # new leaders that fetched a more complete log before serving (quorum commit)
    alter_rejected: int = 0
    fencings: int = 0
    truncations: int = 0
    produced: int = 0  # values appended by a leader
    deduplicated: int = 0  # idempotent retries a leader answered with the offset they were stored at
    retries: int = 0  # idempotent batches sent again (no answer, or an error)
    acked: int = 0
    committed: int = 0  # sum of the committed prefixes at the end
    crashes: int = 0
    messages: int = 0
    liveness_ms: int | None = None  # from the heal until every partition acknowledged a marker
    liveness_bound_ms: int | None = None
    trace: list[str] = field(default_factory=list)


# --- messages (frozen: a duplicated message is the same object twice) ------------------------------------


@dataclass(frozen=True, slots=True)
class MetaFetch:
    src: int
    incarnation: int  # answers go to this process only (a restarted broker has new connections)
    offset: int  # the broker's durable metadata log end


@dataclass(frozen=True, slots=True)
class MetaRecords:
    incarnation: int
    offset: int
    records: tuple[dict[str, Any], ...]
    committed: int  # the controller's committed log end (what a quorum follower learns as its HW)


@dataclass(frozen=True, slots=True)
class AlterIsr:
    src: int
    incarnation: int  # the proposer's process (Kafka's broker epoch, KIP-903)
    req: int
    partition: int
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]
    silent: tuple[int, ...] = ()  # the dropped members that sent no fetch within the lag time


@dataclass(frozen=True, slots=True)
class AlterIsrResult:
    req: int
    error: str | None
    # The controller's error code (AlterPartitionError's kinds, as on the wire): the leader decides with
    # broker/replica/replication.py AlterPartitionAttempts, as broker/replica/alter_partition_manager.py does
    # (_alter_answered).
    code: int = 0


@dataclass(frozen=True, slots=True)
class Fetch:
    src: int
    req: int
    # In a fetch session (broker/replica/fetch_session.py): only the rows that changed, and the partitions to forget.
    session_id: int
    session_epoch: int
    specs: tuple[tuple[int, int, int, int], ...]  # (partition, fetch offset, current leader epoch, last fetched epoch)
    forgotten: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class FetchAnswer:
    req: int
    rows: tuple[tuple[int, PartitionFetch], ...]  # (partition, Partition.read_for_follower's answer)
    session_id: int = 0
    error: int = 0  # a fetch session error (the whole fetch)


@dataclass(frozen=True, slots=True)
class Produce:
    partition: int
    value: str
    batch: bytes  # one record; an idempotent producer's carries its producer id and sequence
    reply: tuple[int, int, int] | None = None  # (producer id, sequence, request id): answer the producer


@dataclass(frozen=True, slots=True)
class ProduceAnswer:
    producer_id: int
    partition: int
    sequence: int
    req: int
    error: str | None


# --- idempotent producers ---------------------------------------------------------------------------------


@dataclass
class InFlight:
    sequence: int
    value: str
    batch: bytes
    req: int = 0  # the newest request carrying it


@dataclass
class SimProducer:
    """An idempotent acks=all producer (enable.idempotence): one batch per partition in flight, sent again
    with the same sequence until a broker acknowledges it (max.in.flight.requests.per.connection=1)."""

    producer_id: int
    next_sequence: dict[int, int] = field(default_factory=dict)
    in_flight: dict[int, InFlight] = field(default_factory=dict)


# --- the controller --------------------------------------------------------------------------------


class _QuorumView:
    """What ControllerService asks its quorum node about liveness, answered by the simulated controller."""

    def __init__(self, ctrl: SimController, addresses: dict[int, tuple[str, int]]) -> None:
        self.ctrl = ctrl
        self.addresses = addresses
        # The service's wake-up hooks: the simulator ticks it itself.
        self.applied_listeners: list[Any] = []
        self.liveness_listeners: list[Any] = []

    def known_brokers(self) -> dict[int, tuple[str, int]]:
        return self.addresses

    def broker_expires_at(self, broker_id: int, epoch: int, since_ms: int, session_timeout_ms: int) -> int | None:
        # QuorumDriver.broker_expires_at's rule, on the simulated controller's fetch history.
        return fetch_liveness_expiry(
            self.ctrl.last_fetch.get(broker_id), broker_id in self.ctrl.seen, since_ms, session_timeout_ms
        )


class SimController:
    """The one metadata authority: committed records, the image they build, and the production logic."""

    def __init__(self, brokers: list[int], session_timeout_ms: int) -> None:
        self.up = True
        self.records: list[dict[str, Any]] = []
        self.image = MetadataImage()
        self.last_fetch: dict[int, int] = {}
        self.seen: frozenset[int] = frozenset()
        # broker_id 0 is none of the brokers: the controller is not one of them here, so none is alive
        # by fiat (ControllerService treats its own broker as alive).
        addresses = {b: (f"b{b}", 9000 + b) for b in brokers}
        self.quorum = _QuorumView(self, addresses)
        self.service = ControllerService(CONTROLLER, self.image, self.quorum, addresses, session_timeout_ms, "sim")  # type: ignore[arg-type]
        self.logic = self.service.logic
        self.assigned: dict[tuple[int, int], int] = {}  # (partition, leader epoch) -> leader, from records
        self.topic_created = False
        # broker -> (incarnation, seq) of the newest AlterPartition request taken from it
        self.alter_seen: dict[int, tuple[int, int]] = {}
        self.incarnation: dict[int, int] = {}  # broker -> newest process seen fetching (a broker epoch)

    def commit(self, records: list[MetadataRecord]) -> None:
        """ControllerService._propose: the typed records written to the log as its dicts, applied from there."""
        for r in records:
            offset = len(self.records)
            self.records.append(r.to_dict())
            self.image.apply(offset, self.records[-1])
            if isinstance(r, PartitionRecord) and r.leader >= 0:
                key = (r.partition, r.leader_epoch)
                if self.assigned.setdefault(key, r.leader) != r.leader:
                    raise SimFailure(f"controller gave leader epoch {key[1]} of partition {key[0]} to two brokers")

    def state(self, p: int) -> PartitionState | None:
        t = self.image.topics.get(TOPIC)
        return t.partitions.get(p) if t is not None else None


# --- a broker: the driver role of partition.py, replica_manager.py, replica_fetcher.py, broker_server.py ----------


@dataclass
class _Waiter:
    """An acks=all produce waiting for the high watermark to pass its offset (Partition.wait_for_commit)."""

    offset: int
    epoch: int
    value: str
    reply: tuple[int, int, int] | None


@dataclass
class _Fetcher:
    """replica_fetcher.py's ReplicaFetcher: one per leader, one request in flight, its partitions and the
    answers that still apply decided by the same FollowedPartitions."""

    leader: int
    followed: FollowedPartitions = field(default_factory=FollowedPartitions)
    session: FetchSessionHandler = field(default_factory=FetchSessionHandler)  # with this leader (KIP-227)
    req: int | None = None  # the request in flight
    fetch: SessionFetch | None = None  # ... as its session built it
    sent: dict[tuple[str, int], tuple[Partition, int]] = field(default_factory=dict)
    scheduled: bool = False  # a _FETCH timer is pending


class SimBroker:
    def __init__(self, broker_id: int, data_dir: Path) -> None:
        self.id = broker_id
        self.up = True
        self.paused = False
        self.deferred: list[tuple[int, Any, Any]] = []
        self.incarnation = 0
        # Durable: the partition logs' files under data_dir (the page cache survives a crash: everything
        # written is there) and the fetched metadata log.
        self.data_dir = data_dir
        self.views: dict[int, ReplicaView] = {}  # the checker's reading of each partition's log
        self.meta_log: list[dict[str, Any]] = []
        # Volatile (reset by boot):
        self.image = MetadataImage()
        self.applied = 0
        self.parts: dict[int, Partition] = {}  # broker/replica/partition.py's Partition over broker/log/log.py's Log
        self.waiters: dict[int, list[_Waiter]] = {}
        self.fetchers: dict[int, _Fetcher] = {}
        self.fetch_sessions = FetchSessionCache(max_slots=4)  # the followers' sessions with this leader (KIP-227)
        self.silence = FollowerSilence()  # ReplicaManager's: which followers owe this leader a fetch
        self.attempts = AlterPartitionAttempts()  # AlterPartition requests without a verdict (per process)
        self.crash_pending = False
        self.catch_up_to: int | None = None  # after a restart: the metadata log end to reach before acting
        self.applier = self._new_applier()

    def boot(self) -> None:
        self.incarnation += 1
        self.up, self.paused, self.deferred = True, False, []
        self.image, self.applied = MetadataImage(), 0
        self.parts, self.waiters, self.fetchers = {}, {}, {}
        self.fetch_sessions = FetchSessionCache(max_slots=4)
        self.silence = FollowerSilence()
        self.attempts = AlterPartitionAttempts()
        self.crash_pending = False
        self.catch_up_to = None
        # The production unit that decides what committed metadata makes of the replicas (volatile, like the image).
        self.applier = self._new_applier()

    def _new_applier(self) -> MetadataApplier:
        return MetadataApplier(
            self.id, lambda _topic, p: self.parts[p].role if p in self.parts else None, lambda _topic: list(self.parts)
        )

    def close_logs(self) -> None:
        """A crash: the process's open files go away without a flush, a producer-state snapshot or a
        clean-shutdown marker (what it wrote stays on disk)."""
        for part in self.parts.values():
            part.log.close()
        self.parts = {}


# --- the simulation ----------------------------------------------------------------------------------


class Simulation(EventLoop):
    def __init__(
        self,
        seed: int,
        brokers: int | None = None,
        trace: bool = False,
        alter_policy: str = "kafka",
        metadata_policy: str = "catch-up",
        late_p: float | None = None,
        quorum: bool = True,
    ) -> None:
        super().__init__(seed)
        # replica.quorum.commit.enable (on by default, as in the broker): not drawn, so a seed's schedule stays.
        self.quorum = quorum
        if alter_policy not in ALTER_POLICIES:
            raise ValueError(f"alter_policy must be one of {ALTER_POLICIES}")
        self.alter_policy = alter_policy
        if metadata_policy not in METADATA_POLICIES:
            raise ValueError(f"metadata_policy must be one of {METADATA_POLICIES}")
        self.metadata_policy = metadata_policy
        p = SimParams.draw(self.rng, brokers)
        self.params = p = p if late_p is None else replace(p, late_p=late_p)
        self.ids = list(range(1, p.brokers + 1))
        self._req = 0
        self.group = {n: 0 for n in [CONTROLLER, *self.ids]}
        # Single links cut on top of the partition (self.cut): most often a leader's link to the controller,
        # which leaves a deposed leader serving its followers and producers without knowing it was replaced.
        # Producers reach every broker: a partition between brokers does not cut them off.
        self.unpartitioned = frozenset({CLIENT})
        self.loss_p, self.dup_p, self.late_p = p.loss_p, p.dup_p, p.late_p
        self.min_delay_ms, self.max_delay = p.min_delay_ms, p.max_delay_ms
        self.late_max_ms = 2 * p.session_timeout_ms
        self.faults_on = True
        self.ctrl = SimController(self.ids, p.session_timeout_ms)
        # The brokers' disks: real files (tmpfs when there is one), removed when the run ends.
        shm = Path("/dev/shm")
        self.disk = Path(tempfile.mkdtemp(prefix="kl-sim-", dir=shm if shm.is_dir() else None))
        self.log_config = LogConfig.from_props(
            {"segment.bytes": p.segment_bytes, "segment.index.bytes": 4096, "index.interval.bytes": 256}
        )
        self.brokers = {b: SimBroker(b, self.disk / f"broker-{b}") for b in self.ids}
        # Producer ids as the controller hands them out (InitProducerId); 1000 up, so no value is ambiguous.
        self.producers = [SimProducer(1000 + i) for i in range(p.producers)]
        self.checker = Checker(p.partitions)
        self.result = Result(seed, p.brokers, p.partitions, 0, ok=True)
        self.tracing = trace
        self.trace_lines = self.result.trace
        self.values = 0
        self.markers: dict[int, Any] = {}  # partition -> marker value, in the liveness phase
        self.marker_acked: dict[int, int] = {}  # partition -> the broker that acknowledged its marker
        for b in self.brokers.values():
            self._boot(b)
        self._push(0, _CTRL_TICK)

    # --- plumbing --------------------------------------------------------------------------------------

    def _next_req(self) -> int:
        self._req += 1
        return self._req

    def _timer(self, b: SimBroker, after: int, what: int, arg: Any = None) -> None:
        self._push(self.now + max(1, after), _TIMER, (b.id, b.incarnation), (what, arg))

    # --- broker lifecycle ----------------------------------------------------------------------------------

    def _boot(self, b: SimBroker) -> None:
        b.boot()
        self.checker.restarted(b.id, b.views)
        self._timer(b, self.rng.randint(1, self.params.meta_interval_ms), _META)
        self._timer(b, self.rng.randint(1, self.params.tick_ms), _TICK)

    def _crash(self, b: SimBroker, why: str) -> None:
        self._trace(f"crash broker {b.id} ({why})")
        b.up = False
        b.paused, b.deferred = False, []
        b.close_logs()
        b.waiters, b.fetchers, b.attempts = {}, {}, AlterPartitionAttempts()
        self.result.crashes += 1
        if self.faults_on:
            self._push(self.now + self.rng.randint(1, 2 * self.params.session_timeout_ms), _RESTART, b.id)

    def _broker_event(self, b: SimBroker, kind: int, a: Any, c: Any) -> None:
        """Run one event on a live broker; a paused one keeps it for later, in order."""
        if b.paused:
            b.deferred.append((kind, a, c))
            return
        if kind == DELIVER:
            self._broker_receive(b, a, c)
        else:
            self._broker_timer(b, a, c)
        if self.faults_on and b.up:
            if b.crash_pending:
                self._crash(b, "right after becoming leader")
            elif self.params.crash_after_p and self.rng.random() < self.params.crash_after_p:
                self._crash(b, "after an event")
        b.crash_pending = False

    def _broker_timer(self, b: SimBroker, what: int, arg: Any) -> None:
        p = self.params
        if what == _META:
            self._send(b.id, CONTROLLER, MetaFetch(b.id, b.incarnation, len(b.meta_log)))
            self._timer(b, p.meta_interval_ms, _META)
        elif what == _TICK:
            # ReplicaManager.tick: the ISR expiration check of every partition this broker leads.
            # The follower's idle gap stands for replica.fetch.wait.max.ms (the simulated leader holds no fetch).
            silent = b.silence.silent(self.now, p.silence_time_max_ms, p.fetch_idle_ms)
            for part in b.parts.values():
                part.tick(self.now, wall_ms=self.now)  # the simulated clock stamps the batches too
                ls = part.leader_state
                if silent and ls is not None and not silent.isdisjoint(part.isr):
                    before = ls.pending_isr
                    part.on_followers_silent(silent)
                    if ls.pending_isr is not None and ls.pending_isr != before:
                        self.result.quick_shrinks += 1
                self._check_waiters(b, part)
            self._timer(b, p.tick_ms, _TICK)
        elif what == _FETCH:
            f = b.fetchers.get(arg)
            if f is not None:
                f.scheduled = False
                self._fetch_once(b, f)
        elif what == _FETCH_TIMEOUT:
            leader, req = arg
            f = b.fetchers.get(leader)
            if f is not None and f.req == req:
                f.req = None  # NetworkError: the fetcher backs off and fetches again
                f.session.reset()  # the leader may have applied the lost fetch
                self._schedule_fetch(b, f, p.fetch_idle_ms)
        elif what == _ALTER_TIMEOUT:
            self._alter_timed_out(b, arg)

    def _broker_receive(self, b: SimBroker, src: int, msg: Any) -> None:
        if isinstance(msg, MetaRecords):
            self._on_meta_records(b, msg)
        elif isinstance(msg, Fetch):
            self._serve_fetch(b, msg)
        elif isinstance(msg, FetchAnswer):
            self._on_fetch_result(b, src, msg)
        elif isinstance(msg, AlterIsrResult):
            self._on_alter_result(b, msg)
        elif isinstance(msg, Produce):
            self._produce(b, msg)

    # --- metadata: quorum_driver.py _apply, then ReplicaManager.publish's unit (broker/metadata/applier.py) -------

    def _on_meta_records(self, b: SimBroker, msg: MetaRecords) -> None:
        if msg.incarnation != b.incarnation:
            return  # the answer to a request of the process before a crash: its connection is gone
        if msg.offset > len(b.meta_log):
            return  # a gap (a reordered response): only log order may be applied
        b.meta_log.extend(msg.records[len(b.meta_log) - msg.offset :])
        if b.catch_up_to is None:
            b.catch_up_to = msg.committed if self.metadata_policy == "catch-up" else 0
        if len(b.meta_log) < b.catch_up_to:
            return  # still loading after a restart: publish no image yet
        # All records this broker holds are committed (the controller sends no others), and like
        # QuorumDriver._apply it applies every committed record it has in one go.
        if b.applied >= len(b.meta_log):
            return
        entries = [(offset, 0, b.meta_log[offset]) for offset in range(b.applied, len(b.meta_log))]
        b.applied = len(b.meta_log)
        # BrokerServer._on_committed -> ReplicaManager.publish: the production unit decides, the simulated
        # broker carries its actions out (ReplicaManager.execute's part).
        _, after = b.applier.publish(b.image, entries)
        for actions in b.applier.steps(b.image):
            self._execute(b, actions)
        self._execute(b, after)

    def _execute(self, b: SimBroker, actions: list[Action]) -> None:
        """ReplicaManager.execute: carry out broker/metadata/applier.py's actions on this broker's replicas."""
        for a in actions:
            if isinstance(a, ApplyPartitionState):
                self._apply_partition(b, a)
            elif isinstance(a, CreateReplica):
                info = b.image.topics[a.topic]
                b.parts[a.partition] = self._open_partition(
                    b, a.partition, int(info.configs.get("min.insync.replicas", "1"))
                )
            elif isinstance(a, StartFetching):
                self._follow(b, b.parts[a.partition])
            elif isinstance(a, StopFetching):
                self._unfollow(b, b.parts[a.partition])
            elif isinstance(a, FenceReplicas):
                fenced = sorted(a.broker_ids)
                for part in b.parts.values():
                    part.remove_replicas(fenced)  # ReplicaManager.fence_replicas
                    self._check_waiters(b, part)
            elif isinstance(a, RemoveReplica):
                raise SimFailure(f"broker {b.id} told to remove partition {a.partition}, which it still hosts")

    def _apply_partition(self, b: SimBroker, a: ApplyPartitionState) -> None:
        """ReplicaManager._apply_partition: open the replica's log (LogManager), then Partition.apply_state."""
        st, p = a.state, a.state.partition
        part = b.parts[p]
        fenced = list(a.fenced)
        part.remove_replicas(fenced)
        change = part.apply_state(st, self.now, a.change, a.follow_from)
        if change == LEADER and not part.recovering:
            # A recovering leader is checked when it has recovered (_on_recovery): it takes no write before.
            self.checker.check_takeover(b.id, p, st.leader_epoch, b.views[p])
        part.remove_replicas(fenced)
        if change in (LEADER, FOLLOWER, OFFLINE):
            b.waiters[p] = []  # _fail_hw_waiters: the producers get NOT_LEADER_OR_FOLLOWER
        self._check_waiters(b, part)
        if change == LEADER:
            b.silence.expect((r for r in st.isr if r != b.id), self.now)
            self.result.leaderships += 1
            self.result.max_leader_epoch = max(self.result.max_leader_epoch, st.leader_epoch)
            self._trace(f"broker {b.id} leads p{p} in epoch {st.leader_epoch}, ISR {st.isr}")
            if self.params.crash_leader_p and self.rng.random() < self.params.crash_leader_p:
                b.crash_pending = True
        elif change == FOLLOWER:
            self._trace(f"broker {b.id} follows {st.leader} for p{p} in epoch {st.leader_epoch}")

    def _open_partition(self, b: SimBroker, p: int, min_isr: int) -> Partition:
        """LogManager's open after a start (never a clean shutdown here: recovery runs) and the Partition
        over it, which loads its producer state from the newest snapshot and the batches after it."""
        log = Log(
            b.data_dir / f"{TOPIC}-{p}", TOPIC, p, self.log_config, clean_shutdown=False, clock=lambda: self.now / 1000
        )
        part = Partition(
            TOPIC,
            p,
            log,
            b.id,
            min_isr,
            self.params.lag_time_max_ms,
            propose_isr=lambda part, isr, pe, silent, b=b: self._propose_isr(b, part, isr, pe, silent),
            quorum_commit=self.quorum,
            on_recovery=lambda part, event, b=b: self._on_recovery(b, part, event),
            recovery_stall_ms=self.params.silence_time_max_ms,
        )
        view = b.views.setdefault(p, ReplicaView(f"broker {b.id} partition {p}"))
        view.attach(log)
        return part

    # --- leader side: Partition.append_as_leader, acks=all ------------------------------------------------

    def _check_waiters(self, b: SimBroker, part: Partition) -> None:
        waiters = b.waiters.get(part.partition)
        if not waiters:
            return
        # The acknowledgement claims the value is committed: show the HW to the checker first.
        view = b.views[part.partition]
        self.checker.check_replica(b.id, part.partition, part.leader_epoch, view, part.high_watermark)
        keep = []
        for w in waiters:
            if part.high_watermark <= w.offset:
                keep.append(w)
            elif part.leader_state is not None and len(part.leader_state.isr) < part.min_insync_replicas:
                # NOT_ENOUGH_REPLICAS_AFTER_APPEND: committed by a shrunken ISR, not acknowledged
                self._answer(b, part.partition, w.reply, "NOT_ENOUGH_REPLICAS_AFTER_APPEND")
            else:
                self.checker.check_ack(b.id, part.partition, w.offset, w.epoch, w.value)
                self.result.acked += 1
                self._answer(b, part.partition, w.reply, None)
                if self.markers.get(part.partition) == w.value:
                    self.marker_acked.setdefault(part.partition, b.id)
                    self._trace(f"marker of p{part.partition} acknowledged by broker {b.id}")
        b.waiters[part.partition] = keep

    def _answer(self, b: SimBroker, partition: int, reply: tuple[int, int, int] | None, error: str | None) -> None:
        if reply is not None:
            self._send(b.id, CLIENT, ProduceAnswer(reply[0], partition, reply[1], reply[2], error))

    def _produce(self, b: SimBroker, msg: Produce) -> None:
        part = b.parts.get(msg.partition)
        if part is None:
            self._answer(b, msg.partition, msg.reply, "UNKNOWN_TOPIC_OR_PARTITION")
            return
        view = b.views[msg.partition]
        end = part.log.log_end_offset
        try:
            [offset] = part.append_as_leader(msg.batch, -1, self.now)
        except KafkaLiteError as e:  # NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS (nothing appended), ...
            self._answer(b, msg.partition, msg.reply, ErrorCode(e.code).name)
            return
        view.sync()
        if part.log.log_end_offset == end:
            self.result.deduplicated += 1
            self._trace(f"broker {b.id}: {msg.value} is a retry of offset {offset} of p{msg.partition}")
        else:
            self.result.produced += 1
        epoch = view.entries[offset][0] if offset < len(view.entries) else -1
        b.waiters.setdefault(msg.partition, []).append(_Waiter(offset, epoch, msg.value, msg.reply))
        self._check_waiters(b, part)

    # --- AlterPartition: broker/replica/alter_partition_manager.py ---------------------------------------------

    def _propose_isr(
        self, b: SimBroker, part: Partition, isr: list[int], partition_epoch: int, silent: list[int]
    ) -> None:
        attempt = b.attempts.propose(TOPIC, part.partition, part.leader_epoch, isr, partition_epoch, silent)
        self._trace(f"broker {b.id} proposes ISR {isr} for p{part.partition} (partition epoch {partition_epoch})")
        self._send_alter(b, attempt)

    def _send_alter(self, b: SimBroker, a: AlterAttempt) -> None:
        # AlterPartition is a request on a TCP connection, and unlike fetches it is not idempotent: it is
        # never duplicated, and the controller drops one older than a request it already took from the
        # same broker (sent on a connection the broker has abandoned since). Message-level duplicates
        # would defeat even Kafka's rule: the rejection of one copy says nothing about the other.
        msg = AlterIsr(b.id, b.incarnation, a.seq, a.partition, a.leader_epoch, a.partition_epoch, a.isr, a.silent)
        self._send(b.id, CONTROLLER, msg, dup=False)
        self._timer(b, self.params.rpc_timeout_ms, _ALTER_TIMEOUT, a.seq)

    def _alter_timed_out(self, b: SimBroker, seq: int) -> None:
        if self.alter_policy == "server":
            self._alter_rejected(b, seq, "timed out")
            return
        self._alter_answered(b, seq, None, "timed out")

    def _on_alter_result(self, b: SimBroker, msg: AlterIsrResult) -> None:
        if self.alter_policy == "server":
            # The old rule: any error ends the proposal.
            if msg.error is None:
                b.attempts.in_flight.pop(msg.req, None)
            else:
                self._alter_rejected(b, msg.req, msg.error)
            return
        self._alter_answered(b, msg.req, msg.code, msg.error or "")

    def _alter_answered(self, b: SimBroker, seq: int, code: int | None, error: str) -> None:
        """AlterPartitionManager.alter's handling of an answer (code None: none in time), with the same
        AlterPartitionAttempts of broker/replica/replication.py deciding."""
        answer = b.attempts.answered(seq, code)
        if answer is None:
            return  # answered already (a late answer, or the timeout of an answered request)
        outcome, attempt = answer
        if outcome is AlterOutcome.AWAIT_METADATA:
            # Refused against a newer state, which may be our own proposal committed: it stays pending in the
            # LeaderState (it bounds the HW) until that state arrives by metadata and settles it.
            self._trace(f"broker {b.id}: ISR proposal {seq} is stale: {error}")
        elif outcome is AlterOutcome.REJECTED:
            self._reject_isr(b, attempt, error)
        elif outcome is AlterOutcome.RETRY:
            # The controller may have committed it: ask again (a new connection, so a new request) while the
            # same leadership waits for it. A new partition state (by metadata) or leadership ends the retries.
            part = b.parts.get(attempt.partition)
            retry = b.attempts.retry(attempt, part.leader_state if part is not None else None)
            if retry is not None:
                self._send_alter(b, retry)

    def _alter_rejected(self, b: SimBroker, seq: int, error: str) -> None:
        attempt = b.attempts.in_flight.pop(seq, None)
        if attempt is not None:
            self._reject_isr(b, attempt, error)

    def _reject_isr(self, b: SimBroker, attempt: AlterAttempt, error: str) -> None:
        """AlterPartitionManager.alter's failure path: the proposal is over, the HW may ignore its additions."""
        self.result.alter_rejected += 1
        self._trace(f"broker {b.id}: ISR {list(attempt.isr)} for p{attempt.partition} not committed: {error}")
        part = b.parts.get(attempt.partition)
        if part is not None:
            part.isr_change_rejected(list(attempt.isr), attempt.partition_epoch)
            self._check_waiters(b, part)

    # --- replication: replica_manager.py _read_for_follower, replica_fetcher.py ----------------------------

    def _on_recovery(self, b: SimBroker, part: Partition, event: str) -> None:
        """ReplicaManager._on_recovery: a new leader fetches from the replica it recovers from, stops, or is done."""
        if event == "fetch":
            self.result.recoveries_fetched += 1
            self._trace(f"broker {b.id} recovers p{part.partition} from broker {part.fetch_source}")
            self._follow(b, part)
        elif event == "stop":
            self._unfollow(b, part)
        elif event == "done":
            view = b.views[part.partition]
            view.sync()  # it may have recovered by the append now under way (handle_fetch_row)
            self.checker.check_takeover(b.id, part.partition, part.leader_epoch, view)
            self._trace(f"broker {b.id} recovered p{part.partition} in epoch {part.leader_epoch}")

    def _follow(self, b: SimBroker, part: Partition) -> None:
        self._unfollow(b, part)
        source = part.fetch_source  # its leader, or the replica a recovering leader fetches from
        f = b.fetchers.setdefault(source, _Fetcher(source))
        f.followed.add(part)
        if f.req is None and not f.scheduled:
            self._schedule_fetch(b, f, 1)

    def _unfollow(self, b: SimBroker, part: Partition) -> None:
        for f in b.fetchers.values():
            f.followed.remove(part)

    def _schedule_fetch(self, b: SimBroker, f: _Fetcher, after: int) -> None:
        if f.followed.partitions and not f.scheduled:
            f.scheduled = True
            self._timer(b, after, _FETCH, f.leader)

    def _fetch_once(self, b: SimBroker, f: _Fetcher) -> None:
        specs, f.sent = f.followed.next_fetch()
        if not specs:
            self._schedule_fetch(b, f, self.params.fetch_idle_ms)
            return
        f.req = self._next_req()
        max_bytes = self.params.fetch_max_records * BATCH_BYTES
        f.fetch = f.session.build(
            {tp: (offset, max_bytes, leader_epoch, last_epoch, -1) for tp, offset, last_epoch, leader_epoch in specs}
        )
        rows = tuple((p, r[0], r[2], r[3]) for (_, p), r in f.fetch.send.items())
        forgotten = tuple(p for _, p in f.fetch.forgotten)
        self._send(b.id, f.leader, Fetch(b.id, f.req, f.fetch.session_id, f.fetch.epoch, rows, forgotten))
        self._timer(b, self.params.rpc_timeout_ms, _FETCH_TIMEOUT, (f.leader, f.req))

    def _serve_fetch(self, b: SimBroker, msg: Fetch) -> None:
        """KafkaApis.handle_fetch's session (broker/replica/fetch_session.py), then ReplicaManager.read for a follower:
        Partition.read_for_follower, for every partition of the session."""
        rows = []
        max_bytes = self.params.fetch_max_records * BATCH_BYTES
        b.silence.on_fetch_received(msg.src, self.now)
        try:
            ctx = b.fetch_sessions.new_context(
                msg.src,
                msg.session_id,
                msg.session_epoch,
                [FetchSpec((TOPIC, p), o, max_bytes, ce, le) for p, o, ce, le in msg.specs],
                [(TOPIC, p) for p in msg.forgotten],
                float(self.now),
            )
        except FetchSessionError as e:
            self._send(b.id, msg.src, FetchAnswer(msg.req, (), error=int(e.code)))
            return
        for spec in ctx.specs:
            p, offset, current_epoch, last_epoch = (
                spec.tp[1],
                spec.offset,
                spec.current_leader_epoch,
                spec.last_fetched_epoch,
            )
            part = b.parts.get(p)
            spec = FetchSpec((TOPIC, p), offset, max_bytes, current_epoch, last_epoch)
            if part is None:
                rows.append((p, PartitionFetch(int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))))
            elif part.serves_recovery_fetch(msg.src, spec):
                rows.append((p, part.read_for_recovering_leader(spec)))  # ReplicaManager.read's first case
            elif part.leader_state is None:
                rows.append((p, PartitionFetch(int(ErrorCode.NOT_LEADER_OR_FOLLOWER), part.high_watermark)))
            else:
                rows.append((p, part.read_for_follower(spec, msg.src, self.now)))
                self._check_waiters(b, part)
        answer = ctx.answer({(TOPIC, p): row for p, row in rows})
        if any(row.records for row in answer.values()):
            b.silence.on_records_sent(msg.src, self.now)  # ReplicaManager.fetch_messages: its next fetch is due
        self._send(
            b.id, msg.src, FetchAnswer(msg.req, tuple((tp[1], row) for tp, row in answer.items()), ctx.session_id)
        )

    def _on_fetch_result(self, b: SimBroker, leader: int, msg: FetchAnswer) -> None:
        f = b.fetchers.get(leader)
        if f is None or f.req != msg.req:
            return  # not the request in flight (timed out, duplicated, or the fetcher is gone)
        f.req = None
        if msg.error or f.fetch is None:
            f.session.reset()  # a session the leader lost (it restarted) or an epoch out of turn: fetch in full
            self._schedule_fetch(b, f, 1)
            return
        f.session.answered(f.fetch, msg.session_id)
        got = False
        for partition, row in msg.rows:
            part = f.followed.answered(f.sent, (TOPIC, partition))
            if part is None:
                continue  # not asked, or reassigned or in a new leader epoch while the fetch was in flight
            view = b.views[partition]
            before = part.log.log_end_offset
            # replica_fetcher.py's own decision, on the typed row the leader's handle_fetch answers; out of range,
            # the leader's log end as its ListOffsets would answer the follower (ReplicaFetcher._truncate_ahead),
            # here read with the fetch rather than in a second round trip.
            ahead = row.log_end_offset if row.error == ErrorCode.OFFSET_OUT_OF_RANGE else -1
            got |= handle_fetch_row(part, leader, row.typed(partition), ahead)
            if part.log.log_end_offset < before:
                self.result.truncations += 1
                self._trace(f"broker {b.id} truncates p{partition} to {part.log.log_end_offset}")
            view.sync()
        self._schedule_fetch(b, f, 1 if got else self.params.fetch_idle_ms)

    # --- the controller -------------------------------------------------------------------------------

    def _controller_receive(self, src: int, msg: Any) -> None:
        ctrl = self.ctrl
        if isinstance(msg, MetaFetch):
            ctrl.last_fetch[msg.src] = self.now
            # QuorumDriver.receive: the newest incarnation per broker, from FetchRequest.incarnation.
            ctrl.incarnation[msg.src] = max(ctrl.incarnation.get(msg.src, 0), msg.incarnation)
            batch = tuple(ctrl.records[msg.offset : msg.offset + self.params.meta_batch])
            self._send(CONTROLLER, msg.src, MetaRecords(msg.incarnation, msg.offset, batch, len(ctrl.records)))
        elif isinstance(msg, AlterIsr):
            if (msg.incarnation, msg.req) <= ctrl.alter_seen.get(msg.src, (0, 0)):
                # See _send_alter. ControllerService.alter_partition does this with (incarnation, seq),
                # answering REQUEST_TIMED_OUT (no verdict) where this drops the request.
                return
            ctrl.alter_seen[msg.src] = (msg.incarnation, msg.req)
            # ControllerService.alter_partition: computed on the up-to-date image, committed, answered.
            st = ctrl.state(msg.partition)
            stale = st is None or (msg.src, msg.leader_epoch, msg.partition_epoch) != (
                st.leader,
                st.leader_epoch,
                st.partition_epoch,
            )
            try:
                if self.alter_policy == "kafka":
                    # A proposal from a process that has since restarted. The restarted leader does not know
                    # it; committing it would add a replica its HW is not waiting for. Production: the same
                    # check in ControllerService.alter_partition, incarnations from quorum fetches.
                    check_broker_incarnation(msg.src, msg.incarnation, ctrl.incarnation.get(msg.src, 0))
                ctrl.logic.leader_moves.clear()
                records = ctrl.logic.alter_partition(
                    TOPIC,
                    msg.partition,
                    msg.src,
                    msg.leader_epoch,
                    msg.partition_epoch,
                    list(msg.isr),
                    list(msg.silent),
                )
            except KafkaLiteError as e:
                # The error code must say what the state says: a refusal against a newer state keeps the
                # proposal pending, one against the current state resets it (alter_partition_outcome).
                awaits = alter_partition_outcome(e.code) is AlterOutcome.AWAIT_METADATA
                if e.code != ErrorCode.STALE_BROKER_EPOCH and awaits != stale:
                    state = "stale" if stale else "current"
                    raise SimFailure(
                        f"controller answered {e.code.name} to a proposal on the {state} state: {e}"
                    ) from None
                self._send(CONTROLLER, msg.src, AlterIsrResult(msg.req, str(e), int(e.code)))
                return
            ctrl.commit(records)
            self.result.isr_changes += 1
            if ctrl.logic.leader_moves:
                # ControllerService.alter_partition: a shrink below min.insync.replicas while the dropped members
                # are live and silent (no fetch reached the leader) moved the leadership instead; committed,
                # answered FENCED_LEADER_EPOCH (the leader keeps its proposal pending until the metadata that
                # makes it a follower arrives).
                ctrl.logic.leader_moves.clear()
                self._trace(f"controller moves p{msg.partition}'s leadership off broker {msg.src} (asked {msg.isr})")
                moved = "leadership moved (the ISR would fall below min.insync.replicas)"
                self._send(CONTROLLER, msg.src, AlterIsrResult(msg.req, moved, int(ErrorCode.FENCED_LEADER_EPOCH)))
                return
            self._trace(f"controller commits ISR {list(msg.isr)} for p{msg.partition} from broker {msg.src}")
            self._send(CONTROLLER, msg.src, AlterIsrResult(msg.req, None))

    def _controller_tick(self) -> None:
        ctrl = self.ctrl
        if ctrl.up:
            # ControllerService.tick: at most one broker's registration or fencing per proposal.
            records = ctrl.service._liveness_records(self.now)
            ctrl.logic.unclean_elections.clear()
            for r in records:
                if isinstance(r, BrokerRecord):
                    self._trace(f"controller {'fences' if r.fenced else 'registers'} broker {r.id}")
                    self.result.fencings += int(r.fenced)
            ctrl.commit(records)
            if not ctrl.topic_created and len(ctrl.image.live_brokers()) >= RF:
                p = self.params
                records = ctrl.logic.create_topic(TOPIC, p.partitions, RF, {"min.insync.replicas": str(p.min_isr)})
                assert isinstance(records[0], TopicRecord)
                records[0].topic_id = f"sim-{self.seed}"  # uuid4 would make replays differ
                ctrl.commit(records)
                ctrl.topic_created = True
                placed = [r.replicas for r in records if isinstance(r, PartitionRecord)]
                self._trace(f"controller creates {TOPIC}: {placed}")
        self._push(self.now + self.params.ctrl_tick_ms, _CTRL_TICK)

    def _controller_back(self) -> None:
        """A new controller after an outage: no fetch history, grace for brokers seen in its election."""
        ctrl = self.ctrl
        ctrl.up = True
        ctrl.last_fetch = {}
        ctrl.service._since_ms = self.now
        ctrl.seen = frozenset(
            b for b in self.ids if self.brokers[b].up and self._linked(b, CONTROLLER) and self.rng.random() < 0.8
        )
        self._trace(f"controller back (seen in its election: {sorted(ctrl.seen)})")

    # --- clients ----------------------------------------------------------------------------------------

    def _batch(self, value: str, producer_id: int = -1, sequence: int = -1) -> bytes:
        idem = {"producer_id": producer_id, "producer_epoch": 0, "base_sequence": sequence} if producer_id >= 0 else {}
        return batch_fmt.build([(0, 0, None, value.encode(), None)], self.now, self.now, **idem)

    def _target(self, p: int) -> int:
        rng = self.rng
        if self.markers:  # liveness phase: the leader the controller names
            st = self.ctrl.state(p)
            return st.leader if st is not None and st.leader > 0 else rng.choice(self.ids)
        if rng.random() < 0.5:
            return rng.choice(self.ids)
        # The leader as some broker's (possibly stale) image says: a client's metadata request.
        info = self.brokers[rng.choice(self.ids)].image.topics.get(TOPIC)
        st = info.partitions.get(p) if info is not None else None
        return st.leader if st is not None and st.leader > 0 else rng.choice(self.ids)

    def _client(self) -> None:
        rng = self.rng
        if self.markers:
            # Liveness phase: send each unacknowledged marker to the leader the controller names.
            for p, marker in self.markers.items():
                st = self.ctrl.state(p)
                if p not in self.marker_acked and st is not None and st.leader >= 0:
                    self._send(CLIENT, st.leader, Produce(p, marker, self._batch(marker)))
            self._push(self.now + 2 * self.params.rpc_timeout_ms, _CLIENT)
            return
        p = rng.randrange(self.params.partitions)
        if rng.random() < 0.5:
            prod = rng.choice(self.producers)
            if p not in prod.in_flight:
                seq = prod.next_sequence.get(p, 0)
                value = f"p{prod.producer_id}-{p}-{seq}"
                prod.in_flight[p] = InFlight(seq, value, self._batch(value, prod.producer_id, seq))
                self._send_in_flight(prod, p)
        else:
            self.values += 1
            value = f"v{self.values}"  # fire and forget (acks=all, no retries, no producer id)
            self._send(CLIENT, self._target(p), Produce(p, value, self._batch(value)))
        self._push(self.now + int(rng.expovariate(1 / self.params.client_mean_ms)) + 1, _CLIENT)

    def _producer(self, producer_id: int) -> SimProducer:
        return self.producers[producer_id - 1000]

    def _send_in_flight(self, prod: SimProducer, p: int) -> None:
        f = prod.in_flight[p]
        f.req = self._next_req()
        self._send(CLIENT, self._target(p), Produce(p, f.value, f.batch, (prod.producer_id, f.sequence, f.req)))
        self._push(self.now + self.params.rpc_timeout_ms, _RETRY, (prod.producer_id, p), f.req)  # request.timeout.ms

    def _retry(self, key: tuple[int, int], req: int) -> None:
        prod = self._producer(key[0])
        f = prod.in_flight.get(key[1])
        if f is None or f.req != req:
            return  # answered, or a newer attempt is on its way
        self.result.retries += 1
        self._send_in_flight(prod, key[1])

    def _on_produce_answer(self, msg: ProduceAnswer) -> None:
        prod = self._producer(msg.producer_id)
        f = prod.in_flight.get(msg.partition)
        if f is None or f.sequence != msg.sequence:
            return  # an answer to a batch acknowledged already
        if msg.error is None:  # committed, whichever attempt it answers
            del prod.in_flight[msg.partition]
            prod.next_sequence[msg.partition] = msg.sequence + 1
        elif msg.req == f.req:  # a retriable error of the newest attempt: again after retry.backoff.ms
            f.req = self._next_req()
            self._push(self.now + self.rng.randint(1, 20), _RETRY, (prod.producer_id, msg.partition), f.req)

    # --- faults -----------------------------------------------------------------------------------------

    def _fault(self) -> None:
        rng, p = self.rng, self.params
        up = [b for b in self.brokers.values() if b.up]
        leaders = [b for b in up if any(x.leader_state is not None for x in b.parts.values())]
        kind = rng.random()
        if kind < 0.12 and up:
            self._crash(rng.choice(up), "fault")
        elif kind < 0.22 and leaders:
            self._crash(rng.choice(leaders), "leader fault")
        elif kind < 0.45:
            nodes = [CONTROLLER, *self.ids]
            if rng.random() < 0.6:
                pool = [b.id for b in leaders] if leaders and rng.random() < 0.5 else nodes
                isolated = rng.choice(pool)
                self.group = {n: int(n == isolated) for n in nodes}
            else:
                self.group = {n: rng.randint(0, 1) for n in nodes}
            self._trace(f"partition {self.group}")
        elif kind < 0.55:
            a = rng.choice([b.id for b in leaders]) if leaders and rng.random() < 0.7 else rng.choice(self.ids)
            c = CONTROLLER if rng.random() < 0.6 else rng.choice([CONTROLLER, *self.ids])
            if a != c:
                self.cut.add((min(a, c), max(a, c)))
                self._trace(f"cut link {a}-{c}")
        elif kind < 0.7:
            self.group = {n: 0 for n in self.group}
            self.cut = set()
            self._trace("heal partition")
        elif kind < 0.78:
            self.loss_p = rng.choice([0.0, 0.05, 0.3, 0.7])
        elif kind < 0.89 and up:
            b = rng.choice(leaders or up)
            if not b.paused:
                b.paused = True
                self._trace(f"pause broker {b.id}")
                self._push(self.now + rng.randint(1, 2 * p.session_timeout_ms), _RESUME, (b.id, b.incarnation))
        elif self.ctrl.up:
            self.ctrl.up = False
            self._trace("controller outage")
            self._push(self.now + rng.randint(1, 2 * p.session_timeout_ms), _CTRL_BACK)
        self._push(self.now + int(rng.expovariate(1 / p.fault_mean_ms)) + 1, _FAULT)

    def _resume(self, b: SimBroker) -> None:
        if not b.paused:
            return
        self._trace(f"resume broker {b.id}")
        b.paused = False
        events, b.deferred = b.deferred, []
        for kind, a, c in events:
            self._push(
                self.now,
                DELIVER if kind == DELIVER else _TIMER,
                b.id if kind == DELIVER else (b.id, b.incarnation),
                (a, c),
            )

    def _heal_all(self) -> None:
        self.faults_on = False
        self.group = {n: 0 for n in self.group}
        self.cut = set()
        self.loss_p = self.late_p = 0.0
        p = self.params
        self.max_delay = max(p.min_delay_ms, min(self.max_delay, p.session_timeout_ms // 10))
        if not self.ctrl.up:
            self._controller_back()
        for b in self.brokers.values():
            if not b.up:
                self._trace(f"restart broker {b.id}")
                self._boot(b)
            else:
                self._resume(b)
        self.markers = {q: f"marker-{q}" for q in range(p.partitions)}
        self._trace("heal everything")
        self._push(self.now, _CLIENT)

    def _liveness_bound(self) -> int:
        p = self.params
        meta_rounds = len(self.ctrl.records) // p.meta_batch + 2
        longest = max((v.log_end_offset for b in self.brokers.values() for v in b.views.values()), default=0)
        fetch_rounds = longest // p.fetch_max_records + 2
        round_trip = 2 * self.max_delay
        return (
            4 * p.session_timeout_ms
            + 4 * p.lag_time_max_ms
            + 6 * p.rpc_timeout_ms
            + (2 * p.brokers + 4) * p.ctrl_tick_ms
            + meta_rounds * (round_trip + p.meta_interval_ms)
            + fetch_rounds * (round_trip + p.fetch_idle_ms) * 2
        )

    # --- main loop --------------------------------------------------------------------------------------

    def _dispatch(self, kind: int, a: Any, c: Any, at: int) -> None:
        if kind == DELIVER:
            src, msg = c
            if not self._linked(src, a):
                pass  # the partition started while the message was on the wire
            elif a == CONTROLLER:
                if self.ctrl.up:
                    self.result.messages += 1
                    self._controller_receive(src, msg)
            elif a == CLIENT:
                self._on_produce_answer(msg)
            else:
                b = self.brokers[a]
                if b.up:
                    self.result.messages += 1
                    self._broker_event(b, DELIVER, src, msg)
        elif kind == _TIMER:
            b = self.brokers[a[0]]
            if b.up and b.incarnation == a[1]:
                self._broker_event(b, _TIMER, *c)
        elif kind == _FAULT:
            if self.faults_on:
                self._fault()
        elif kind == _CLIENT:
            self._client()
        elif kind == _RESTART:
            b = self.brokers[a]
            if not b.up and self.faults_on:
                self._trace(f"restart broker {b.id}")
                self._boot(b)
        elif kind == _RESUME:
            b = self.brokers[a[0]]
            if b.up and b.incarnation == a[1]:
                self._resume(b)
        elif kind == _CTRL_BACK:
            if not self.ctrl.up:
                self._controller_back()
        elif kind == _CTRL_TICK:
            self._controller_tick()
        elif kind == _RETRY:
            self._retry(a, c)
        self._check()

    def _check(self) -> None:
        checker, ctrl = self.checker, self.ctrl
        for b in self.brokers.values():
            if not b.up:
                continue
            for p, part in b.parts.items():
                ls = part.leader_state
                if ls is not None:
                    checker.check_leader(p, b.id, ls.leader_epoch, ctrl.assigned.get((p, ls.leader_epoch)))
                checker.check_replica(b.id, p, part.leader_epoch, b.views[p], part.high_watermark)
                if ls is not None:
                    # (e): what this leader answers to ListOffsets latest now (replica_manager.list_offset's rule)
                    try:
                        latest = part.latest_offset(ls.leader_epoch)
                    except OffsetNotAvailableError:
                        continue
                    checker.check_latest(p, b.id, ls.leader_epoch, latest)
        for p in range(self.params.partitions):
            st = ctrl.state(p)
            if st is None or st.leader < 0:
                continue
            lb = self.brokers[st.leader]
            part = lb.parts.get(p) if lb.up else None
            if part is None or part.leader_state is None or part.leader_state.leader_epoch != st.leader_epoch:
                continue
            members = st.replicas if self.quorum else st.isr
            logs = {r: self.brokers[r].views[p] for r in members if p in self.brokers[r].views}
            quorum = part.leader_state.quorum_size if self.quorum else None
            checker.check_isr(p, st.leader, st.leader_epoch, part.high_watermark, st.isr, logs, quorum)

    def run(self, steps: int) -> Result:
        r = self.result
        try:
            self._push(int(self.rng.expovariate(1 / self.params.fault_mean_ms)) + 1, _FAULT)
            self._push(1, _CLIENT)
            self._run_steps(steps)
            self._heal_all()
            healed_at = self.now
            r.liveness_bound_ms = bound = self._liveness_bound()

            def done() -> bool:
                return len(self.marker_acked) >= len(self.markers) and not any(x.in_flight for x in self.producers)

            def failure() -> str:
                missing = sorted(set(self.markers) - set(self.marker_acked))
                waiting = [f.value for x in self.producers for f in x.in_flight.values()]
                return (
                    f"liveness: partitions {missing} acknowledged nothing, and producers' batches {waiting} "
                    f"were not acknowledged, {bound} ms after the heal"
                )

            self._run_until(done, healed_at + bound, failure)
            r.liveness_ms = self.now - healed_at
            # The leader that acknowledged a marker held every committed record then (its HW had passed
            # them all): nothing acknowledged before may be missing from its log.
            leader_logs = {p: self.brokers[b].views[p] for p, b in self.marker_acked.items()}
            self.checker.check_final(leader_logs)
        except Exception as e:  # noqa: BLE001 - anything out of the production code is a bug to report with its seed
            r.ok = False
            what = str(e) if isinstance(e, SimFailure) else f"{type(e).__name__}: {e}"
            r.failure = f"seed={self.seed} step={self.step} t={self.now}ms: {what}"
            r.failed_step = self.step
        finally:
            for b in self.brokers.values():
                b.close_logs()
            shutil.rmtree(self.disk, ignore_errors=True)
        r.steps = self.step
        r.virtual_ms = self.now
        r.committed = sum(len(c) for c in self.checker.committed.values())
        return r


def run_schedule(
    seed: int,
    steps: int = 3000,
    brokers: int | None = None,
    trace: bool = False,
    alter_policy: str = "kafka",
    metadata_policy: str = "catch-up",
    late_p: float | None = None,
    quorum: bool = True,
) -> Result:
    """Run one seeded schedule; the same arguments always give the same Result. `late_p` overrides the
    drawn probability of very late deliveries (which some rare interleavings need); `quorum` False runs the
    brokers with replica.quorum.commit.enable=false (Kafka's rules)."""
    return Simulation(seed, brokers, trace, alter_policy, metadata_policy, late_p, quorum).run(steps)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.sim.replication_sim", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=1000, help="number of schedules")
    ap.add_argument("--start", type=int, default=0, help="first seed")
    ap.add_argument("--steps", type=int, default=3000, help="fault-phase steps per schedule")
    ap.add_argument("--brokers", type=int, choices=[3, 4, 5], help="cluster size (default: drawn from the seed)")
    ap.add_argument(
        "--alter-policy", choices=ALTER_POLICIES, default="kafka", help="how leaders treat failed AlterPartitions"
    )
    ap.add_argument(
        "--metadata-policy",
        choices=METADATA_POLICIES,
        default="catch-up",
        help="when a restarted broker starts acting on its metadata",
    )
    ap.add_argument("--late-p", type=float, help="probability of a very late delivery (default: drawn)")
    ap.add_argument(
        "--no-quorum", action="store_true", help="replica.quorum.commit.enable=false: Kafka's ISR rules only"
    )
    ap.add_argument("--replay", type=int, help="run only this seed and print its result")
    ap.add_argument("--trace", action="store_true", help="with --replay: print the event trace")
    args = ap.parse_args(argv)
    if args.replay is not None:
        r = run_schedule(
            args.replay,
            args.steps,
            args.brokers,
            args.trace,
            args.alter_policy,
            args.metadata_policy,
            args.late_p,
            not args.no_quorum,
        )
        for line in r.trace:
            print(line)
        print({k: v for k, v in vars(r).items() if k != "trace"})
        return 0 if r.ok else 1
    started = time.monotonic()
    failures: list[Result] = []
    keys = (
        "steps",
        "leaderships",
        "isr_changes",
        "fencings",
        "truncations",
        "produced",
        "acked",
        "committed",
        "crashes",
        "recoveries_fetched",
    )
    totals = dict.fromkeys(keys, 0)
    liveness: list[int] = []
    for seed in range(args.start, args.start + args.seeds):
        r = run_schedule(
            seed,
            args.steps,
            args.brokers,
            False,
            args.alter_policy,
            args.metadata_policy,
            args.late_p,
            not args.no_quorum,
        )
        if not r.ok:
            failures.append(r)
            print(f"FAIL {r.failure}", flush=True)
            continue
        for k in keys:
            totals[k] += getattr(r, k)
        if r.liveness_ms is not None:
            liveness.append(r.liveness_ms)
    elapsed = time.monotonic() - started
    liveness.sort()
    p = (lambda q: liveness[min(len(liveness) - 1, int(q * len(liveness)))]) if liveness else (lambda q: None)
    print(
        f"{args.seeds} schedules (seeds {args.start}..{args.start + args.seeds - 1}) in {elapsed:.1f}s: "
        f"{args.seeds - len(failures)} ok, {len(failures)} failed"
    )
    print("  " + ", ".join(f"{k} {v}" for k, v in totals.items()))
    print(
        f"  time from the heal to every marker acknowledged (virtual ms): median {p(0.5)}, p99 {p(0.99)}, max {p(1.0)}"
    )
    for r in failures:
        print(
            f"  replay: python -m tests.sim.replication_sim --replay {r.seed} --steps {args.steps} "
            f"--alter-policy {args.alter_policy} --metadata-policy {args.metadata_policy}"
            + (f" --late-p {args.late_p}" if args.late_p is not None else "")
            + " --trace"
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
