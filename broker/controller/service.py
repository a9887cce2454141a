"""ControllerService: runs on every broker, active on the elected controller.

It turns admin requests, ISR change requests and broker liveness into metadata
records (through the pure ControllerLogic) and commits them through the
coordination (election/coordination.py: the custom quorum or ZooKeeper; this
code does not know which).
Proposals are serialized, and each is computed from the image with every
earlier one applied, so a leader epoch is never handed out twice.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from broker.controller.leader_balance import RebalancePolicy, rebalance_candidates
from broker.controller.logic import AlterPartitionError, ControllerLogic, PartitionLimits, check_broker_incarnation
from broker.metadata.image import MetadataImage
from broker.metadata.records import BrokerRecord, ClusterRecord, MetadataRecord
from broker.utils.repeated_log import RepeatedConditionLog
from net.errors import ErrorCode, KafkaLiteError
from net.protocol import ElectionType

if TYPE_CHECKING:
    from broker.metadata.propagation import MetadataPropagation
    from election.coordination import Coordination

log = logging.getLogger("kafkalite.controller")


class NotControllerError(KafkaLiteError):
    code = ErrorCode.NOT_CONTROLLER


# Kafka's controller makes its first leader-imbalance check 5 s after it takes over, then one every interval.
FIRST_REBALANCE_CHECK_MS = 5000


# AlterPartitions committed together at most (_drain_alters): a proposal of ZooKeeper mode is one znode, at most
# 1 MB (jute.maxbuffer), and a partition record is about 200 bytes; the rest wait for the next commit.
ALTERS_PER_COMMIT = 500


@dataclass(slots=True)
class _PendingAlter:
    """An AlterPartition waiting for the controller's next group commit (ControllerService._drain_alters)."""

    key: tuple[str, int]
    compute: Callable[[ControllerLogic], list[MetadataRecord]]
    done: asyncio.Future[Any]


def _settle(fut: asyncio.Future[Any], result: Any = None, error: BaseException | None = None) -> None:
    """Answer a waiting AlterPartition, unless its caller gave up (cancelled) meanwhile."""
    if fut.done():
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(result)


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


