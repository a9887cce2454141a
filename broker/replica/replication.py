"""Partition replication as sans-IO state machines (Kafka's Partition/Replica and fetcher rules).

Nothing here touches sockets, clocks or files: every input carries `now_ms` and the log positions it
needs, and every effect is returned as an action for the driver (broker/replica/partition.py, or a simulator)
to carry out. That keeps the rules deterministic, so they can be tested step by step and fuzzed.

- LeaderState: the leader's view of its followers: ISR shrink/expand proposals and the high watermark; under
  quorum commit also a new leader's recovery of the most complete log among enough replicas.
- FollowerSilence: which follower brokers owe the leader a fetch, for LeaderState.on_followers_silent.
- validate_fetch: the leader's answer to a follower fetch: epoch fencing, divergence (KIP-320), range.
- FollowerState: what a follower asks for next and where it truncates on divergence (KIP-101/279).
- alter_partition_outcome: what a leader does with the controller's answer to its AlterPartition, and
  AlterPartitionAttempts: its requests without a verdict yet, retried while the proposal stands.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Callable, Iterable

from net.errors import ErrorCode

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


# --- actions ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HighWatermarkAdvanced:
    """The high watermark moved up to `high_watermark`: release acks=all waiters, expose records to consumers."""

    high_watermark: int


@dataclass(frozen=True, slots=True)
class ProposeIsr:
    """Ask the controller to commit `isr` (AlterPartition). `partition_epoch` is the committed epoch the
    proposal is based on, so the controller can reject it if the partition changed meanwhile. The driver
    reports the outcome with LeaderState.on_isr_committed or LeaderState.on_isr_rejected.

    `silent`: the members a shrink drops that sent no fetch lately (see LeaderState._silent) or are fenced,
    as opposed to slow ones, which fetch but do not catch up. The controller moves the leadership off a
    leader cut off from its followers only on this evidence (docs/ELECTION.md section 6). It is evidence
    attached to the proposal, not part of what is proposed, so it does not take part in equality."""

    isr: tuple[int, ...]
    partition_epoch: int
    silent: tuple[int, ...] = field(default=(), compare=False)


@dataclass(frozen=True, slots=True)
class TruncateTo:
    """Truncate the local log to `offset`. `complete` is False when the follower did not know the epoch
    the leader answered with: it cut to its own end of an older epoch and must fetch again to learn
    whether more has to go (Kafka's intermediate truncation)."""

    offset: int
    complete: bool = True


@dataclass(frozen=True, slots=True)
class RecoverFrom:
    """A new leader's recovery (LeaderState.on_recovery_report): replica `source` holds the most complete log
    among enough replicas, ending at `end_offset` in leader epoch `end_epoch`; fetch from it (truncating where
    the local log diverges from it) until the local log ends there too, then call LeaderState.on_recovered.
    The driver may give up on a source that cannot serve (fenced, gone) with LeaderState.on_recovery_source_lost,
    which starts the count again."""

    source: int
    end_offset: int
    end_epoch: int = -1


@dataclass(frozen=True, slots=True)
class Recovered:
    """The new leader's log holds every record an earlier leader may have committed: it takes writes, and the
    services that read its partitions (group, transaction and share coordinators) may load them now."""


Action = HighWatermarkAdvanced | ProposeIsr | TruncateTo | RecoverFrom | Recovered


# --- leader ----------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Follower:
    # -1 until the first fetch of this leadership: a new leader cannot know how far followers got, so
    # the HW waits for every ISR member to fetch once (Kafka resets replica state on leader change).
    log_end_offset: int = UNDEFINED_OFFSET
    last_fetch_leader_leo: int | None = None
    last_fetch_ms: int | None = None
    last_caught_up_ms: int | None = None


class LeaderState:
    """The partition leader's replication state for one leader epoch."""

    def __init__(
        self,
        broker_id: int,
        replicas: list[int],
        isr: list[int],
        leader_epoch: int,
        partition_epoch: int,
        leader_log_end_offset: int,
        high_watermark: int,
        replica_lag_time_max_ms: int,
        now_ms: int,
        min_insync_replicas: int = 1,
        quorum: bool = False,
        latest_epoch: int = -1,
    ) -> None:
        self.broker_id = broker_id
        # Quorum commit (replica.quorum.commit.enable; docs/ELECTION.md section 6), for partitions whose
        # min.insync.replicas is at least a majority (see `quorum`): the high watermark may pass ISR members that
        # went silent as long as a quorum of the replicas has the records, and a new leader first recovers the
        # most complete log among enough replicas. False: Kafka's rules, nothing else.
        self.quorum_enabled = quorum
        self._quiet: set[int] = set()
        self.replicas = list(replicas)
        self.min_insync_replicas = min_insync_replicas
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self._isr = list(isr)
        self._pending: ProposeIsr | None = None
        self._fenced: set[int] = set()
        self._leo = leader_log_end_offset
        self._hw = high_watermark
        # Records below this were written by earlier leaders; a follower that has not reached it may
        # still hold a divergent tail of an old epoch, so it may not join the ISR yet (Kafka's rule).
        self.leader_epoch_start_offset = leader_log_end_offset
        # ISR members get a fresh lag allowance: they were in sync as far as the controller knows.
        self._followers = {
            r: _Follower(last_caught_up_ms=now_ms if r in isr else None) for r in replicas if r != broker_id
        }
        created = leader_epoch == 0 and partition_epoch == 0 and leader_log_end_offset == 0
        if created:
            # A partition the controller just created: every replica is empty by construction, so nobody lags
            # until there is something to fetch. After a flood of thousands of partitions, followers may create
            # theirs more than replica.lag.time.max.ms after this leader did: without this, every one of them
            # would be shrunk out of the ISR and back in, thousands of metadata changes. Conservative for the
            # high watermark (0 is at most what a follower has).
            for r in isr:
                if r in self._followers:
                    self._followers[r].log_end_offset = 0
        # A new leader under quorum commit recovers first (on_recovery_report): the log ends of enough replicas
        # that every quorum an earlier leader may have committed with has one of them among them.
        self._reports: dict[int, tuple[int, int]] = {broker_id: (latest_epoch, leader_log_end_offset)}
        self._recovery_source: int | None = None
        # A partition the controller just created has no earlier leader, so nothing to recover: it serves at once.
        self._recovering = self.quorum and self.recovery_reports_needed > 1 and not created

    # --- queries ---

    @property
    def high_watermark(self) -> int:
        return self._hw

    @property
    def isr(self) -> list[int]:
        """The committed ISR (what the controller would elect from)."""
        return list(self._isr)

    @property
    def pending_isr(self) -> list[int] | None:
        """The ISR proposed and not yet committed or rejected, if any."""
        return None if self._pending is None else list(self._pending.isr)

    @property
    def maximal_isr(self) -> list[int]:
        """Committed ISR plus pending additions (KIP-497): the set the HW must respect, since either
        side of an in-flight proposal may be what the controller ends up with."""
        extra = [r for r in self._pending.isr if r not in self._isr] if self._pending else []
        return self._isr + extra

    @property
    def leader_log_end_offset(self) -> int:
        return self._leo

    def follower_log_end_offset(self, replica_id: int) -> int | None:
        """The replica's LEO as of its last fetch; None before it fetched from this leader."""
        if replica_id == self.broker_id:
            return self._leo
        f = self._followers.get(replica_id)
        return None if f is None or f.log_end_offset < 0 else f.log_end_offset

    @property
    def is_under_replicated(self) -> bool:
        return len(self._isr) < len(self.replicas)

    def under_min_isr(self, min_insync: int) -> bool:
        return len(self._isr) < min_insync

    @property
    def quorum(self) -> bool:
        """Whether quorum commit applies: enabled, and min.insync.replicas is at least a majority of the replicas.
        Such a partition already refuses acks=all writes with a minority of its replicas alive; quorum commit adds
        that its new leader serves only once a majority has reported (recovery). A partition with a lower minimum
        was asked to stay available with a minority (Kafka's rules: any ISR member may lead alone), which a
        commit without silent ISR members would make unsafe, so it keeps Kafka's rules."""
        return self.quorum_enabled and self.effective_min_isr >= len(self.replicas) // 2 + 1

    @property
    def quorum_size(self) -> int:
        """How many replicas (the leader included) must hold a record for it to commit while some ISR members
        are silent: a majority of the replicas, and never fewer than min.insync.replicas."""
        return max(self.effective_min_isr, len(self.replicas) // 2 + 1)

    @property
    def recovery_reports_needed(self) -> int:
        """Replicas (the leader included) whose log ends a new leader must know before it serves: so many that
        any quorum_size replicas include one of them. 1 where every commit needs every replica (RF 1 or 2,
        or min.insync.replicas = RF): then the ISR rule alone is safe, as in Kafka."""
        return len(self.replicas) - self.quorum_size + 1

    @property
    def recovering(self) -> bool:
        """A new leader still recovering: it takes no writes and its high watermark does not move."""
        return self._recovering

    @property
    def recovery_source(self) -> int | None:
        return self._recovery_source

    @property
    def effective_min_isr(self) -> int:
        """min.insync.replicas capped at the replica count (Kafka's effectiveMinIsr): a topic whose
        setting exceeds its replication factor still commits once every replica has the records."""
        return max(1, min(self.min_insync_replicas, len(self.replicas)))

    # --- events ---

    def on_follower_fetch(
        self, replica_id: int, fetch_offset: int, leader_log_end_offset: int, now_ms: int
    ) -> list[Action]:
        """A validated fetch (see validate_fetch) from `replica_id` at `fetch_offset`."""
        f = self._followers.get(replica_id)
        if f is None:
            return []  # not a replica of this partition: nothing it says may move the HW
        # The same position as its last fetch against the same log end, from an ISR member: neither the HW
        # nor the ISR can move (every other input of theirs is re-evaluated where it changes). Most partitions
        # of a follower's fetch are idle ones, thousands after a flood (issue 25): they take this path.
        unchanged = fetch_offset == f.log_end_offset and leader_log_end_offset == self._leo and replica_id in self._isr
        self._leo = leader_log_end_offset
        # A fetch at offset N proves the follower has everything below N. If that covers the leader's
        # LEO now, it is caught up now; if it only covers the LEO the leader had when the follower sent
        # its previous fetch, it has been caught up since then. The second case keeps a follower that
        # always trails by one round trip in sync while producers append continuously.
        if fetch_offset >= leader_log_end_offset:
            f.last_caught_up_ms = _later(f.last_caught_up_ms, now_ms)
        elif f.last_fetch_leader_leo is not None and fetch_offset >= f.last_fetch_leader_leo:
            f.last_caught_up_ms = _later(f.last_caught_up_ms, f.last_fetch_ms)
        f.log_end_offset = fetch_offset
        f.last_fetch_leader_leo = leader_log_end_offset
        f.last_fetch_ms = now_ms
        # A broker fetches only while it is alive, so it may be considered for the ISR again; the
        # controller still refuses brokers it has fenced. It is not silent any more either.
        self._fenced.discard(replica_id)
        self._quiet.discard(replica_id)
        if unchanged:
            return []
        actions = self._maybe_expand(replica_id)
        actions += self._maybe_advance_hw()
        return actions

    def set_min_insync_replicas(self, min_insync: int) -> list[Action]:
        """The topic's min.insync.replicas changed; lowering it may let the HW advance (or end quorum commit)."""
        self.min_insync_replicas = min_insync
        if not self.quorum:
            self._quiet = set()
        return self._maybe_advance_hw()

    def on_leader_append(self, leader_log_end_offset: int, now_ms: int) -> list[Action]:
        self._leo = leader_log_end_offset
        return self._maybe_advance_hw()

    def tick(self, now_ms: int, leader_log_end_offset: int) -> list[Action]:
        """Periodic check (Kafka's isr-expiration task): propose dropping followers that lag too long."""
        self._leo = leader_log_end_offset
        actions = self._maybe_shrink(now_ms)
        actions += self._maybe_advance_hw()
        return actions

    def on_followers_silent(self, silent: Iterable[int]) -> list[Action]:
        """`silent`: follower brokers that owe this broker a fetch for longer than replica.silence.time.max.ms
        (FollowerSilence). Those of them in the ISR that lag behind the log end hold the high watermark back for
        as long as they stay away, and every consumer and acks=all producer of the partition with it. They are
        dropped now, not after replica.lag.time.max.ms, when what stays in the ISR is still a majority of the
        replicas and at least min.insync.replicas: a fault on a minority of the replicas then stops no partition
        it does not lead, as with a quorum (Raft's commit). Like any shrink it is safe: the high watermark counts
        the committed ISR, which every member still has. A shrink that would leave less waits for the lag
        time, as in Kafka: dropping one of two silent followers of three replicas would not free the high
        watermark anyway. A follower that fetches, however slowly, is never dropped here."""
        quiet = set(silent)
        hw: list[Action] = []
        if self.quorum:
            # Under quorum commit the HW passes them now, without waiting for the controller (which may be
            # the silent one): _maybe_advance_hw counts the others when they are a quorum.
            self._quiet = quiet - {self.broker_id}
            hw = self._maybe_advance_hw()
        if self._pending is not None:
            return hw
        out = [r for r in self._isr if r != self.broker_id and r in quiet and self._behind(r)]
        if not out:
            return hw
        keep = [r for r in self._isr if r not in out]
        if len(keep) < self.quorum_size:
            return hw
        return hw + self._propose(keep, tuple(out))

    # --- a new leader's recovery (quorum commit) ---

    def on_recovery_report(self, replica_id: int, last_epoch: int, log_end_offset: int) -> list[Action]:
        """A replica's log end, from its first fetch of this leader epoch (`last_epoch`: the epoch of its last
        record). It fetches from nobody else any more (it knows this epoch), so the report stays true until this
        leader sends it records. Once recovery_reports_needed replicas reported, the most complete log among
        them (the latest last epoch, then the longest) holds every record any earlier leader committed: each
        commit was on a quorum, which includes a reporter, and logs that share an epoch agree up to the
        shorter's end (docs/ELECTION.md section 6). If that log is ours, recovery is over; else fetch the rest
        from its holder (RecoverFrom)."""
        if not self._recovering or self._recovery_source is not None or replica_id not in self.replicas:
            return []
        self._reports[replica_id] = (last_epoch, log_end_offset)
        if len(self._reports) < self.recovery_reports_needed:
            return []
        mine = self._reports[self.broker_id]
        best, where = max((v, r) for r, v in self._reports.items())
        if best <= mine:
            return self._recovered()
        self._recovery_source = where
        return [RecoverFrom(where, best[1], best[0])]

    def on_recovered(self, leader_log_end_offset: int, high_watermark: int) -> list[Action]:
        """The local log now ends where the recovery source's did: recovery is over."""
        if not self._recovering:
            return []
        self._leo = leader_log_end_offset
        self._hw = max(self._hw, min(high_watermark, leader_log_end_offset))
        return self._recovered()

    def on_recovery_source_lost(self, latest_epoch: int, log_end_offset: int) -> list[Action]:
        """The recovery source cannot serve (fenced, or its partition moved): count the reports again, ours as the
        local log is now (it may hold part of the source's already). Safe with any reporters: whatever set of
        recovery_reports_needed replicas reports, its most complete log has every committed record."""
        if not self._recovering or self._recovery_source is None:
            return []
        self._recovery_source = None
        self._leo = log_end_offset
        self._reports = {self.broker_id: (latest_epoch, log_end_offset)}
        return []

    def _recovered(self) -> list[Action]:
        self._recovering = False
        self._recovery_source = None
        # Records before this offset were written by earlier leaders, the recovered ones included.
        self.leader_epoch_start_offset = self._leo
        self._reports = {}
        return [Recovered(), *self._maybe_advance_hw()]

    def _fetched(self, replica_id: int) -> bool:
        """Whether `replica_id` is this leader or has fetched from it in this leadership."""
        f = self._followers.get(replica_id)
        return replica_id == self.broker_id or (f is not None and f.log_end_offset >= 0)

    def _behind(self, replica_id: int) -> bool:
        """Whether `replica_id` lacks records the leader has (or has not fetched in this leadership yet)."""
        f = self._followers.get(replica_id)
        return f is None or f.log_end_offset < self._leo

    def remove_replicas(self, broker_ids: Iterable[int]) -> list[Action]:
        """The controller fenced these brokers: drop them from the ISR now rather than after the lag time,
        so acks=all produces do not stall. Like every ISR change it only counts once committed."""
        self._fenced.update(b for b in broker_ids if b != self.broker_id)
        return self._maybe_shrink(None)

    def on_isr_committed(self, isr: list[int], partition_epoch: int) -> list[Action]:
        """The controller committed partition state (ours or anyone's change). Older or repeated
        states are ignored; a newer one replaces the committed ISR and ends any in-flight proposal,
        which was either this change or is now stale (the controller rejects its old epoch)."""
        if partition_epoch <= self.partition_epoch:
            return []
        self._isr = list(isr)
        self.partition_epoch = partition_epoch
        self._pending = None
        for r in isr:
            if r != self.broker_id:
                self._followers.setdefault(r, _Follower())
        # HW first: a shrink may raise it. No expansion here: a replica joins on its own next fetch, which
        # proves it is alive (see _maybe_expand).
        actions = self._maybe_advance_hw()
        actions += self._maybe_shrink(None)  # fenced brokers still in the new ISR
        return actions

    def is_pending(self, isr: list[int] | tuple[int, ...], partition_epoch: int) -> bool:
        """Whether this exact proposal is still in flight (not settled by metadata, rejected or replaced)."""
        p = self._pending
        return p is not None and p.isr == tuple(isr) and p.partition_epoch == partition_epoch

    def on_isr_rejected(self, isr: list[int] | None = None, partition_epoch: int | None = None) -> list[Action]:
        """The in-flight proposal failed. Pass the proposal's isr/partition_epoch when known: a late
        rejection of an already-superseded proposal must not clear the newer one still in flight (its
        additions would vanish from the maximal ISR and the HW could overtake them)."""
        p = self._pending
        if p is None:
            return []
        if isr is not None and tuple(isr) != p.isr:
            return []
        if partition_epoch is not None and partition_epoch != p.partition_epoch:
            return []
        self._pending = None
        return self._maybe_advance_hw()

    # --- rules ---

    def _propose(self, isr: list[int], silent: tuple[int, ...] = ()) -> list[Action]:
        self._pending = ProposeIsr(tuple(isr), self.partition_epoch, silent)
        return [self._pending]

    def _maybe_expand(self, r: int) -> list[Action]:
        """Propose `r`, which just fetched, into the ISR if it is caught up (Kafka's maybeExpandIsr).

        Only the fetching replica is a candidate. Judging the others by the offset of their last fetch
        re-admitted a replica that had stopped fetching, right after it was dropped for lagging, when
        another member was no further ahead (so the shrink did not raise the HW above it): acks=all then
        waited for a dead replica until it lagged out again. tests/sim/replication_sim.py
        found it where such a proposal, delayed past a restart of the leader, was committed behind the
        restarted leader's HW.
        """
        f = self._followers.get(r)
        if (
            self._pending is None
            and f is not None
            and r not in self._isr
            and r not in self._fenced
            and r in self.replicas
            and f.log_end_offset >= self._hw
            and f.log_end_offset >= self.leader_epoch_start_offset
        ):
            return self._propose(self._isr + [r])  # one at a time: only one proposal may be in flight
        return []

    def _maybe_shrink(self, now_ms: int | None) -> list[Action]:
        """Drop fenced members, and with `now_ms` also members not caught up within the lag time."""
        if self._pending is not None:
            return []
        out = [
            r
            for r in self._isr
            if r != self.broker_id and (r in self._fenced or (now_ms is not None and self._lagging(r, now_ms)))
        ]
        if not out:
            return []
        silent = tuple(r for r in out if self._silent(r, now_ms))
        return self._propose([r for r in self._isr if r not in out], silent)

    def _silent(self, replica_id: int, now_ms: int | None) -> bool:
        """Whether `replica_id`, which lags, sent this leader no fetch in the last half of the lag time (or is
        fenced): cut off or dead, as opposed to slow. Half, not all of it: a follower cut off while producers
        append trailed by a fetch round trip, so its last fetch came one round trip after it was last caught
        up, and the shrink (lag time after that) comes before a full lag time without fetches; a slow one
        keeps fetching through the whole window. Without `now_ms` (a shrink of fenced members only) only
        fenced ones are."""
        if replica_id in self._fenced:
            return True
        if now_ms is None:
            return False
        f = self._followers.get(replica_id)
        last = None if f is None else f.last_fetch_ms
        return last is None or now_ms - last > self.replica_lag_time_max_ms // 2

    def _lagging(self, replica_id: int, now_ms: int) -> bool:
        f = self._followers.get(replica_id)
        if f is None:
            return True
        if f.log_end_offset == self._leo:
            return False  # nothing to catch up on: an idle partition keeps a quiet follower
        # A stuck follower (no fetches) and a slow one (fetches, never reaches the LEO) both stop
        # refreshing last_caught_up_ms, so one rule covers both.
        return f.last_caught_up_ms is None or now_ms - f.last_caught_up_ms > self.replica_lag_time_max_ms

    def _maybe_advance_hw(self) -> list[Action]:
        # KIP-966: no commit by an ISR smaller than min.insync.replicas. Without this, a controller that
        # shrinks the ISR to the leader alone (ZooKeeper mode can, with 2 of 3 brokers gone) lets the HW
        # pass acks=all records whose producer was told they failed, and a consumer reads them. acks=0/1
        # records are still appended and acknowledged, but become readable only once the ISR is back at
        # the minimum, as in Kafka with eligible leader replicas enabled.
        if self._recovering or len(self._isr) < self.effective_min_isr:
            return []
        counted = self.maximal_isr
        if self.quorum:
            # Quorum commit: silent members, and members that have not fetched from this leader yet (a new leader
            # does not know how far they got; one cut off stays so until it is judged silent, a second later), do
            # not hold the HW back while the others are a quorum. Safe because a new leader recovers from enough
            # replicas to meet every quorum (on_recovery_report), so it does not matter that they stay in the
            # committed ISR until the controller drops them.
            rest = [r for r in counted if r not in self._quiet and self._fetched(r)]
            if len(rest) < len(counted) and len(rest) >= self.quorum_size:
                counted = rest
        hw = self._leo
        for r in counted:
            if r != self.broker_id:
                f = self._followers.get(r)
                hw = min(hw, f.log_end_offset if f is not None else UNDEFINED_OFFSET)
        if hw <= self._hw:
            return []  # never lower: consumers may already have read up to the old HW
        self._hw = hw
        return [HighWatermarkAdvanced(hw)]


# --- AlterPartition outcomes (the driver's rule: broker/server/broker_server.py, and tests/sim/replication_sim.py)
# ---------


class AlterOutcome(Enum):
    """What the leader does after an AlterPartition attempt (Kafka's Partition.handleAlterPartitionError
    and AlterPartitionManager). The danger is forgetting a proposal the controller did commit: the HW then
    stops respecting the replica it added, may pass it, and a later leader elected from the committed ISR
    can lack acknowledged records. So the proposal is reset only on a refusal that proves it was not applied."""

    COMMITTED = "committed"  # applied: the committed state arrives by metadata (on_isr_committed)
    RETRY = "retry"  # no verdict (timeout, network, no or moved controller): may have been applied; ask again
    AWAIT_METADATA = "await-metadata"  # refused against a newer state, maybe our own change: keep it pending
    REJECTED = "rejected"  # refused against the current state: not applied anywhere; on_isr_rejected


# Refusals that name a state newer than the proposal's: its own commit may be what moved it. The pending
# proposal keeps bounding the HW until metadata brings that state, and on_isr_committed settles it.
_AWAIT_METADATA = frozenset(
    {
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.INVALID_UPDATE_VERSION,
        ErrorCode.STALE_BROKER_EPOCH,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.INVALID_REQUEST,
    }
)
# The controller says it did not, and no controller ever will, apply it (judged on the current epochs).
_REJECTED = frozenset({ErrorCode.INELIGIBLE_REPLICA, ErrorCode.OPERATION_NOT_ATTEMPTED})


def alter_partition_outcome(error_code: int) -> AlterOutcome:
    """The outcome of an AlterPartition answered with `error_code` (0: committed). Anything else, timeouts,
    network errors, NOT_CONTROLLER and unknown errors included, leaves the result unknown: retry."""
    if error_code == ErrorCode.NONE:
        return AlterOutcome.COMMITTED
    if error_code in _AWAIT_METADATA:
        return AlterOutcome.AWAIT_METADATA
    if error_code in _REJECTED:
        return AlterOutcome.REJECTED
    return AlterOutcome.RETRY


def alter_partition_retry_wanted(
    leader_state: LeaderState | None, leader_epoch: int, isr: list[int] | tuple[int, ...], partition_epoch: int
) -> bool:
    """After an attempt without a verdict: ask again only while the same leadership still waits for the same
    proposal. A new partition state (metadata), a rejection or a new leader epoch ends the retries."""
    return (
        leader_state is not None
        and leader_state.leader_epoch == leader_epoch
        and leader_state.is_pending(isr, partition_epoch)
    )


@dataclass(frozen=True, slots=True)
class AlterAttempt:
    """One AlterPartition request carrying a leader's ISR proposal."""

    seq: int  # numbers the process's requests: the controller drops one overtaken by a newer one
    topic: str
    partition: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int
    silent: tuple[int, ...] = ()  # see ProposeIsr.silent; every retry carries the same evidence


class AlterPartitionAttempts:
    """One broker process's AlterPartition requests still waiting for a verdict, and what each answer means
    (Kafka's AlterPartitionManager, without I/O). broker/replica/alter_partition_manager.py sends the attempts over
    the controller channel, the replication simulator (tests/sim/replication_sim.py) over its network."""

    def __init__(self) -> None:
        self._seq = 0
        self.in_flight: dict[int, AlterAttempt] = {}

    def propose(
        self,
        topic: str,
        partition: int,
        leader_epoch: int,
        isr: list[int] | tuple[int, ...],
        partition_epoch: int,
        silent: list[int] | tuple[int, ...] = (),
    ) -> AlterAttempt:
        """The first attempt of a proposal (LeaderState's ProposeIsr, in `leader_epoch`)."""
        self._seq += 1
        attempt = AlterAttempt(self._seq, topic, partition, leader_epoch, tuple(isr), partition_epoch, tuple(silent))
        self.in_flight[attempt.seq] = attempt
        return attempt

    def answered(self, seq: int, error_code: int | None) -> tuple[AlterOutcome, AlterAttempt] | None:
        """Attempt `seq` was answered with `error_code` (None: no answer in time): its outcome (see
        AlterOutcome: on REJECTED the leader calls on_isr_rejected, on RETRY the driver asks `retry`). None:
        it had its verdict already (a late or duplicated answer, or its timeout after the answer)."""
        attempt = self.in_flight.pop(seq, None)
        if attempt is None:
            return None
        code = ErrorCode.REQUEST_TIMED_OUT if error_code is None else error_code
        return alter_partition_outcome(code), attempt

    def retry(self, attempt: AlterAttempt, leader_state: LeaderState | None) -> AlterAttempt | None:
        """After an attempt without a verdict: the next attempt (a new request) while the same leadership
        still waits for the proposal (alter_partition_retry_wanted), else None: metadata or a rejection
        settled it, or the leadership changed."""
        if not alter_partition_retry_wanted(leader_state, attempt.leader_epoch, attempt.isr, attempt.partition_epoch):
            return None
        self._seq += 1
        nxt = replace(attempt, seq=self._seq)
        self.in_flight[nxt.seq] = nxt
        return nxt


class FollowerSilence:
    """Which follower brokers owe this leader a fetch, and for how long (one clock per broker, all its partitions).

    A follower's fetch reaches its leader at least every replica.fetch.wait.max.ms (the longest a leader holds
    one; an answer brings the next at once), from each of its fetcher lanes. So a follower from which no fetch
    has arrived for longer than that, with a margin, is paused, cut off or dead, whatever its partitions'
    traffic, while a slow follower, which keeps fetching, never is. Counted from the arrivals, not the answers:
    a lane of idle partitions has its fetch held for up to replica.fetch.wait.max.ms, and counting from its
    answer delayed the verdict by as much (issue 29 §3's runs). But a follower that was sent records owes its
    next fetch at once (it acknowledges them with it, and no leader holds an answer that has records): from that
    answer only the margin is left (`silent`'s `fetch_wait_ms`). That is when a paused follower starts holding
    the high watermark back: its last fetch arrived earlier, while it had everything. A follower this broker never
    heard from owes a fetch from when this broker became a leader it follows (`expect`): it may have been cut off
    before it ever fetched from this process (a leader restarted, or elected while the follower was away)."""

    def __init__(self) -> None:
        self._heard_ms: dict[int, int] = {}  # follower id -> when its last fetch arrived
        self._sent_ms: dict[int, int] = {}  # follower id -> when records were first sent to it since then

    def expect(self, replica_ids: Iterable[int], now_ms: int) -> None:
        """This broker just became a leader these replicas follow: those never heard from owe a fetch from now."""
        for r in replica_ids:
            self._heard_ms.setdefault(r, now_ms)

    def on_fetch_received(self, replica_id: int, now_ms: int) -> None:
        self._heard_ms[replica_id] = now_ms
        self._sent_ms.pop(replica_id, None)

    def on_records_sent(self, replica_id: int, now_ms: int) -> None:
        """A fetch of `replica_id` was answered with records: its next fetch is due now."""
        if replica_id in self._heard_ms:
            self._sent_ms.setdefault(replica_id, now_ms)

    def forget(self, replica_id: int) -> None:
        """Stop judging `replica_id` until it fetches again or is `expect`ed (it follows nothing led here)."""
        self._heard_ms.pop(replica_id, None)
        self._sent_ms.pop(replica_id, None)

    def silent(self, now_ms: int, timeout_ms: int, fetch_wait_ms: int = 0) -> frozenset[int]:
        """The followers no fetch has arrived from for more than `timeout_ms` (0: none, the rule is off), or, since
        they were sent records, for more than `timeout_ms` less `fetch_wait_ms` (replica.fetch.wait.max.ms: the
        part of the timeout a leader may hold a fetch, over once it answered with records)."""
        if timeout_ms <= 0:
            return frozenset()
        owed_ms = max(timeout_ms - fetch_wait_ms, 1)
        return frozenset(
            r
            for r, at in self._heard_ms.items()
            if now_ms - at > timeout_ms or now_ms - self._sent_ms.get(r, now_ms) > owed_ms
        )


def _later(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else max(a, b)


# --- fetch validation at the leader ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ok:
    """Serve the fetch from fetch_offset."""


@dataclass(frozen=True, slots=True)
class Fenced:
    """FENCED_LEADER_EPOCH: the fetcher follows an older leader epoch than ours."""


@dataclass(frozen=True, slots=True)
class UnknownEpoch:
    """UNKNOWN_LEADER_EPOCH: the fetcher knows a newer leader epoch than we do (our metadata lags)."""


@dataclass(frozen=True, slots=True)
class Diverging:
    """The follower's log diverges from ours: our records of epochs <= `epoch` end at `end_offset`
    (KIP-320). Sent with an empty, successful response; the follower truncates and refetches."""

    epoch: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class OutOfRange:
    """OFFSET_OUT_OF_RANGE: fetch_offset is outside [log_start_offset, log_end_offset], or the follower
    names an epoch we cannot place."""


FetchDecision = Ok | Fenced | UnknownEpoch | Diverging | OutOfRange


def validate_fetch(
    current_leader_epoch: int,
    leader_epoch: int,
    fetch_offset: int,
    last_fetched_epoch: int,
    epoch_end_offset: Callable[[int], tuple[int, int]],
    log_start_offset: int,
    log_end_offset: int,
) -> FetchDecision:
    """Kafka's Partition.fetchRecords checks, in its order. A negative `current_leader_epoch` or
    `last_fetched_epoch` means the fetcher did not send one, and that check is skipped.
    `epoch_end_offset(e)` is the leader's Log.end_offset_for_epoch."""
    if current_leader_epoch >= 0:
        if current_leader_epoch < leader_epoch:
            return Fenced()
        if current_leader_epoch > leader_epoch:
            return UnknownEpoch()
    if last_fetched_epoch >= 0:
        epoch, end = leader_end_offset_for_epoch(last_fetched_epoch, leader_epoch, epoch_end_offset, log_end_offset)
        if epoch < 0 or end < 0:
            return OutOfRange()
        if fetch_offset < log_start_offset:
            return OutOfRange()  # divergence below our log start cannot be resolved by truncation
        # We lack the follower's epoch (our floor is older) or our records of it end before the
        # follower's: everything from there on the follower is not ours.
        if epoch < last_fetched_epoch or end < fetch_offset:
            return Diverging(epoch, end)
    if not log_start_offset <= fetch_offset <= log_end_offset:
        return OutOfRange()
    return Ok()


def leader_end_offset_for_epoch(
    epoch: int, leader_epoch: int, epoch_end_offset: Callable[[int], tuple[int, int]], log_end_offset: int
) -> tuple[int, int]:
    """end_offset_for_epoch as if the leader's epoch cache already held (leader_epoch, log_end_offset).

    Kafka writes that entry on becoming leader; Log only records an epoch at its first append. Without
    this, a deposed leader that wrote a tail in an epoch the new leader never saw would get OutOfRange
    (the epoch looks newer than all of ours) instead of a divergence point, until the new leader appends.
    """
    answer = epoch_end_offset(epoch)
    if answer[0] >= 0 or epoch > leader_epoch:
        return answer
    if epoch == leader_epoch:
        return leader_epoch, log_end_offset
    # Every epoch in (our latest, leader_epoch) is ours to end at the LEO; find our latest (usually 1 step).
    for older in range(epoch - 1, -1, -1):
        found = epoch_end_offset(older)
        if found[0] >= 0:
            return found[0], log_end_offset
    return epoch, log_end_offset  # no epochs at all: nothing of ours can match the follower's tail


# --- follower ----------------------------------------------------------------------------------------


class FollowerState:
    """A follower's fetch position against one leader epoch."""

    def __init__(
        self,
        broker_id: int,
        leader_id: int,
        leader_epoch: int,
        log_end_offset: int,
        latest_epoch: int,
        high_watermark: int = 0,
    ) -> None:
        self.broker_id = broker_id
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.log_end_offset = log_end_offset
        self.latest_epoch = latest_epoch
        self.high_watermark = min(high_watermark, log_end_offset)

    def next_fetch(self) -> tuple[int, int, int]:
        """(fetch_offset, last_fetched_epoch, current_leader_epoch) for the next fetch request."""
        return self.log_end_offset, self.latest_epoch, self.leader_epoch

    def on_diverging(
        self,
        diverging_epoch: int,
        diverging_end_offset: int,
        local_end_offset_for_epoch: Callable[[int], tuple[int, int]],
    ) -> TruncateTo:
        """Where to truncate after the leader answered Diverging(diverging_epoch, diverging_end_offset).

        Kafka's AbstractFetcherThread.getOffsetTruncationState. Our high watermark is no floor: the
        leader's history is the truth, and after an unclean election it may lack records we had counted
        as committed.
        """
        local_epoch, local_end = local_end_offset_for_epoch(diverging_epoch)
        if local_epoch < 0 or local_end < 0:
            # We have no epochs at or below it: the leader's end offset is the best bound we have.
            return TruncateTo(min(diverging_end_offset, self.log_end_offset))
        if local_epoch != diverging_epoch:
            # We never had the leader's epoch; our records of the older epoch `local_epoch` end at
            # local_end. Cut there and ask again with that epoch, as the leader may end it even earlier.
            return TruncateTo(min(local_end, self.log_end_offset), complete=False)
        # Both logs had this epoch; they agree up to wherever the shorter copy of it ends.
        return TruncateTo(min(local_end, diverging_end_offset, self.log_end_offset))

    def on_records_appended(self, new_log_end_offset: int, latest_epoch: int) -> None:
        """The local log changed: appended records, or was truncated (then the LEO may go down)."""
        self.log_end_offset = new_log_end_offset
        self.latest_epoch = latest_epoch
        # A truncation below the HW (possible after an unclean election) takes the HW with it; this is
        # the only way it goes down.
        self.high_watermark = min(self.high_watermark, new_log_end_offset)

    def on_high_watermark(self, hw_from_leader: int) -> list[Action]:
        """The leader's HW from a fetch response. Ours is capped by what we hold."""
        hw = min(hw_from_leader, self.log_end_offset)
        if hw <= self.high_watermark:
            return []
        self.high_watermark = hw
        return [HighWatermarkAdvanced(hw)]
