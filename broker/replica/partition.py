"""Partition: one replica of one topic-partition on this broker.

It owns the Log, knows whether this broker leads or follows the partition (as
the committed metadata says) and drives the sans-IO replication state
(broker/replica/replication.py): leader epoch fencing, ISR and the high watermark.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from broker.metadata.applier import FOLLOWER, ISR, LEADER, OFFLINE, ReplicaRole, initial_fetch_state, role_change
from broker.replica.producer_state import ProducerStateManager
from broker.replica.replication import (
    Diverging,
    Fenced,
    FollowerState,
    HighWatermarkAdvanced,
    LeaderState,
    Ok,
    OutOfRange,
    ProposeIsr,
    Recovered,
    RecoverFrom,
    UnknownEpoch,
    leader_end_offset_for_epoch,
    validate_fetch,
)
from net import batch as batch_fmt
from net.errors import (
    CorruptMessageError,
    ErrorCode,
    FencedLeaderEpochError,
    InvalidRecordError,
    KafkaLiteError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    OffsetOutOfRangeError,
    UnknownLeaderEpochError,
)
from net.schema.fetch import (
    AbortedTransaction,
    EpochEndOffset,
    FetchableTopicResponse,
    FetchResponse,
    LeaderIdAndEpoch,
    PartitionData,
    SnapshotId,
)

if TYPE_CHECKING:
    from broker.log.log import Log
    from broker.metadata.image import PartitionState


class NotEnoughReplicasAfterAppendError(KafkaLiteError):
    code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


@dataclass(slots=True)
class FetchSpec:
    """One partition of a fetch request."""

    tp: tuple[str, int]
    offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1  # a follower's own log start (Kafka's FetchPartition.log_start_offset); -1: unknown
    read_committed: bool = False  # a consumer's isolation_level 1: up to the last stable offset


@dataclass(slots=True)
class FetchResult:
    error: int
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes = b""
    message: str | None = None
    diverging_epoch: int = -1
    diverging_end_offset: int = -1
    log_end_offset: int = -1
    last_stable_offset: int = -1  # -1: the high watermark
    aborted: list[list[int]] | None = None  # read_committed: [producer id, first offset] of aborted transactions

    def typed(self, partition: int) -> PartitionData:
        """Kafka's answer row (FetchResponse.PartitionData): the records stay the bytes the log read, nothing per
        record. `message` and `log_end_offset` are this broker's own (the error code's name says the first; a
        follower asks ListOffsets for the second, replica_fetcher.py); the absent tagged structs are shared."""
        diverging = (
            _NO_DIVERGENCE
            if self.diverging_epoch < 0
            else EpochEndOffset(epoch=self.diverging_epoch, end_offset=self.diverging_end_offset)
        )
        aborted = self.aborted
        # Slot by slot (the generated __init__ only assigns): half the cost of its keywords, once per partition of
        # every fetch answer.
        row: PartitionData = _new(PartitionData)
        row.partition_index = partition
        row.error_code = self.error
        row.high_watermark = self.high_watermark
        row.last_stable_offset = self.last_stable_offset if self.last_stable_offset >= 0 else self.high_watermark
        row.log_start_offset = self.log_start_offset
        row.diverging_epoch = diverging
        row.current_leader = _NO_LEADER
        row.snapshot_id = _NO_SNAPSHOT
        # Kafka's null for read_uncommitted, a list (maybe empty) for read_committed
        row.aborted_transactions = (
            None if aborted is None else tuple(AbortedTransaction(producer_id=a[0], first_offset=a[1]) for a in aborted)
        )
        row.preferred_read_replica = -1
        row.records = self.records
        return row


# The tagged structs of a PartitionData that says nothing in them (their defaults), shared by every answer row
# rather than built per partition: nothing writes to them.
_NO_DIVERGENCE = EpochEndOffset()
_NO_LEADER = LeaderIdAndEpoch()
_NO_SNAPSHOT = SnapshotId()
_new = object.__new__


def typed_rows_by_topic(results: Mapping[tuple[str, int], Any]) -> dict[str, list[Any]]:
    """Each result's typed answer row (its `typed(partition)`), grouped by topic in the results' order: a produce's
    and a fetch's answer are built so, nothing per record."""
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), r in results.items():
        rows = by_topic.get(topic)
        if rows is None:
            rows = by_topic[topic] = []
        rows.append(r.typed(partition))
    return by_topic


def fetch_response(results: Mapping[tuple[str, int], FetchResult], session_id: int = 0) -> FetchResponse:
    """The typed answer to a fetch: its partitions' rows grouped by topic, in the order they were read."""
    by_topic: dict[str, list[PartitionData]] = typed_rows_by_topic(results)
    return FetchResponse(
        session_id=session_id,
        responses=tuple(FetchableTopicResponse(topic=t, partitions=tuple(rows)) for t, rows in by_topic.items()),
    )


