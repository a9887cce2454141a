"""ReplicaManager: the partitions this broker hosts, the produce / fetch /
list-offsets operations on them, and applying committed leadership changes.
Results are per partition, with error codes, so one bad partition never fails
a whole request.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

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
    ReplicaRole,
    StartFetching,
    StopFetching,
)
from broker.quota.replication_quota import ReplicationQuota
from broker.replica.partition import (
    FetchResult,
    FetchSpec,
    NotEnoughReplicasAfterAppendError,
    Partition,
    typed_rows_by_topic,
)
from broker.replica.replication import FollowerSilence
from broker.utils.long_lived import freeze_long_lived, reclaim_frozen
from net import batch as batch_fmt
from net.errors import (
    ErrorCode,
    InvalidRequiredAcksError,
    KafkaLiteError,
    KafkaStorageError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
    error_code_of,
)
from net.protocol import OffsetSpec
from net.schema.produce import PartitionProduceResponse, ProduceResponse, TopicProduceResponse

if TYPE_CHECKING:
    from broker.log.config import LogConfig
    from broker.log.manager import LogManager
    from broker.metadata.image import MetadataImage
    from broker.metrics.broker_metrics import BrokerMetrics

log = logging.getLogger("kafkalite.replica")
# A metadata change touching more partitions than this is applied in slices of at most APPLY_SLICE_S of the
# event loop's time (apply_image): __consumer_offsets (50) and ordinary topics are applied at once.
APPLY_AT_ONCE = 256
# 5 ms rather than 20: an acks=all produce waits for a few loop turns on three brokers (the append, each
# follower's fetch round, the high watermark), and during a flood's apply each turn carries a slice; the same
# apply in 5 ms slices gave a probe p99 of 0.75-1.3 s against 1.2-1.7 s in 20 ms ones, same run (issue 25 §4).
APPLY_SLICE_S = 0.005
_NO_GUARD: Mapping[int, object] = {}  # never written: a partition's produce that verified nothing


def now_ms() -> int:
    return int(time.monotonic() * 1000)


@dataclass(slots=True)
class ProduceResult:
    error: int
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    message: str | None = None

    def typed(self, partition: int) -> PartitionProduceResponse:
        """Kafka's answer row: log_append_time null (-1 on the wire) unless the topic stamps LogAppendTime, when it
        is the broker's time, which clients report as the records'."""
        ms = self.log_append_time
        return PartitionProduceResponse(
            index=partition,
            error_code=self.error,
            base_offset=self.base_offset,
            log_append_time=None if ms < 0 else datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC),
            log_start_offset=self.log_start_offset,
            error_message=self.message,
        )


def produce_response(results: Mapping[tuple[str, int], ProduceResult]) -> ProduceResponse:
    """The typed answer to a produce: its partitions' rows grouped by topic, in the request's order."""
    by_topic: dict[str, list[PartitionProduceResponse]] = typed_rows_by_topic(results)
    return ProduceResponse(
        responses=tuple(TopicProduceResponse(name=t, partition_responses=tuple(rows)) for t, rows in by_topic.items())
    )


def _error_result(cls: type, e: Exception) -> Any:
    code, message = error_code_of(e)
    return cls(int(code), message=message)


class ReplicaManager:
    def __init__(
        self,
        broker_id: int,
        log_manager: "LogManager",
        topic_config: Callable[[str], "LogConfig"],
        replica_lag_time_max_ms: int,
        propose_isr: Callable[[Partition, list[int], int, list[int]], None],
        metrics: "BrokerMetrics | None" = None,
        producer_id_expiration_ms: int = 86_400_000,
        producer_id_expiration_check_interval_ms: int = 600_000,
        *,
        on_follow: Callable[[Partition], None] = lambda p: None,
        on_unfollow: Callable[[Partition], None] = lambda p: None,
        on_change: Callable[[Partition, str], None] = lambda p, change: None,
        replica_silence_time_max_ms: int = 0,
        replica_fetch_wait_max_ms: int = 500,
        quorum_commit: bool = False,
    ) -> None:
        self.broker_id = broker_id
        # replica.quorum.commit.enable: the partitions' LeaderStates commit with a quorum past silent followers,
        # and a new leader recovers before it serves (docs/ELECTION.md section 6).
        self.quorum_commit = quorum_commit
        self._recovering: set[Partition] = set()  # new leaders fetching what a more complete replica holds
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.producer_id_expiration_check_interval_ms = producer_id_expiration_check_interval_ms
        self.log_manager = log_manager
        self.topic_config = topic_config
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.propose_isr = propose_isr
        self.metrics = metrics
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._marker_listeners: list[Callable[[str, int, int, int, bool, int], None]] = []
        # Log start offsets moved by a leader's answer (followers of a DeleteRecords), waiting to be checkpointed.
        self._log_starts_dirty = False
        self._log_start_writer: asyncio.Future[None] | None = None
        # What committed metadata makes of the replicas here (broker/metadata/applier.py, which the replication
        # simulator drives too): the changes still to apply, in commit order, and the task applying them in
        # slices when there are many partitions (apply_image).
        self.metadata_applier = MetadataApplier(broker_id, self._role_of, self._hosted_partitions)
        self._applier: asyncio.Task[None] | None = None
        # Replicas removed since the last reclaim: their frozen objects may hold cycles (broker/utils/long_lived.py).
        self._removed_since_reclaim = 0
        # tick(): every partition every this many 100 ms ticks, at most a tenth of the lag time, at most 1 s.
        self._tick_stride = max(1, min(10, replica_lag_time_max_ms // 1000))
        self._tick_count = 0
        # Follower brokers overdue with a fetch (replica.silence.time.max.ms): a quorum's ISR shrinks at once.
        self.replica_silence_time_max_ms = replica_silence_time_max_ms
        self.replica_fetch_wait_max_ms = replica_fetch_wait_max_ms  # the longest a follower's fetch is held here
        self.follower_silence = FollowerSilence()
        self._silent_logged: frozenset[int] = frozenset()
        # A replica to fetch for (the replica fetchers), or to stop fetching for.
        self.on_follow = on_follow
        self.on_unfollow = on_unfollow
        # Every leader/follower/offline/removed change, for services that follow leadership (groups).
        self.on_change = on_change
        # The leader's replication throttle (broker/quota/replication_quota.py); None: none (the simulator, tests).
        self.leader_quota: ReplicationQuota | None = None

    # --- applying committed metadata ---------------------------------------------

    def publish(self, image: "MetadataImage", entries: list[tuple[int, int, dict[str, Any]]]) -> None:
        """Committed metadata records: apply them to `image`, then make the local replicas follow (apply_image),
        then stop waiting for brokers the controller fenced."""
        size, actions = self.metadata_applier.publish(image, entries)
        self._apply_queued(image, size)
        self.execute(image, actions)

    def apply_image(self, image: "MetadataImage", changed: "dict[str, set[int] | None] | set[str]") -> None:
        """Make local replicas match the committed metadata for what changed: per topic, the partitions whose
        records were committed, or None for the whole topic (created, removed, its configs changed).

        A small change (at most APPLY_AT_ONCE partitions, nothing queued) is applied at once, as the records
        are published, so a topic created by a request is served here when its answer goes out. A large one
        (thousands of partitions to create, each with its directory and files) is applied in slices of
        APPLY_SLICE_S on the event loop, which serves produce, fetch and the election in between: a flood of
        partitions must not stall the brokers (issue 25). The steps are broker/metadata/applier.py's."""
        if isinstance(changed, set):
            changed = dict.fromkeys(changed)
        self._apply_queued(image, self.metadata_applier.queue(image, changed))

    def _apply_queued(self, image: "MetadataImage", size: int) -> None:
        """Apply what is queued, at once or (`size` partition changes were just queued) in slices."""
        if self._applier is not None:
            return  # already applying: the queued topics follow
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None  # no loop (the simulators, tools): there is nothing to starve
        steps = self._apply_pending(image)
        if loop is None or size <= APPLY_AT_ONCE:
            for _ in steps:
                pass
            self._reclaim_removed()
            return
        self._applier = loop.create_task(self._apply_in_slices(steps))

    async def settled(self) -> None:
        """Return once no partition work is queued: every published change is carried out here."""
        while self._applier is not None:
            await asyncio.shield(self._applier)

    async def _apply_in_slices(self, steps: Iterator[None]) -> None:
        t0 = time.monotonic()
        n = 0
        try:
            while True:
                deadline = time.monotonic() + APPLY_SLICE_S
                for _ in steps:
                    n += 1
                    if time.monotonic() >= deadline:
                        break
                else:
                    return
                # The replicas this slice made live as long as their partitions: out of the full collections
                # with them, or each full collection walks the whole flood again (broker/utils/long_lived.py).
                freeze_long_lived()
                await asyncio.sleep(0)  # let requests, fetches and quorum messages in
        except Exception:
            log.exception("applying committed metadata failed")
        finally:
            self._applier = None
            freeze_long_lived()
            self._reclaim_removed()
            log.info("applied %d partition changes in slices over %.2fs", n, time.monotonic() - t0)

    def _apply_pending(self, image: "MetadataImage") -> Iterator[None]:
        """One step per partition created, changed or removed, over every queued topic in turn."""
        for actions in self.metadata_applier.steps(image):
            self.execute(image, actions)
            yield

    def _role_of(self, topic: str, partition: int) -> ReplicaRole | None:
        part = self.partitions.get((topic, partition))
        return part.role if part is not None else None

    def _hosted_partitions(self, topic: str) -> list[int]:
        return [p for t, p in self.partitions if t == topic]

    def execute(self, image: "MetadataImage", actions: list[Action]) -> None:
        """Carry out broker/metadata/applier.py's actions on the real replicas, logs and fetchers."""
        for a in actions:
            if isinstance(a, ApplyPartitionState):
                self._apply_partition(image, a)
            elif isinstance(a, CreateReplica):
                self._create_replica(a.topic, a.partition)
            elif isinstance(a, RemoveReplica):
                self._remove(a.topic, a.partition, delete=True)
            elif isinstance(a, StartFetching):
                if (part := self.partitions.get((a.topic, a.partition))) is not None:
                    self.on_follow(part)
            elif isinstance(a, StopFetching):
                if (part := self.partitions.get((a.topic, a.partition))) is not None:
                    self.on_unfollow(part)
            elif isinstance(a, FenceReplicas):
                self.fence_replicas(set(a.broker_ids))

    def _create_replica(self, topic: str, p: int) -> None:
        cfg = self.topic_config(topic)
        # In slices (a flood), the log's directory and files are created by a worker thread, not on the
        # event loop: 5,000 partitions' mkdir and open(2) took 11 s of it (broker/log/deferred_files.py).
        lg = self.log_manager.get_or_create_log(topic, p, cfg, defer_files=self._applier is not None)
        part = Partition(
            topic,
            p,
            lg,
            self.broker_id,
            cfg.min_insync_replicas,
            self.replica_lag_time_max_ms,
            self.propose_isr,
            self.producer_id_expiration_ms,
            self.producer_id_expiration_check_interval_ms,
            quorum_commit=self.quorum_commit,
            on_recovery=self._on_recovery,
            recovery_stall_ms=self.replica_silence_time_max_ms or 1000,
        )
        # What was committed before a restart stays readable at once, rather than after every ISR
        # member has fetched from this new leader (a follower relearns it from its leader anyway).
        part.high_watermark = min(self.log_manager.checkpointed_high_watermarks.pop((topic, p), 0), lg.log_end_offset)
        part.on_log_start_moved = self._log_start_moved
        self.partitions[(topic, p)] = part

    def _apply_partition(self, image: "MetadataImage", action: ApplyPartitionState) -> None:
        now = now_ms()
        topic, st = action.topic, action.state
        p = st.partition
        part = self.partitions[(topic, p)]
        if part.leader_epoch >= 0:  # not created by the step before, with the config as it is now
            cfg = self.topic_config(topic)
            part.log.update_config(cfg)
            part.set_min_insync_replicas(cfg.min_insync_replicas)
        # Tell the leader about fenced replicas before and after applying: an ISR commit must not
        # re-admit a dead broker whose last fetch offset still looks caught up.
        fenced = list(action.fenced)
        part.remove_replicas(fenced)
        change = part.apply_state(st, now, action.change, action.follow_from)
        part.remove_replicas(fenced)
        # Per partition at INFO for an ordinary change; a flood's thousands (in slices) only at DEBUG: each line
        # is a write on the event loop, and the slices' summary line counts them.
        level = logging.DEBUG if self._applier is not None else logging.INFO
        if change == LEADER:
            log.log(
                level,
                "became leader of %s-%d in epoch %d (ISR %s)%s",
                topic,
                p,
                st.leader_epoch,
                st.isr,
                "; recovering first" if part.recovering else "",
            )
            # Its followers owe it a fetch from now on, also those that never fetched from this process.
            self.follower_silence.expect((r for r in st.isr if r != self.broker_id), now)
            if self.metrics is not None:
                self.metrics.leader_changes.inc()
        elif change == FOLLOWER:
            log.log(level, "following broker %d for %s-%d in epoch %d", st.leader, topic, p, st.leader_epoch)
        # A recovering leader is announced to the services that load its partitions (groups, transactions) once
        # its log is complete (_on_recovery): loaded before, they would miss the records it recovers.
        if change in (FOLLOWER, OFFLINE) or (change == LEADER and not part.recovering):
            self.on_change(part, change)

    def _on_recovery(self, part: Partition, event: str) -> None:
        """Partition's recovery events (Partition._handle): fetch from the source, stop, or done."""
        if event == "fetch":
            self._recovering.add(part)
            log.info(
                "%s-%d: recovering as leader from broker %d, whose log is the most complete",
                part.topic,
                part.partition,
                part.fetch_source,
            )
            self.on_follow(part)
        elif event == "stalled":
            log.info(
                "%s-%d: recovery source %d moved nothing for %d ms; counting the reports again",
                part.topic,
                part.partition,
                part.fetch_source,
                part.recovery_stall_ms,
            )
        elif event == "stop":
            self._recovering.discard(part)
            self.on_unfollow(part)
        elif event == "done":
            self._recovering.discard(part)
            log.debug("%s-%d: recovered; leading epoch %d", part.topic, part.partition, part.leader_epoch)
            self.on_change(part, LEADER)

    def _reclaim_removed(self) -> None:
        """Removed replicas were frozen with the rest: what reference counting did not free of them is cycles
        that only a full collection over the thawed objects reclaims. Once APPLY_AT_ONCE replicas were removed
        (a large deletion at once, small ones in time): one full pause per so many, not per deleted topic, and
        at most so many replicas' cycles (~50 objects each) kept meanwhile."""
        if self._removed_since_reclaim >= APPLY_AT_ONCE:
            self._removed_since_reclaim = 0
            reclaim_frozen()

    def _remove(self, topic: str, partition: int, delete: bool) -> None:
        part = self.partitions.pop((topic, partition), None)
        if part is None:
            return
        self._removed_since_reclaim += 1
        self.on_unfollow(part)
        self.on_change(part, "removed")
        part.close()
        if delete:
            self.log_manager.delete_log(topic, partition)

    def get_partition(self, topic: str, partition: int) -> Partition:
        p = self.partitions.get((topic, partition))
        if p is None:
            raise UnknownTopicOrPartitionError(f"this broker does not host {topic}-{partition}")
        return p

    def tick(self) -> None:
        """Every 100 ms (the broker's tick): the ISR-expiry and producer-expiry checks of a share of the
        partitions, each partition's turn coming every `_tick_stride` ticks (Kafka runs its ISR-expiry task
        every replica.lag.time.max.ms / 2): with thousands of partitions a pass over all of them every tick
        took a fifth of a broker's time. The stride keeps a shrink within a tenth of the lag time late."""
        now = now_ms()
        stride = self._tick_stride
        self._tick_count = (self._tick_count + 1) % stride
        for p in list(self.partitions.values())[self._tick_count :: stride]:
            p.tick(now)
        for p in list(self._recovering):  # every tick, not a share: a stalled recovery stops its partition
            p.check_recovery(now)
        self._drop_silent_followers(now)

    def _drop_silent_followers(self, now: int) -> None:
        """replica.silence.time.max.ms: followers no fetch has arrived from leave the ISRs of the lagging partitions
        led here that keep a majority (LeaderState.on_followers_silent). Every tick while one stays away (a fault):
        a partition that was idle when it went quiet and is written to since must not wait the lag time either;
        partitions that shrank already, or whose follower is caught up, answer at once."""
        silent = self.follower_silence.silent(now, self.replica_silence_time_max_ms, self.replica_fetch_wait_max_ms)
        in_an_isr: set[int] = set()
        if silent:
            for p in self.partitions.values():
                if p.leader_state is not None and not silent.isdisjoint(p.isr):
                    in_an_isr.update(silent.intersection(p.isr))
                    p.on_followers_silent(silent)
        # One in no ISR led here (it follows us no more: leaderships moved, or it was fenced and dropped) is
        # forgotten until it fetches again or we lead a partition it follows: otherwise every tick would pass over
        # every partition for it, for as long as the broker runs.
        for r in silent - in_an_isr:
            self.follower_silence.forget(r)
        judged = frozenset(in_an_isr)
        for r in sorted(judged - self._silent_logged):
            log.info(
                "follower broker %d sent no fetch for over %d ms: it leaves the ISR of each lagging partition led "
                "here that keeps a majority",
                r,
                self.replica_silence_time_max_ms,
            )
        for r in sorted(self._silent_logged - silent):
            log.info("follower broker %d fetches again, or follows nothing led here", r)
        self._silent_logged = judged

    def fence_replicas(self, broker_ids: set[int]) -> None:
        """The controller fenced these brokers: stop waiting for them in every ISR we lead."""
        for p in self.partitions.values():
            p.remove_replicas(sorted(broker_ids))

    # --- produce -------------------------------------------------------------

    def append_records(
        self,
        acks: int,
        entries: dict[tuple[str, int], bytes],
        guards: Mapping[tuple[str, int], Mapping[int, object]] | None = None,
    ) -> tuple[dict[tuple[str, int], ProduceResult], dict[tuple[str, int], int]]:
        """Append to each partition; returns the results and, for acks=all, the offsets to wait for. `guards`
        (a client's produce, transaction verification on): per partition, the verification guards its
        transactions' first batches hold (broker/transaction/verification.py); None: nothing is verified."""
        if acks not in (-1, 0, 1):
            raise InvalidRequiredAcksError(f"acks must be -1 (all), 0 or 1, got {acks}")
        results: dict[tuple[str, int], ProduceResult] = {}
        pending: dict[tuple[str, int], int] = {}
        now = now_ms()
        for tp, records in entries.items():
            try:
                p = self.get_partition(*tp)
                verified = None if guards is None else guards.get(tp, _NO_GUARD)
                offsets = p.append_as_leader(records, acks, now, guards=verified)
                # One base offset answers for the partition's batches, which follow each other in the log; when a
                # retry's duplicates kept offsets of their own (not consecutive), -1: the offsets are not known.
                results[tp] = ProduceResult(
                    0,
                    offsets[0] if p.last_append_consecutive else -1,
                    p.last_log_append_time,
                    p.log.log_start_offset,
                )
                if acks == -1:
                    pending[tp] = p.log.log_end_offset - 1
                if self.metrics is not None:
                    self.metrics.produce_bytes.inc(len(records))
                    self.metrics.produce_messages.inc(p.appended_records)
                    self.metrics.topic_in(tp[0], len(records), p.appended_records)
                p.appended_records = 0
            except Exception as e:
                if isinstance(e, KafkaStorageError):
                    log.error("KAFKA_STORAGE_ERROR appending to %s-%d: %s", tp[0], tp[1], e)
                results[tp] = _error_result(ProduceResult, e)
        return results, pending

    async def wait_for_commit(
        self, results: dict[tuple[str, int], ProduceResult], pending: dict[tuple[str, int], int], timeout: float
    ) -> None:
        """acks=all: each partition's result waits until its ISR has the records, or fails."""

        async def one(tp: tuple[str, int], last: int) -> None:
            p = self.partitions.get(tp)
            try:
                if p is None:
                    raise UnknownTopicOrPartitionError(f"{tp[0]}-{tp[1]} was removed")
                await p.wait_for_commit(last, timeout)
                if p.leader_state is not None and len(p.leader_state.isr) < p.min_insync_replicas:
                    # Committed by a shrunken ISR: durable on fewer replicas than asked (Kafka's rule).
                    raise NotEnoughReplicasAfterAppendError(
                        f"ISR shrank to {p.leader_state.isr} below min.insync.replicas={p.min_insync_replicas}"
                    )
            except TimeoutError:
                results[tp] = ProduceResult(
                    int(ErrorCode.REQUEST_TIMED_OUT),
                    message=RequestTimedOutError(f"not replicated to the ISR within {int(timeout * 1000)} ms").args[0],
                )
            except KafkaLiteError as e:
                results[tp] = _error_result(ProduceResult, e)

        if len(pending) == 1:  # librdkafka's produce: one partition; awaited here, not in a task of a later turn
            [(tp, last)] = pending.items()
            await one(tp, last)
        else:
            await asyncio.gather(*(one(tp, last) for tp, last in pending.items()))

    # --- fetch ---------------------------------------------------------------

    def read(self, spec: FetchSpec, replica_id: int) -> FetchResult:
        tp = spec.tp
        try:
            p = self.get_partition(*tp)
            if replica_id >= 0 and p.serves_recovery_fetch(replica_id, spec):
                return p.read_for_recovering_leader(spec)  # our new leader recovers its log from ours
            p.check_leader()
            if replica_id >= 0:
                return p.read_for_follower(spec, replica_id, now_ms())
            p.check_leader(spec.current_leader_epoch)
            # A consumer sees the high watermark in every answer: while a new leader's lags the epoch start it
            # could be below what the previous leader showed (KIP-207), so it is not shown yet.
            p.check_high_watermark_current()
            lso = p.last_stable_offset  # answered at either isolation level, as Kafka does
            if not spec.read_committed:
                data = p.log.read(spec.offset, spec.max_bytes, max_offset=p.high_watermark)
                return FetchResult(0, p.high_watermark, p.log.log_start_offset, data, last_stable_offset=lso)
            # read_committed: nothing past the last stable offset, with the aborted transactions the records
            # returned overlap, so the consumer can drop theirs (Kafka's FetchIsolation.TXN_COMMITTED).
            data = p.log.read(spec.offset, spec.max_bytes, max_offset=lso)  # out of range: raised, as any fetch
            end = _end_of(data, spec.offset)
            # From the segments' .txnindex files (entries cached in memory), as Kafka's collectAbortedTransactions.
            aborted = [[a.producer_id, a.first_offset] for a in p.log.collect_aborted_txns(spec.offset, end)]
            return FetchResult(
                0, p.high_watermark, p.log.log_start_offset, data, last_stable_offset=lso, aborted=aborted
            )
        except Exception as e:
            result: FetchResult = _error_result(FetchResult, e)
            p2 = self.partitions.get(tp)
            if p2 is not None and result.error == ErrorCode.OFFSET_OUT_OF_RANGE:
                # The leader's range, so the consumer can say where it is; any other error answers -1 as Kafka
                # does: a follower's (or a lagging new leader's) high watermark is not the partition's.
                result.high_watermark = p2.high_watermark
                result.log_start_offset = p2.log.log_start_offset
            return result

    async def fetch_messages(
        self, specs: list[FetchSpec], max_wait_ms: int, min_bytes: int, max_bytes: int, replica_id: int = -1
    ) -> dict[tuple[str, int], FetchResult]:
        """Long poll: answer once `min_bytes` are available, an error occurs, or `max_wait_ms` passes."""
        if replica_id >= 0:
            self.follower_silence.on_fetch_received(replica_id, now_ms())
        return await self._long_poll(specs, max_wait_ms, min_bytes, max_bytes, replica_id)

    async def _long_poll(
        self, specs: list[FetchSpec], max_wait_ms: int, min_bytes: int, max_bytes: int, replica_id: int
    ) -> dict[tuple[str, int], FetchResult]:
        deadline = time.monotonic() + max_wait_ms / 1000
        results: dict[tuple[str, int], FetchResult] = {}
        while True:
            if results and replica_id >= 0:
                # Woken: re-read only the partitions that moved since. The rest are answered as read a moment
                # ago (their acknowledgement counted then): a follower's fetch names thousands of idle partitions
                # after a flood, and each wake by one of them cost a second pass over all of them (issue 25).
                moved = [s for s in specs if self._moved_since(s, results[s.tp])]
                results.update(self._read_all(moved, max_bytes, replica_id))
            else:
                results = self._read_all(specs, max_bytes, replica_id)
            total = sum(len(r.records) for r in results.values())
            urgent = any(r.error or r.diverging_epoch >= 0 for r in results.values())
            remaining = deadline - time.monotonic()
            if total >= min_bytes or urgent or remaining <= 0:
                if replica_id >= 0 and total:
                    self._record_throttled(results)
                    self.follower_silence.on_records_sent(replica_id, now_ms())  # its next fetch is due at once
                if self.metrics is not None and total:
                    self.metrics.fetch_bytes.labels(
                        self.metrics.broker_label, "replica" if replica_id >= 0 else "consumer"
                    ).inc(total)
                    if replica_id < 0:
                        for tp, r in results.items():
                            if r.records:
                                self.metrics.topic_out(tp[0], len(r.records))
                return results
            # One future for the whole fetch, registered with each partition: a follower's fetch names
            # thousands of partitions after a flood, and a future (plus asyncio.wait's callbacks) per partition
            # per round cost the loop more than the reads.
            parts = [p for s in specs if (p := self.partitions.get(s.tp))]
            if not parts:
                return results
            woken = asyncio.get_running_loop().create_future()
            for p in parts:
                p.add_data_waiter(woken)
            try:
                # Awaited directly, not through asyncio.wait's callbacks: a turn sooner from the append (or the
                # high watermark's move) to the answer, in every acks=all replication round.
                async with asyncio.timeout(remaining):
                    await woken
            except TimeoutError:
                pass  # answered with what there is (min_bytes not reached within max_wait_ms)
            finally:
                for p in parts:
                    p.remove_data_waiter(woken)
                woken.cancel()
            if replica_id >= 0:
                # A follower's fetch offset doubles as its acknowledgement: re-read so it is counted now.
                continue

    def _moved_since(self, spec: FetchSpec, read: FetchResult) -> bool:
        """Whether a follower's partition may answer differently than `read`, its result of this same fetch:
        an error, another leader epoch, or a log end, log start or high watermark that moved."""
        p = self.partitions.get(spec.tp)
        return (
            p is None
            or read.error != 0
            or read.diverging_epoch >= 0
            or bool(read.records)  # read again within this round's byte budget
            or p.leader_state is None
            or spec.current_leader_epoch < 0
            or p.leader_epoch != spec.current_leader_epoch
            or p.log.log_end_offset != read.log_end_offset
            or p.high_watermark != read.high_watermark
            or p.log.log_start_offset != read.log_start_offset
        )

    def _throttle(self, replica_id: int) -> "Callable[[tuple[str, int]], bool] | None":
        """For a follower's fetch while the leader's replication quota is exceeded: which partitions are answered
        without records (throttled ones whose follower is not in the ISR, Kafka's shouldLeaderThrottle)."""
        q = self.leader_quota
        if replica_id < 0 or q is None or not q.exceeded(time.monotonic()):
            return None

        def held_back(tp: tuple[str, int]) -> bool:
            p = self.partitions.get(tp)
            isr = p.leader_state.isr if p is not None and p.leader_state is not None else []
            return q.is_throttled(*tp) and replica_id not in isr

        return held_back

    def _record_throttled(self, results: dict[tuple[str, int], FetchResult]) -> None:
        """The bytes of throttled partitions a follower's fetch carries count against the leader's quota
        (Kafka's sizeOfThrottledPartitions), whether their follower is in sync or not."""
        q = self.leader_quota
        if q is not None and q.limited:
            throttled = sum(len(r.records) for tp, r in results.items() if r.records and q.is_throttled(*tp))
            q.record(throttled, time.monotonic())

    def _read_all(self, specs: list[FetchSpec], max_bytes: int, replica_id: int) -> dict[tuple[str, int], FetchResult]:
        results = {}
        budget = max_bytes
        held_back = self._throttle(replica_id)
        for spec in specs:
            # As in Kafka, the first partition may return one oversized batch so a reader never stalls.
            s = (
                spec
                if budget >= spec.max_bytes
                else FetchSpec(
                    spec.tp,
                    spec.offset,
                    max(1, budget),
                    spec.current_leader_epoch,
                    spec.last_fetched_epoch,
                    spec.log_start_offset,
                    spec.read_committed,
                )
            )
            r = self.read(s, replica_id)  # read even when held back: the follower's fetch offset still counts
            if (budget <= 0 or (held_back is not None and held_back(spec.tp))) and r.records:
                r.records = b""
            budget -= len(r.records)
            results[spec.tp] = r
        return results

    # --- list offsets --------------------------------------------------------

    # --- transaction markers -------------------------------------------------

    def add_marker_listener(self, fn: Callable[[str, int, int, int, bool, int], None]) -> None:
        """fn(topic, partition, producer id, epoch, commit, marker offset), called on the leader once a marker
        WriteTxnMarkers wrote is committed (the group coordinator completes transactional offsets so)."""
        self._marker_listeners.append(fn)

    def marker_committed(self, topic: str, partition: int, pid: int, epoch: int, commit: bool, offset: int) -> None:
        for fn in self._marker_listeners:
            fn(topic, partition, pid, epoch, commit, offset)

    def list_offset(
        self,
        tp: tuple[str, int],
        timestamp: int,
        current_leader_epoch: int = -1,
        read_committed: bool = False,
        follower: bool = False,
    ) -> tuple[int, int, int]:
        """(error, timestamp, offset) for Kafka's ListOffsets: -2 (or -4) earliest, -1 latest, -3 the largest
        timestamp, else by time (net/protocol.py OffsetSpec). With a
        `current_leader_epoch`, a leader of another epoch refuses (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH).
        A `follower`'s latest is the leader's log end offset, not the high watermark (Kafka's ListOffsets with a
        broker's replica id): where a follower ahead of it truncates to."""
        try:
            p = self.get_partition(*tp)
            p.check_leader(current_leader_epoch)
            if timestamp in (OffsetSpec.EARLIEST, OffsetSpec.EARLIEST_LOCAL):
                return 0, -1, p.log.log_start_offset
            if timestamp == OffsetSpec.LATEST:
                if follower:
                    return 0, -1, p.log.log_end_offset
                return 0, -1, p.latest_offset(read_committed=read_committed)
            found = p.log.offset_for_timestamp(timestamp)
            if found is None or found[0] >= p.high_watermark:
                # "No record at or after that time" may only be said of a current high watermark (Kafka's rule).
                p.check_high_watermark_current()
                return 0, -1, -1
            return 0, found[1], found[0]
        except KafkaLiteError as e:
            return int(e.code), -1, -1

    # --- delete records ------------------------------------------------------

    async def delete_records(self, tp: tuple[str, int], offset: int, timeout_s: float) -> tuple[int, int]:
        """(error, low watermark) for Kafka's DeleteRecords of one partition: on its leader, the log start moves to
        `offset` (-1: the high watermark), is checkpointed (a restart keeps it), and the answer waits until every
        in-sync follower starts there too (so a new leader does as well), REQUEST_TIMED_OUT after `timeout_s`."""
        try:
            p = self.get_partition(*tp)
            target = p.delete_records(offset)
            await self._checkpoint_log_starts()
            return 0, await p.wait_for_low_watermark(target, timeout_s)
        except TimeoutError:
            return int(ErrorCode.REQUEST_TIMED_OUT), -1
        except OSError as e:
            log.error("%s-%d: log start offset checkpoint failed: %s", tp[0], tp[1], e)
            return int(ErrorCode.KAFKA_STORAGE_ERROR), -1
        except KafkaLiteError as e:
            return int(e.code), -1

    def _log_start_moved(self, p: Partition) -> None:
        """A follower took its leader's new log start: checkpoint it soon (one write for many partitions)."""
        self._log_starts_dirty = True
        if self._log_start_writer is None or self._log_start_writer.done():
            self._log_start_writer = asyncio.ensure_future(self._write_log_starts())

    async def _write_log_starts(self) -> None:
        while self._log_starts_dirty:
            self._log_starts_dirty = False
            try:
                await self._checkpoint_log_starts()
            except OSError as e:  # the periodic checkpoint tries again
                log.error("log start offset checkpoint failed: %s", e)
                return

    async def _checkpoint_log_starts(self) -> None:
        """Write the data dirs' log-start-offset-checkpoint (and recovery points) now, off the event loop."""
        await asyncio.get_running_loop().run_in_executor(None, self.log_manager.checkpoint)

    def high_watermarks(self) -> dict[tuple[str, int], int]:
        return {tp: p.high_watermark for tp, p in self.partitions.items()}

    def last_stable_offsets(self) -> dict[tuple[str, int], int]:
        """Each partition's LSO (its high watermark, or its oldest open transaction's first offset): the log
        cleaner's bound, as Kafka's firstUncleanableDirtyOffset."""
        return {tp: p.last_stable_offset for tp, p in self.partitions.items()}

    def under_replicated(self) -> int:
        return sum(
            1
            for p in self.partitions.values()
            if p.leader_state is not None and len(p.leader_state.isr) < len(p.replicas)
        )

    def close(self) -> None:
        """At shutdown: snapshot every partition's producer state (so the next start replays nothing)."""
        if self._applier is not None:
            self._applier.cancel()  # the rest is applied from the metadata log at the next start
        for p in self.partitions.values():
            try:
                p.take_producer_snapshot()
            except OSError as e:  # a full or failed disk: the next start replays from an older snapshot
                log.warning("%s: producer-state snapshot at shutdown failed: %s", p, e)
            p.close()


def _end_of(data: bytes, start: int) -> int:
    """The offset after the last whole batch of `data` (`start` for none)."""
    end = start
    for _, h in batch_fmt.iter_batches(data):
        end = h.next_offset
    return end