class ControllerService:
    def __init__(
        self,
        broker_id: int,
        image: MetadataImage,
        quorum: "Coordination",
        addresses: dict[int, tuple[str, int]],
        session_timeout_ms: int,
        cluster_id: str,
        unclean_default: bool = False,
        min_insync_default: int = 1,
        bootstrap_records: list[MetadataRecord] | None = None,
        rebalance: RebalancePolicy | None = None,
        limits: PartitionLimits = PartitionLimits(),
    ) -> None:
        self.broker_id = broker_id
        self.rebalance = rebalance or RebalancePolicy()
        self._next_rebalance_ms = 0
        self._rebalancing: asyncio.Task[None] | None = None
        # Committed with the `cluster` record when this controller starts a new cluster: the credentials of
        # `kl-broker start --add-scram` (kafka-storage.sh format --add-scram), never applied to a formed one.
        self.bootstrap_records = list(bootstrap_records or [])
        self._liveness_log = RepeatedConditionLog(log)  # a proposal failing every tick without a quorum
        self.image = image
        self.quorum = quorum
        self.addresses = addresses
        self.session_timeout_ms = session_timeout_ms
        self.logic = ControllerLogic(image, unclean_default, min_insync_default, limits)
        self.cluster_id = cluster_id
        self.active = False
        self.epoch = -1
        self._ready_at_offset = 0
        self._since_ms = 0
        self._lock = asyncio.Lock()
        self._housekeeping: asyncio.Task[None] | None = None
        # The broker ticks us every 100 ms; a failover should not wait for that tick twice (once to fence
        # after the 2 s session timeout, once after winning an election), so we also wake at the exact
        # moment a session can expire and the moment our epoch's first record is applied.
        self._expiry_timer: asyncio.TimerHandle | None = None
        self._ready_epoch = -1  # the epoch in which we last became ready
        # broker -> (incarnation, seq) of the newest AlterPartition taken from it (see alter_partition).
        self._alter_taken: dict[int, tuple[int, int]] = {}
        # AlterPartitions waiting for the next group commit, and the task committing them (_drain_alters).
        self._alters: list[_PendingAlter] = []
        self._alter_drain: asyncio.Task[None] | None = None
        # Set by the broker's wiring, which makes the peers after us (broker/server/broker_server.py).
        self.propagation: MetadataPropagation | None = None
        quorum.applied_listeners.append(self._on_applied)
        quorum.liveness_listeners.append(self._on_liveness_changed)

    # --- role changes from the quorum ---------------------------------------------

    def on_role(self, is_controller: bool, epoch: int, leader: int | None) -> None:
        self.active = is_controller
        self.epoch = epoch
        if is_controller:
            self._since_ms = _now_ms()
            self._next_rebalance_ms = self._since_ms + min(FIRST_REBALANCE_CHECK_MS, self.rebalance.check_interval_ms)
            # Records of earlier epochs in our log commit with our first record: act only once applied.
            self._ready_at_offset = self.quorum.log_end_offset
        elif self._expiry_timer is not None:
            self._expiry_timer.cancel()
            self._expiry_timer = None

    def _on_applied(self) -> None:
        if self.ready and self._ready_epoch != self.epoch:
            self._ready_epoch = self.epoch
            log.info("active controller in epoch %d, %d ms after winning", self.epoch, _now_ms() - self._since_ms)
            # Fence a controller that died (it took no part in our election) now, not at the next tick.
            # call_soon: we are inside the quorum driver's apply loop, which a proposal must not re-enter.
            asyncio.get_running_loop().call_soon(self.tick)

    def _on_liveness_changed(self) -> None:
        # A broker's registration appeared or vanished (ZooKeeper mode): act now, not at the next tick.
        # call_soon: the coordination may be in the middle of its own bookkeeping.
        if self.ready:
            asyncio.get_running_loop().call_soon(self.tick)

    @property
    def ready(self) -> bool:
        return self.active and self.quorum.applied >= self._ready_at_offset

    def check_active(self) -> None:
        if not self.ready:
            leader = self.quorum.controller_id
            raise NotControllerError(
                f"broker {self.broker_id} is not the active controller"
                + (f" (controller is {leader})" if leader is not None and leader != self.broker_id else "")
            )

    # --- proposals -----------------------------------------------------------------

    async def run(self, compute: Callable[[ControllerLogic], list[MetadataRecord]], timeout: float = 10.0) -> None:
        """compute(logic) -> records, evaluated under the lock on the up-to-date image, then committed."""
        async with self._lock:
            self.check_active()
            records = compute(self.logic)
            self._report_unclean()
            if records:
                await self._propose(records, timeout)

    async def _propose(self, records: list[MetadataRecord], timeout: float = 10.0) -> None:
        """Commit typed records: here, and only here, they become the dicts the metadata log holds (and the
        quorum or ZooKeeper carries to every broker)."""
        await self.quorum.propose([r.to_dict() for r in records], timeout)

    def _report_unclean(self) -> None:
        for topic, partition, leader, isr in self.logic.unclean_elections:
            log.warning(
                "UNCLEAN leader election for %s-%d: broker %d was not in the ISR %s; records only the ISR had are lost",
                topic,
                partition,
                leader,
                isr,
            )
        self.logic.unclean_elections.clear()

    def tick(self) -> None:
        """Registration and fencing, from the coordination's liveness view (quorum fetches or znodes)."""
        if self.quorum.stopped:
            return  # shutting down: the expiry timer may outlive the broker's periodic tick, never propose now
        if not self.ready or (self._housekeeping is not None and not self._housekeeping.done()):
            return
        now = _now_ms()
        records = self._liveness_records(now)
        self.logic.unclean_elections.clear()  # a preview only: the proposal recomputes and reports
        if records:
            self._housekeeping = asyncio.ensure_future(self._propose_liveness(records))
        else:
            self._maybe_rebalance(now)  # brokers coming and going first: the rebalance waits for a quiet tick
        self._arm_expiry_timer(now)

    def _arm_expiry_timer(self, now: int) -> None:
        """Tick again at the moment the earliest live broker's session can expire, not up to 100 ms later.

        Only the time of the check moves: whether a broker is alive is still decided by `_alive`, against
        the full session timeout. Fetches keep pushing a live broker's expiry forward, so in steady state
        the timer is re-armed by every periodic tick and never fires."""
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
            self._expiry_timer = None
        due = [
            at
            for bid in self.quorum.known_brokers()
            if bid != self.broker_id
            and (b := self.image.brokers.get(bid)) is not None
            and not b.fenced
            and (at := self._expires_at(bid)) is not None
        ]
        if due:
            # +1 ms: _now_ms() truncates, and `_alive` needs now >= expiry to see the session as expired.
            delay_s = (max(min(due) - now, 0) + 1) / 1000
            self._expiry_timer = asyncio.get_running_loop().call_later(delay_s, self.tick)

    async def _propose_liveness(self, records: list[MetadataRecord]) -> None:
        try:
            async with self._lock:
                if not self.ready:
                    return
                # Recompute under the lock: the image may have moved since tick() looked.
                records = self._liveness_records(_now_ms())
                self._report_unclean()
                for r in records:
                    if isinstance(r, BrokerRecord):
                        if r.fenced:
                            log.warning(
                                "fencing broker %d: no sign of life for %d ms, or its process is gone",
                                r.id,
                                self.session_timeout_ms,
                            )
                        else:
                            log.info("registering broker %d (%s:%d)", r.id, r.host, r.port)
                if records:
                    started = _now_ms()
                    await self._propose(records)
                    # The commit latency after detection is part of every failover (docs/BENCHMARKS.md timeline).
                    log.info("liveness update committed in %d ms", _now_ms() - started)
                    self._liveness_log.clear("liveness", how="liveness update committed")
        except KafkaLiteError as e:
            self._liveness_log.report("liveness", logging.WARNING, "liveness update not committed: %s", e)

    def _liveness_records(self, now: int) -> list[MetadataRecord]:
        """At most one broker's change per proposal: each is computed on an image with the previous applied."""
        records: list[MetadataRecord] = []
        if not self.image.cluster_id:
            records.append(ClusterRecord(self.cluster_id))
            records += self.bootstrap_records
        for bid, (host, port) in sorted(self.quorum.known_brokers().items()):
            alive = bid == self.broker_id or self._alive(bid, now)
            b = self.image.brokers.get(bid)
            if alive and (b is None or b.fenced or (b.host, b.port) != (host, port)):
                return records + self.logic.register_broker(bid, host, port)
            elif not alive and b is not None and not b.fenced:
                return records + self.logic.fence_broker(bid)
        return records

    def _alive(self, bid: int, now: int) -> bool:
        at = self._expires_at(bid)
        return at is None or now < at

    def _expires_at(self, bid: int) -> int | None:
        """The time (ms, our clock) from which `bid` counts as dead unless it shows life again (None: alive).
        The rule is the coordination's: election/coordination.py fetch_liveness_expiry (custom mode) and
        registration_expiry (ZooKeeper)."""
        return self.quorum.broker_expires_at(bid, self.epoch, self._since_ms, self.session_timeout_ms)

    # --- preferred leaders: the periodic rebalance and ElectLeaders -------------------------

    def _maybe_rebalance(self, now: int) -> None:
        """Every check interval, elect the preferred replicas where a broker's leader imbalance is above the
        percentage (broker/controller/leader_balance.py decides)."""
        policy = self.rebalance
        if not policy.enabled or now < self._next_rebalance_ms:
            return
        if self._rebalancing is not None and not self._rebalancing.done():
            return
        self._next_rebalance_ms = now + policy.check_interval_ms
        if self._rebalance_candidates():
            self._rebalancing = asyncio.ensure_future(self._rebalance())

    def _rebalance_candidates(self) -> list[tuple[str, int]]:
        live = set(self.image.live_brokers())
        return rebalance_candidates(self.image.topics.values(), live, self.rebalance.imbalance_percentage)

    async def _rebalance(self) -> None:
        try:
            async with self._lock:
                # Recomputed under the lock: the image may have moved since the tick looked.
                due = self._rebalance_candidates() if self.ready else []
                if not due:
                    return
                records, _ = self.logic.elect_leaders(ElectionType.PREFERRED, due)
                log.info(
                    "leader imbalance above %d%%: electing the preferred replicas of %s",
                    self.rebalance.imbalance_percentage,
                    ", ".join(f"{t}-{p}" for t, p in due),
                )
                await self._propose(records)
        except KafkaLiteError as e:
            log.warning("preferred replica elections not committed (the next check retries): %s", e)

    async def elect_leaders(
        self, election_type: ElectionType, partitions: list[tuple[str, int]] | None
    ) -> dict[tuple[str, int], KafkaLiteError | None]:
        """Kafka's ElectLeaders: each partition's outcome (None: elected, and committed)."""
        outcomes: dict[tuple[str, int], KafkaLiteError | None] = {}

        def compute(logic: ControllerLogic) -> list[MetadataRecord]:
            records, found = logic.elect_leaders(election_type, partitions)
            outcomes.update(found)
            return records

        await self.run(compute)
        elected = [f"{t}-{p}" for (t, p), e in outcomes.items() if e is None]
        if elected:
            log.info("%s leader election asked for: elected %s", election_type.name, ", ".join(elected))
        return outcomes

    # --- partition reassignments (KIP-455) ---------------------------------------------------

    async def alter_reassignments(
        self, requests: list[tuple[Any, Any, Any]], allow_rf_change: bool = True
    ) -> dict[tuple[str, int], KafkaLiteError | None]:
        """Kafka's AlterPartitionReassignments: each partition's outcome (None: started or cancelled, committed)."""
        outcomes: dict[tuple[str, int], KafkaLiteError | None] = {}

        def compute(logic: ControllerLogic) -> list[MetadataRecord]:
            records, found = logic.alter_reassignments(requests, allow_rf_change)
            outcomes.update(found)
            return records

        await self.run(compute)
        for (t, p), e in sorted(outcomes.items()):
            target = next((r[2] for r in requests if (r[0], r[1]) == (t, p)), None)
            if e is None:
                log.info("%s-%d: reassignment %s", t, p, "cancelled" if target is None else f"to {target}")
        return outcomes

    def list_reassignments(self, partitions: list[tuple[str, int]] | None) -> list[tuple[str, Any]]:
        self.check_active()
        return self.logic.list_reassignments(partitions)

    # --- requests served by the active controller ----------------------------------------

    async def await_published(self) -> None:
        """Return once every live broker has applied what this controller committed so far (bounded; see
        broker/metadata/propagation.py): a client's admin request is answered after this, so whichever broker
        it asks next knows of the topic, partitions, configs or ACLs it changed."""
        if self.propagation is not None and self.ready:
            await self.propagation.visible_everywhere()

    async def create_topic(
        self, name: Any, partitions: int, rf: int, configs: dict[str, str], assignments: Any = None
    ) -> None:
        await self.run(lambda logic: logic.create_topic(name, partitions, rf, configs, assignments))

    async def create_partitions(self, name: Any, total: Any, assignments: Any = None) -> None:
        await self.run(lambda logic: logic.create_partitions(name, total, assignments))

    async def delete_topic(self, name: Any) -> None:
        await self.run(lambda logic: logic.delete_topic(name))

    async def set_kafka_endpoint(
        self, broker_id: int, host: str | None, port: int, listeners: dict[str, tuple[str, int, str]] | None = None
    ) -> None:
        await self.run(lambda logic: logic.set_kafka_endpoint(broker_id, host, port, listeners))

    async def set_configs(self, name: str, configs: dict[str, str]) -> None:
        await self.run(lambda logic: logic.set_configs(name, configs))

    async def set_group_configs(self, group: str, configs: dict[str, str]) -> None:
        await self.run(lambda logic: logic.set_group_configs(group, configs))

    async def set_broker_configs(self, broker: str, configs: dict[str, str]) -> None:
        await self.run(lambda logic: logic.set_broker_configs(broker, configs))

    async def alter_scram(self, upserts: list[Any], deletions: list[Any]) -> None:
        await self.run(lambda logic: logic.alter_scram(upserts, deletions))

    async def create_acls(self, bindings: list[Any]) -> None:
        await self.run(lambda logic: logic.create_acls(bindings))

    async def delete_acls(self, filters: list[Any]) -> None:
        await self.run(lambda logic: logic.delete_acls(filters))

    async def alter_client_quota(self, entity: list[Any], values: dict[str, Any]) -> None:
        await self.run(lambda logic: logic.alter_client_quota(entity, values))

    async def _run_alter(
        self, topic: str, partition: int, compute: Callable[[ControllerLogic], list[MetadataRecord]]
    ) -> tuple[list[tuple[str, int, list[int]]], list[tuple[str, int, int, int]]]:
        """Take an AlterPartition in turn with the others waiting (_drain_alters); its reassignments completed
        and leadership moves once committed."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._alters.append(_PendingAlter((topic, partition), compute, fut))
        if self._alter_drain is None or self._alter_drain.done():
            self._alter_drain = asyncio.ensure_future(self._drain_alters())
        return await fut  # type: ignore[no-any-return]

    async def _drain_alters(self) -> None:
        """Commit the AlterPartitions waiting, all of them in one proposal (group commit). One at a time, each
        waited for a commit round of its own (~50 ms): a leader's quick shrink of its partitions (or a broker
        back after a restart, rejoining every ISR) queued behind another leader's for seconds. They are computed
        in arrival order on the same committed image, under the lock as before; a second proposal for a
        partition already in the batch waits for the next one, so each is judged against the state the first
        left. A refusal is the item's own; a failed commit fails the items it carried (no verdict: retried)."""
        in_flight: list[_PendingAlter] = []
        try:
            while self._alters:
                async with self._lock:
                    batch: list[_PendingAlter] = []
                    later: list[_PendingAlter] = []
                    keys: set[tuple[str, int]] = set()
                    for item in self._alters:
                        (later if item.key in keys or len(batch) >= ALTERS_PER_COMMIT else batch).append(item)
                        keys.add(item.key)
                    self._alters = later
                    in_flight = batch
                    try:
                        self.check_active()
                    except KafkaLiteError as e:
                        for item in batch:
                            _settle(item.done, error=e)
                        continue
                    records: list[MetadataRecord] = []
                    taken: list[tuple[_PendingAlter, Any]] = []
                    for item in batch:
                        try:
                            records += item.compute(self.logic)
                        except Exception as e:  # noqa: BLE001 - the item's own refusal, answered to it
                            _settle(item.done, error=e)
                            continue
                        outcome = (self.logic.reassignments_completed, self.logic.leader_moves)
                        self.logic.reassignments_completed, self.logic.leader_moves = [], []
                        taken.append((item, outcome))
                    self._report_unclean()
                    try:
                        if records:
                            await self._propose(records)
                    except Exception as e:  # noqa: BLE001 - no verdict for any of them
                        for item, _ in taken:
                            _settle(item.done, error=e)
                        continue
                    for item, outcome in taken:
                        _settle(item.done, result=outcome)
        finally:
            # Stopped (cancelled) or broken: nobody is left waiting. Settled ones are left as they are.
            pending, self._alters = in_flight + self._alters, []
            for item in pending:
                _settle(item.done, error=NotControllerError("the controller stopped taking AlterPartition"))

    async def alter_partition(
        self,
        topic: str,
        partition: int,
        leader: int,
        leader_epoch: int,
        partition_epoch: int,
        isr: list[int],
        incarnation: int | None = None,
        seq: int | None = None,
        silent: list[int] | None = None,
    ) -> None:
        """`incarnation` and `seq` identify the proposer's process and its request (None: an older broker
        that sends neither, not checked). `silent`: the dropped members the leader heard no fetch from
        (ControllerLogic.alter_partition). Both checks run under the lock, where the request is taken, so a
        fetch from a restarted proposer that arrived while this request queued still counts.
        tests/sim/replication_sim.py's controller applies the same two rules (alter_seen, incarnation)."""

        def compute(logic: ControllerLogic) -> list[MetadataRecord]:
            if incarnation is not None and seq is not None:
                key = (incarnation, seq)
                taken = self._alter_taken.get(leader)
                if taken is not None and key <= taken:
                    # Overtaken by a newer request of the same broker: it was sent on a connection since
                    # abandoned, and its sender already moved on (retried, or gave up) without waiting for
                    # this answer. Taking it now could apply a proposal the leader has since reset after a
                    # definite refusal. Answered like a lost request: no verdict.
                    raise KafkaLiteError(
                        f"AlterPartition {key} from broker {leader} overtaken by {taken}; ignored",
                        ErrorCode.REQUEST_TIMED_OUT,
                    )
                self._alter_taken[leader] = key
            check_broker_incarnation(leader, incarnation, self.quorum.broker_incarnation(leader))
            logic.leader_moves.clear()
            logic.reassignments_completed.clear()
            return logic.alter_partition(topic, partition, leader, leader_epoch, partition_epoch, isr, silent)

        done, moves = await self._run_alter(topic, partition, compute)
        for t, p, replicas in done:
            log.info("%s-%d: reassignment completed, replicas %s", t, p, replicas)
            # Committed with a new leader epoch (the replica set changed): the leader learns it from metadata.
            raise AlterPartitionError(
                f"{t}-{p}: reassignment completed; new leader epoch", ErrorCode.FENCED_LEADER_EPOCH
            )
        for t, p, old, new in moves:
            log.warning(
                "%s-%d: leader %d asked to shrink the ISR to %s, below min.insync.replicas, while the replicas it "
                "dropped are alive and sent it no fetch: it is cut off from them; leadership moved to broker %d",
                t,
                p,
                old,
                isr,
                new,
            )
            # Committed, but not as asked: the leader keeps its proposal pending until the metadata that makes
            # it a follower arrives (FENCED_LEADER_EPOCH -> AlterOutcome.AWAIT_METADATA).
            raise AlterPartitionError(
                f"{t}-{p}: leadership moved to broker {new} (the ISR would fall below min.insync.replicas)",
                ErrorCode.FENCED_LEADER_EPOCH,
            )