class Partition:
    def __init__(
        self,
        topic: str,
        partition: int,
        log: "Log",
        broker_id: int,
        min_insync_replicas: int,
        replica_lag_time_max_ms: int,
        propose_isr: Callable[["Partition", list[int], int, list[int]], None],
        producer_id_expiration_ms: int = 86_400_000,
        producer_id_expiration_check_interval_ms: int = 600_000,
        quorum_commit: bool = False,
        on_recovery: Callable[["Partition", str], None] | None = None,
        recovery_stall_ms: int = 1000,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.log = log
        self.broker_id = broker_id
        self.min_insync_replicas = min_insync_replicas
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self._propose_isr = propose_isr
        # replica.quorum.commit.enable (LeaderState's quorum): a new leader recovers before it serves, fetching
        # from the replica with the most complete log if that is not itself. `on_recovery(partition, event)` tells
        # the driver: "fetch" (fetch from fetch_source now), "stop" (stop that fetch), "done" (recovered: it
        # leads now, for the services that follow leaderships).
        self.quorum_commit = quorum_commit
        self._on_recovery = on_recovery
        self._recovery_end = (-1, -1)  # (leader epoch, offset) where the recovery source's log ends
        # A recovery fetch that moves nothing for this long gives up its source (check_recovery): paused, cut off
        # or dead, it may be the next fault's victim, and any other enough reporters will do.
        self.recovery_stall_ms = recovery_stall_ms
        self._recovery_seen: tuple[int, int | None] = (-1, None)  # (log end, since when) during a recovery fetch
        self.leader = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas: list[int] = []
        self.isr: list[int] = []
        self.high_watermark = 0
        self.leader_state: LeaderState | None = None
        self.follower_state: FollowerState | None = None
        # Long-polling fetches waiting for data here: one future per fetch, shared by all its partitions.
        self._waiters: set[asyncio.Future[Any]] = set()
        self._hw_waiters: list[tuple[int, asyncio.Future[Any]]] = []
        # On the leader: each follower's log start offset as its last fetch said (DeleteRecords' low watermark).
        self.follower_log_starts: dict[int, int] = {}
        # Called when the log start offset moved (DeleteRecords, or the leader's log start on a follower), so the
        # owner checkpoints it (log-start-offset-checkpoint) and a restart keeps it.
        self.on_log_start_moved: Callable[["Partition"], None] | None = None
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self._expiration_check_ms = producer_id_expiration_check_interval_ms
        self._next_expiration_check: int | None = None
        self.producer_state = ProducerStateManager(log.dir)
        self._load_producer_state()
        log.on_roll = self._on_roll
        self.appended_records = 0
        # The broker time of the last append_as_leader on a LogAppendTime topic (-1 otherwise), for its answer.
        self.last_log_append_time = -1
        # Whether the last append's batches hold consecutive offsets (each after the one before), as a produce
        # answer's one base_offset says: not when a retry's duplicates kept their first offsets (§8 of FORMAT.md).
        self.last_append_consecutive = True

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.partition}, leader={self.leader}, epoch={self.leader_epoch})"

    def _load_producer_state(self) -> None:
        """Kafka's recovery of producer state: the newest snapshot within the log, then the batch headers
        after it. Its cost is bounded by one segment (snapshots are taken at every roll), not the log."""
        lg = self.log
        if lg.log_end_offset <= lg.log_start_offset:  # empty (or fully truncated): no producer is known here
            self.producer_state = ProducerStateManager(lg.dir)
            if lg.on_disk:  # a log whose files are still to be created has no snapshot to drop
                self.producer_state.delete_snapshots(above=-1)
            return
        # A recovered segment's .txnindex was emptied by the loader: replay from a snapshot at or below it, so
        # that every abort marker from there on is met again and written back (Kafka's recoverSegment).
        rebuild_from = lg.take_txn_rebuild_from()
        upto = lg.log_end_offset if rebuild_from is None else max(lg.log_start_offset, rebuild_from)
        state, offset = ProducerStateManager.load(lg.dir, lg.log_start_offset, lg.log_end_offset, upto)
        for txn in state.legacy_aborted:  # a version-2 snapshot: its aborted list goes to the .txnindex files
            lg.append_aborted_txn(txn)
        state.legacy_aborted = []
        recovered = lg.take_recovered_batches(offset)
        if recovered is not None:
            # The batches the loader's recovery just read (an unclean start): replayed without reading the
            # segments again, only the control batches' markers are read (0.05-0.1 s of 100 partitions' start).
            markers: dict[int, batch_fmt.ControlRecord] = {}
            for h in recovered:
                if h.is_control:
                    markers |= _markers(lg.read(h.base_offset, h.size), [(0, h)])
            for txn in state.replay(recovered, markers):
                lg.append_aborted_txn(txn)  # a no-op for an abort its .txnindex holds already
            offset = lg.log_end_offset
        while offset < lg.log_end_offset:
            data = lg.read(offset, 8 * 1024 * 1024)
            if not data:
                break
            batches = list(batch_fmt.iter_batches(data))
            for txn in state.replay([h for _, h in batches], _markers(data, batches)):
                lg.append_aborted_txn(txn)  # a no-op for an abort its .txnindex holds already
            offset = batches[-1][1].next_offset
        self.producer_state = state
        # A long replay (an old data dir, a lost snapshot) happens once, not per start: a snapshot at the end saves
        # the next start from it. Not after a recovery's replay: the next unclean start replays from the recovered
        # segment's base again (its .txnindex is rebuilt), whatever newer snapshot there is, and a clean shutdown
        # or a roll writes its own. Writing one there (a file created and fsynced per partition) held up every
        # partition's leadership after an unclean restart, 0.1-0.2 s for 100 partitions.
        if state.replayed_batches > 64 and rebuild_from is None:
            state.take_snapshot(lg.log_end_offset)

    def _on_roll(self, base_offset: int) -> None:
        """Called by the Log after it rolled: the state now covers exactly the batches below `base_offset`."""
        self.producer_state.take_snapshot(base_offset)
        self.producer_state.delete_snapshots(below=self.log.log_start_offset)

    def take_producer_snapshot(self) -> None:
        """At clean shutdown: the next start replays nothing. An empty log has nothing to replay and gets no
        snapshot: a broker hosting thousands of empty partitions (a flood) shut down writing and fsyncing one file
        each, 27 s of a 5,000-partition shutdown."""
        if self.log.log_end_offset == 0:
            return
        self.producer_state.take_snapshot(self.log.log_end_offset)

    # --- leadership, as the committed metadata says ------------------------------

    @property
    def role(self) -> ReplicaRole:
        """What broker/metadata/applier.py role_change decides on."""
        return ReplicaRole(
            self.leader_epoch,
            self.leader_state is not None,
            self.follower_state is not None,
            self.log.log_end_offset,
            max(self.log.latest_epoch, -1),
        )

    def apply_state(
        self,
        st: "PartitionState",
        now_ms: int,
        change: str | None = None,
        follow_from: tuple[int, int] | None = None,
    ) -> str:
        """Follow a committed partition record. `change` is what broker/metadata/applier.py role_change decided
        for it, and `follow_from` a new follower's initial fetch state (initial_fetch_state): both decided
        here when not given. Returns the change: leader, follower, isr, offline or none."""
        if change is None:
            change = role_change(self.broker_id, self.role, st)
        self.replicas = list(st.replicas)
        self.leader, self.partition_epoch = st.leader, st.partition_epoch
        self.isr = list(st.isr)
        if change == LEADER:
            self.leader_epoch = st.leader_epoch
            self.follower_state = None
            self.follower_log_starts = {}
            self.leader_state = LeaderState(
                self.broker_id,
                list(st.replicas),
                list(st.isr),
                st.leader_epoch,
                st.partition_epoch,
                self.log.log_end_offset,
                min(self.high_watermark, self.log.log_end_offset),
                self.replica_lag_time_max_ms,
                now_ms,
                min_insync_replicas=self.min_insync_replicas,
                quorum=self.quorum_commit,
                latest_epoch=max(self.log.latest_epoch, -1),
            )
            self._handle(self.leader_state.on_leader_append(self.log.log_end_offset, now_ms))
            self._fail_hw_waiters(None)
            self.wake()
            return change
        if change == ISR and self.leader_state is not None:
            ls = self.leader_state
            self._handle(ls.on_isr_committed(list(st.isr), st.partition_epoch))
            self._check_hw_waiters()
            if len(ls.isr) < ls.effective_min_isr:
                # The HW is frozen until the ISR is back at the minimum (KIP-966): tell acks=all producers now
                # rather than at their timeout. Their records stay in the log and may commit later.
                self._fail_hw_waiters(
                    NotEnoughReplicasAfterAppendError(
                        f"ISR shrank to {ls.isr} below min.insync.replicas={self.min_insync_replicas}"
                    )
                )
            return change
        self.leader_state = None
        self.leader_epoch = st.leader_epoch
        self._fail_hw_waiters(NotLeaderOrFollowerError(f"{self.topic}-{self.partition} moved to {st.leader}"))
        self.wake()
        if change == OFFLINE:
            self.follower_state = None
        elif change == FOLLOWER:
            offset, last_epoch = follow_from or initial_fetch_state(self.role)
            self.follower_state = FollowerState(self.broker_id, st.leader, st.leader_epoch, offset, last_epoch)
        return change

    @property
    def recovering(self) -> bool:
        """A new leader recovering its log (LeaderState.on_recovery_report): no writes yet."""
        return self.leader_state is not None and self.leader_state.recovering

    @property
    def fetch_source(self) -> int:
        """The broker this replica fetches from: its leader, or while it recovers as a new leader, the replica it
        recovers from."""
        fs = self.follower_state
        return fs.leader_id if fs is not None else self.leader

    def check_leader(self, epoch: int | None = None) -> None:
        """This broker leads the partition, in `epoch` if the client named one (KIP-320: a client with older
        metadata is fenced; one with newer metadata than ours is told our metadata lags, and retries)."""
        if self.leader_state is None:
            raise NotLeaderOrFollowerError(
                f"broker {self.broker_id} is not the leader of {self.topic}-{self.partition} (leader {self.leader})"
            )
        if epoch is not None and epoch >= 0 and epoch < self.leader_epoch:
            raise FencedLeaderEpochError(f"epoch {epoch} is older than the current {self.leader_epoch}")
        if epoch is not None and epoch > self.leader_epoch:
            raise UnknownLeaderEpochError(
                f"epoch {epoch} is newer than {self.leader_epoch}, the latest broker {self.broker_id} knows of "
                f"{self.topic}-{self.partition}"
            )

    def check_high_watermark_current(self) -> None:
        """KIP-207: a new leader's high watermark starts where it was as a follower (or, after a restart, at the
        checkpoint), which can be below what the previous leader (or incarnation) already exposed. Until it has
        reached the start offset of this leader epoch (every record before it is then committed, and so is
        everything any earlier leader exposed), the latest offset is not answered: OFFSET_NOT_AVAILABLE, which
        clients retry. So the latest offset a client sees never goes back across leader changes."""
        ls = self.leader_state
        if ls is not None and ls.recovering:
            # Its log may lack records an earlier leader exposed: no latest offset until it has them.
            raise OffsetNotAvailableError(
                f"{self.topic}-{self.partition}: broker {self.broker_id}, its new leader, is still recovering"
            )
        if ls is not None and self.high_watermark < ls.leader_epoch_start_offset:
            raise OffsetNotAvailableError(
                f"{self.topic}-{self.partition}: the high watermark {self.high_watermark} of leader epoch "
                f"{self.leader_epoch} has not reached the epoch's start offset {ls.leader_epoch_start_offset} yet"
            )

    def latest_offset(self, current_leader_epoch: int = -1, read_committed: bool = False) -> int:
        """ListOffsets latest: the high watermark, once it is current (check_high_watermark_current); under
        read_committed, the last stable offset."""
        self.check_leader(current_leader_epoch)
        self.check_high_watermark_current()
        return self.last_stable_offset if read_committed else self.high_watermark

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: below it every transaction is decided (the high watermark, or the first offset of the
        oldest transaction still open, whichever is lower). read_committed consumers read up to it."""
        first = self.producer_state.first_unstable_offset()
        return self.high_watermark if first is None else min(self.high_watermark, first)

    # --- leader side ---------------------------------------------------------------

    def append_as_leader(
        self,
        records: bytes,
        acks: int,
        now_ms: int,
        markers: bool = False,
        guards: Mapping[int, object] | None = None,
    ) -> list[int]:
        """Append a blob of one or more batches; returns each batch's base offset. Control batches (transaction
        markers) only with `markers`: WriteTxnMarkers writes them, a client never may. `guards`: a client's
        produce with transaction verification on (ProducerStateManager.check_append, KIP-890)."""
        try:
            self.check_leader()
            assert self.leader_state is not None
            if self.leader_state.recovering:
                # Retriable: clients look the leader up again and retry, as after any leader change.
                raise NotLeaderOrFollowerError(
                    f"broker {self.broker_id}, the new leader of {self.topic}-{self.partition}, is still recovering "
                    "the records earlier leaders committed"
                )
            if acks == -1 and len(self.leader_state.isr) < self.min_insync_replicas:
                raise NotEnoughReplicasError(
                    f"ISR {self.leader_state.isr} is smaller than min.insync.replicas={self.min_insync_replicas}"
                )
        except KafkaLiteError:
            self._note_refused(records)
            raise
        try:
            headers = list(batch_fmt.iter_batches(records))
        except batch_fmt.InvalidBatch as e:
            raise CorruptMessageError(str(e)) from None
        if not headers or headers[-1][0] + headers[-1][1].size != len(records):
            raise CorruptMessageError("produce records are not a whole number of batches")
        if not markers and any(h.is_control for _, h in headers):
            raise InvalidRecordError("transaction markers cannot be written by clients")
        offsets: list[int | None] = []
        keep: list[tuple[int, batch_fmt.BatchHeader]] = []
        # Sequence and epoch rules first: a refused batch refuses the whole append, nothing is written.
        try:
            retained = self.producer_state.check_append([h for _, h in headers], guards)
        except KafkaLiteError:
            self.producer_state.note_refused(h for _, h in headers)
            raise
        for (pos, h), dup in zip(headers, retained):
            if dup is not None:
                try:  # a retry is only a duplicate if it is intact; otherwise the log rejects it below
                    batch_fmt.validate(records, pos)
                except batch_fmt.InvalidBatch as e:
                    raise CorruptMessageError(str(e)) from None
            offsets.append(dup)
            if dup is None:
                keep.append((pos, h))
        self.last_log_append_time = -1
        if keep:
            blob = records if len(keep) == len(headers) else b"".join(records[p : p + h.size] for p, h in keep)
            info = self.log.append_as_leader(blob, self.leader_epoch)
            self.last_log_append_time = info.log_append_time
            base = info.first_offset
            it = iter(keep)
            for i, off in enumerate(offsets):
                if off is None:
                    _, h = next(it)
                    offsets[i] = base
                    txn = self.producer_state.update(h, base, _marker(records, keep, h))
                    if txn is not None:  # an abort: into its segment's .txnindex (Kafka's LogSegment.updateTxnIndex)
                        self.log.append_aborted_txn(txn)
                    base += h.last_offset_delta + 1
            self.appended_records += sum(h.record_count for _, h in keep)
            self._handle(self.leader_state.on_leader_append(self.log.log_end_offset, now_ms))
            self.wake()  # followers long-polling for new data
        self.last_append_consecutive = (
            len(keep) == len(headers)
            or all(
                offsets[i + 1] == off + h.last_offset_delta + 1  # type: ignore[operator]
                for i, (off, (_, h)) in enumerate(zip(offsets[:-1], headers))
            )
        )
        return offsets  # type: ignore[return-value]

    def _note_refused(self, records: bytes) -> None:
        """An append refused before its batches were read: their producers' sequences are remembered all the
        same (ProducerStateManager.note_refused); a blob that does not parse has nothing to remember."""
        try:
            headers = [h for _, h in batch_fmt.iter_batches(records)]
        except batch_fmt.InvalidBatch:
            return
        self.producer_state.note_refused(headers)

    def read_for_follower(self, spec: FetchSpec, replica_id: int, now_ms: int) -> FetchResult:
        """A follower's fetch (KIP-101/320): its epoch fenced or unknown, its log diverging from ours (answered
        with where ours ends for its last epoch, so it truncates), or records from its offset; the fetch
        also moves its position in the ISR bookkeeping, and so maybe the high watermark."""
        lg = self.log
        ls = self.leader_state
        if ls is not None and ls.recovering and spec.current_leader_epoch == self.leader_epoch:
            # A follower of this epoch says where its log ends. Until recovery is over it gets nothing: neither
            # records nor a divergence point, which would make it truncate records this leader may still need,
            # nor a high watermark (-1), which it would apply to a log not checked against ours yet.
            self._handle(ls.on_recovery_report(replica_id, spec.last_fetched_epoch, spec.offset))
            if self.recovering:
                return FetchResult(0, -1, lg.log_start_offset, log_end_offset=lg.log_end_offset)
        return self._fetch_answer(spec, lambda: self.on_follower_fetch(replica_id, spec.offset, now_ms), replica_id)

    def serves_recovery_fetch(self, replica_id: int, spec: FetchSpec) -> bool:
        """Whether `replica_id` is this follower's leader, in the current epoch, fetching to recover its log
        from this replica's (RecoverFrom)."""
        return (
            self.leader_state is None
            and self.follower_state is not None
            and replica_id == self.leader
            and spec.current_leader_epoch == self.leader_epoch >= 0
        )

    def read_for_recovering_leader(self, spec: FetchSpec) -> FetchResult:
        """The new leader's recovery fetch from this follower: checked against this log's epochs as a leader
        checks a follower's (this log is the more complete one), answered with records from this log."""
        return self._fetch_answer(spec, lambda: None, -1)

    def _fetch_answer(self, spec: FetchSpec, served: Callable[[], None], replica_id: int) -> FetchResult:
        """A replica fetch checked against this log's epochs (validate_fetch), then answered: `served()` is called
        for one that is served (the leader counts its follower's position); `replica_id` -1 keeps no log start."""
        lg = self.log
        hw, start, leo = self.high_watermark, lg.log_start_offset, lg.log_end_offset
        decision = validate_fetch(
            spec.current_leader_epoch,
            self.leader_epoch,
            spec.offset,
            spec.last_fetched_epoch,
            lg.end_offset_for_epoch,
            lg.log_start_offset,
            leo,
        )
        if isinstance(decision, Ok):
            served()
            if (
                replica_id >= 0
                and spec.log_start_offset >= 0
                and self.follower_log_starts.get(replica_id) != spec.log_start_offset
            ):
                self.follower_log_starts[replica_id] = spec.log_start_offset
                self.wake()  # a DeleteRecords waiting for the low watermark looks again
            # At the log end (an idle partition: most of a fetch after a flood) there is nothing to read.
            data = lg.read(spec.offset, spec.max_bytes) if spec.offset != leo else b""
            return FetchResult(0, self.high_watermark, lg.log_start_offset, data, log_end_offset=lg.log_end_offset)
        if isinstance(decision, Diverging):
            return FetchResult(
                0,
                hw,
                start,
                log_end_offset=leo,
                diverging_epoch=decision.epoch,
                diverging_end_offset=decision.end_offset,
            )
        refusals = {
            Fenced: (ErrorCode.FENCED_LEADER_EPOCH, f"leader epoch {spec.current_leader_epoch} < {self.leader_epoch}"),
            UnknownEpoch: (
                ErrorCode.UNKNOWN_LEADER_EPOCH,
                f"leader epoch {spec.current_leader_epoch} > {self.leader_epoch}",
            ),
            OutOfRange: (ErrorCode.OFFSET_OUT_OF_RANGE, f"offset {spec.offset} not in [{start}, {leo}]"),
        }
        code, message = refusals[type(decision)]
        return FetchResult(int(code), hw, start, message=message, log_end_offset=leo)

    def remove_replicas(self, broker_ids: list[int]) -> None:
        """Fenced brokers leave the leader's ISR bookkeeping at once: an ISR commit must not re-admit a dead
        broker whose last fetch offset still looks caught up. A recovery from one of them starts over."""
        ls = self.leader_state
        if ls is not None and broker_ids:
            if ls.recovery_source in broker_ids:
                self._stop_recovery_fetch()
                self._handle(ls.on_recovery_source_lost(max(self.log.latest_epoch, -1), self.log.log_end_offset))
            self._handle(ls.remove_replicas(broker_ids))

    def _stop_recovery_fetch(self) -> None:
        if self.leader_state is not None and self.follower_state is not None:
            self.follower_state = None
            if self._on_recovery is not None:
                self._on_recovery(self, "stop")

    def isr_change_rejected(self, isr: list[int], partition_epoch: int) -> None:
        """The controller refused our ISR proposal against the current state: it was never applied."""
        if self.leader_state is not None:
            self._handle(self.leader_state.on_isr_rejected(isr, partition_epoch))

    def set_min_insync_replicas(self, min_insync: int) -> None:
        self.min_insync_replicas = min_insync
        if self.leader_state is not None:
            self._handle(self.leader_state.set_min_insync_replicas(min_insync))

    def on_followers_silent(self, silent: frozenset[int]) -> None:
        """Follower brokers that owe us a fetch past replica.silence.time.max.ms (LeaderState.on_followers_silent)."""
        if self.leader_state is not None:
            self._handle(self.leader_state.on_followers_silent(silent))

    def on_follower_fetch(self, replica_id: int, fetch_offset: int, now_ms: int) -> None:
        if self.leader_state is not None:
            self._handle(self.leader_state.on_follower_fetch(replica_id, fetch_offset, self.log.log_end_offset, now_ms))

    def tick(self, now_ms: int, wall_ms: int | None = None) -> None:
        """`now_ms`: the broker's monotonic tick clock. Producer expiry compares wall-clock time (`wall_ms`,
        default now) with the batches' timestamps, as Kafka's removeExpiredProducers does."""
        if self.leader_state is not None and not self.leader_state.recovering:
            self._handle(self.leader_state.tick(now_ms, self.log.log_end_offset))
        self.check_recovery(now_ms)
        if self._next_expiration_check is None:
            self._next_expiration_check = now_ms + self._expiration_check_ms
        elif now_ms >= self._next_expiration_check:
            self._next_expiration_check = now_ms + self._expiration_check_ms
            wall = int(time.time() * 1000) if wall_ms is None else wall_ms
            self.producer_state.remove_expired(wall, self.producer_id_expiration_ms)

    def check_recovery(self, now_ms: int) -> None:
        """A recovering leader whose recovery fetch has moved its log end for recovery_stall_ms gives up that source
        and counts the reports again, its own as its log is now (LeaderState.on_recovery_source_lost)."""
        ls = self.leader_state
        if ls is None or ls.recovery_source is None or self.follower_state is None:
            return
        leo, since = self._recovery_seen
        if since is None or leo != self.log.log_end_offset:
            self._recovery_seen = (self.log.log_end_offset, now_ms)
        elif now_ms - since >= self.recovery_stall_ms:
            self._recovery_seen = (-1, None)
            if self._on_recovery is not None:
                self._on_recovery(self, "stalled")
            self._stop_recovery_fetch()
            self._handle(ls.on_recovery_source_lost(max(self.log.latest_epoch, -1), self.log.log_end_offset))

    def _handle(self, actions: list[Any]) -> None:
        for a in actions:
            if isinstance(a, HighWatermarkAdvanced):
                self._set_high_watermark(a.high_watermark)
            elif isinstance(a, ProposeIsr):
                self._propose_isr(self, list(a.isr), a.partition_epoch, list(a.silent))
            elif isinstance(a, RecoverFrom):
                lg = self.log
                self._recovery_end = (a.end_epoch, a.end_offset)
                self._recovery_seen = (-1, None)
                self.follower_state = FollowerState(
                    self.broker_id, a.source, self.leader_epoch, lg.log_end_offset, max(lg.latest_epoch, -1), 0
                )
                if self._on_recovery is not None:
                    self._on_recovery(self, "fetch")
            elif isinstance(a, Recovered):
                self._stop_recovery_fetch()
                if self._on_recovery is not None:
                    self._on_recovery(self, "done")
                self.wake()  # held follower fetches: answered as by any leader now

    def _set_high_watermark(self, hw: int) -> None:
        if hw > self.high_watermark:
            self.high_watermark = hw
            self._check_hw_waiters()
            self.wake()

    async def wait_for_commit(self, last_offset: int, timeout: float) -> None:
        """acks=all: until the high watermark passes `last_offset` (every ISR member has it)."""
        if self.high_watermark > last_offset:
            return
        fut = asyncio.get_running_loop().create_future()
        self._hw_waiters.append((last_offset, fut))
        async with asyncio.timeout(timeout):  # not wait_for: its callbacks cost a loop turn more per round
            await fut

    def _check_hw_waiters(self) -> None:
        if not self._hw_waiters:
            return
        keep = []
        for off, fut in self._hw_waiters:
            if fut.done():
                continue
            if self.high_watermark > off:
                fut.set_result(None)
            else:
                keep.append((off, fut))
        self._hw_waiters = keep

    def _fail_hw_waiters(self, exc: Exception | None) -> None:
        waiters, self._hw_waiters = self._hw_waiters, []
        for _, fut in waiters:
            if not fut.done():
                fut.set_exception(exc or NotLeaderOrFollowerError("leadership changed"))

    def last_offset_for_leader_epoch(self, current_leader_epoch: int, leader_epoch: int) -> tuple[int, int]:
        """Kafka's OffsetForLeaderEpoch on the leader (KIP-101/320): (the largest epoch <= `leader_epoch` this log
        knows, the offset where it ends: the start of the next epoch, or the log end for the current one); (-1, -1)
        for an epoch this log cannot say anything of. A client with another leader epoch is fenced (check_leader)."""
        self.check_leader(current_leader_epoch)
        if leader_epoch < 0:
            return -1, -1
        lg = self.log
        return leader_end_offset_for_epoch(leader_epoch, self.leader_epoch, lg.end_offset_for_epoch, lg.log_end_offset)

    # --- deleting records (Kafka's DeleteRecords) -----------------------------------

    def delete_records(self, offset: int) -> int:
        """On the leader: records below `offset` (-1: the high watermark) are deleted, i.e. the log start offset
        moves there (Kafka's Partition.deleteRecordsOnLeader). OFFSET_OUT_OF_RANGE for any other negative offset or
        one above the high watermark. Returns the offset asked for, which the low watermark must reach."""
        self.check_leader()
        target = self.high_watermark if offset == -1 else offset
        if target < 0 or target > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot delete records of {self.topic}-{self.partition} before offset {offset}: "
                f"not in [0, {self.high_watermark}] (the high watermark)"
            )
        self.advance_log_start_offset(target)
        return target

    def advance_log_start_offset(self, offset: int) -> None:
        """Move the log start up (never down); tells the owner to checkpoint it, and long-polling followers (whose
        fetch answers carry it) to look again."""
        if self.log.maybe_increment_log_start_offset(offset):
            if self.on_log_start_moved is not None:
                self.on_log_start_moved(self)
            self.wake()

    def low_watermark(self) -> int:
        """Kafka's lowWatermarkIfLeader: the lowest log start offset of this leader and the followers in the ISR
        (one not heard from since it became leader counts as -1)."""
        low = self.log.log_start_offset
        for r in self.isr:
            if r != self.broker_id:
                low = min(low, self.follower_log_starts.get(r, -1))
        return low

    async def wait_for_low_watermark(self, offset: int, timeout: float) -> int:
        """Until every in-sync replica starts at `offset` or later (Kafka's DelayedDeleteRecords); the low watermark.
        TimeoutError past `timeout`; NOT_LEADER_OR_FOLLOWER if leadership moves meanwhile."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            self.check_leader()
            low = self.low_watermark()
            if low >= offset:
                return low
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError(f"low watermark of {self.topic}-{self.partition} is {low}, below {offset}")
            woken = loop.create_future()
            self.add_data_waiter(woken)
            try:
                await asyncio.wait({woken}, timeout=remaining)
            finally:
                self.remove_data_waiter(woken)
                woken.cancel()

    # --- follower side -------------------------------------------------------------

    def append_as_follower(self, records: bytes, leader_hw: int) -> None:
        if records:
            self.log.append_as_follower(records)
            # Followers track producers too, so a retry after this replica becomes leader is still a duplicate.
            for pos, h in batch_fmt.iter_batches(records):
                if h.producer_id >= 0:
                    marker = batch_fmt.control_record(records, pos, h) if h.is_control else None
                    txn = self.producer_state.update(h, h.base_offset, marker)
                    if txn is not None:
                        self.log.append_aborted_txn(txn)
        fs = self.follower_state
        if fs is not None:
            fs.on_records_appended(self.log.log_end_offset, max(self.log.latest_epoch, -1))
            fs.on_high_watermark(leader_hw)
            hw = min(leader_hw, self.log.log_end_offset)
            if hw > self.high_watermark:
                self.high_watermark = hw
                self.wake()
        self._check_recovered()

    def _check_recovered(self) -> None:
        """A recovering leader whose log now ends where its source's did (same last epoch, same end: the source's
        log is frozen and copied here, divergent tail cut) has recovered."""
        ls = self.leader_state
        if (
            ls is not None
            and ls.recovering
            and self.follower_state is not None
            and (max(self.log.latest_epoch, -1), self.log.log_end_offset) >= self._recovery_end
        ):
            self._handle(ls.on_recovered(self.log.log_end_offset, self.high_watermark))

    def truncate_to(self, offset: int) -> None:
        self.log.truncate_to(offset)
        # Batches above the cut are gone: a retry of one must be appended again, not answered as a duplicate.
        # Snapshots above the new end are dropped by the load; the state is rebuilt from the newest below it.
        self._load_producer_state()
        self.high_watermark = min(self.high_watermark, self.log.log_end_offset)
        if self.follower_state is not None:
            self.follower_state.on_records_appended(self.log.log_end_offset, max(self.log.latest_epoch, -1))
            self._check_recovered()

    # --- waiting for data (long-poll fetches) ------------------------------------

    def add_data_waiter(self, fut: asyncio.Future[Any]) -> None:
        """`fut` gets a result at the next append, high-watermark move or role change (wake)."""
        self._waiters.add(fut)

    def remove_data_waiter(self, fut: asyncio.Future[Any]) -> None:
        self._waiters.discard(fut)

    def wake(self) -> None:
        waiters, self._waiters = self._waiters, set()
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def close(self) -> None:
        self.leader_state = None
        self.follower_state = None
        self._fail_hw_waiters(NotLeaderOrFollowerError(f"{self.topic}-{self.partition} was removed"))
        self.wake()


def _markers(data: bytes, batches: list[tuple[int, batch_fmt.BatchHeader]]) -> dict[int, batch_fmt.ControlRecord]:
    """The transaction markers among `batches` of `data`, by offset."""
    out = {}
    for pos, h in batches:
        if h.is_control and (m := batch_fmt.control_record(data, pos, h)) is not None:
            out[h.base_offset] = m
    return out


def _marker(
    records: bytes, kept: list[tuple[int, batch_fmt.BatchHeader]], h: batch_fmt.BatchHeader
) -> batch_fmt.ControlRecord | None:
    """The marker of control batch `h` (one of `kept`, positions in `records`), None for a data batch."""
    if not h.is_control:
        return None
    for pos, k in kept:
        if k is h:
            return batch_fmt.control_record(records, pos, h)
    return None
