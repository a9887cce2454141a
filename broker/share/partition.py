"""One share-partition: a share group's view of one topic partition, on the partition's leader, sans-IO.

KIP-932's SharePartition. The records from the share-partition start offset (SPSO) on are in flight, each in one
state: Available (may be handed to a member), Acquired (handed to one member, locked for
`group.share.record.lock.duration.ms`), Acknowledged (accepted; done) or Archived (rejected, or delivered
`group.share.delivery.count.limit` times; never delivered again). Below the SPSO every record is done; at and
past the share-partition end offset (SPEO, `end_offset`) none was ever acquired. The SPSO moves up over done
records, so the in-flight map holds only the window between the two.

A member acknowledges what it acquired: ACCEPT, RELEASE (available again: redelivered, to it or another),
REJECT (archived) or RENEW (the lock starts again). A lock that runs out, or a member whose share session ends,
makes its records Available again, unless they were delivered as often as the limit allows (then Archived).
Time comes in as `now_ms` arguments (ticks); no clocks, sockets or files here. `snapshot()` and `restore()`
carry the durable part (SPSO, each in-flight record's state and delivery count) to and from
`__share_group_state` (broker/share/state_records.py); an acquisition lock is not durable (Kafka's either):
after a restore, acquired records are Available again with their delivery counts.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from enum import IntEnum

from net.errors import ErrorCode


class RecordState(IntEnum):
    """Kafka's RecordState codes (as persisted in ShareSnapshot / ShareUpdate's delivery_state)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AckType(IntEnum):
    """ShareFetch / ShareAcknowledge's acknowledge types."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


@dataclass(slots=True)
class InFlight:
    state: RecordState
    delivery_count: int = 0
    member_id: str | None = None
    lock_deadline_ms: int = 0


@dataclass(frozen=True, slots=True)
class StateBatch:
    """A run of offsets with one state and delivery count (Kafka's PersisterStateBatch)."""

    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class Acquired:
    """A run of offsets acquired by one ShareFetch (the answer's AcquiredRecords)."""

    first_offset: int
    last_offset: int
    delivery_count: int


class AcknowledgeError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class SharePartition:
    def __init__(
        self, start_offset: int, lock_duration_ms: int, delivery_count_limit: int, max_in_flight: int = 2000
    ) -> None:
        self.start_offset = start_offset  # SPSO
        self.end_offset = start_offset  # SPEO: first offset never acquired
        self.lock_duration_ms = lock_duration_ms
        self.delivery_count_limit = delivery_count_limit
        self.max_in_flight = max_in_flight
        self.records: dict[int, InFlight] = {}  # offsets in [start_offset, end_offset) not yet done
        self.state_epoch = 0
        self.dirty = False  # the durable part changed since the last snapshot taken
        # No acquisition lock runs out before this (a lower bound: a lock renewed or a record done since leaves it
        # early, which costs one scan), so that tick() on every ShareFetch need not walk the records in flight.
        self._next_lock_deadline_ms = 0

    # --- acquiring ---------------------------------------------------------------------------

    def next_fetch_offset(self) -> int:
        """Where a read of the log for this share-partition starts: its first available record, else the SPEO."""
        available = [o for o, r in self.records.items() if r.state == RecordState.AVAILABLE]
        return min(available) if available else self.end_offset

    def acquire(
        self,
        member_id: str,
        offsets: list[int],
        end: int,
        max_records: int,
        now_ms: int,
        batch_lasts: list[int] | None = None,
    ) -> list[Acquired]:
        """Acquire for `member_id` up to `max_records` of the data records `offsets` (ascending, as read from the
        log), which cover the log up to `end` (exclusive); offsets below `end` that are not among them (control
        records, compacted gaps) are done at once and never handed out.

        With `batch_lasts` (the last offsets of the log batches read, ascending) `max_records` is a soft limit, as
        Kafka's ShareFetch MaxRecords: the batch the limit falls in is acquired to its end, so that a batch goes
        out whole (its records decoded once, by one member) rather than split over fetches. The most records
        acquired at one time (`max_in_flight`) stays a hard limit."""
        acquired: list[int] = []
        counts: dict[int, int] = {}
        readable = set(offsets)
        held = sum(1 for r in self.records.values() if r.state == RecordState.ACQUIRED)
        hard = self.max_in_flight - held
        budget = min(max_records, hard)
        stop_after = -1  # with batch_lasts: the last offset of the batch in which the budget ran out
        for o in offsets:
            if len(acquired) >= budget:
                if batch_lasts is None or not acquired or len(acquired) >= hard:
                    break
                if stop_after < 0:
                    i = bisect_left(batch_lasts, acquired[-1])
                    stop_after = batch_lasts[i] if i < len(batch_lasts) else acquired[-1]
                if o > stop_after:
                    break
            if o < self.start_offset:
                continue
            r = self.records.get(o)
            if o >= self.end_offset:
                r = self.records[o] = InFlight(RecordState.AVAILABLE)
            elif r is None or r.state != RecordState.AVAILABLE:
                continue
            r.state = RecordState.ACQUIRED
            r.delivery_count += 1
            r.member_id = member_id
            r.lock_deadline_ms = now_ms + self.lock_duration_ms
            if not acquired:
                self._next_lock_deadline_ms = min(self._next_lock_deadline_ms, r.lock_deadline_ms)
            acquired.append(o)
            counts[o] = r.delivery_count
        # The SPEO moves past what was acquired, and past the gaps before it.
        top = max(acquired) + 1 if acquired else self.end_offset
        if not acquired and offsets == [] and end > self.end_offset:
            top = end  # nothing but gaps were read
        for o in range(self.end_offset, top):
            if o not in readable:
                self.records.pop(o, None)  # a gap: nothing to deliver
        if top > self.end_offset:
            self.end_offset = top
            self.dirty = True
        self._advance_start()
        return _runs(acquired, counts)

    # --- acknowledging -----------------------------------------------------------------------

    def acknowledge(self, member_id: str, first: int, last: int, types: list[int], now_ms: int) -> None:
        """One acknowledgement batch: one type for the whole range, or one per offset. Checked whole before any
        change: a record not acquired by this member is INVALID_RECORD_STATE (Kafka's rule), nothing changed."""
        if last < first or (len(types) != 1 and len(types) != last - first + 1):
            raise AcknowledgeError(ErrorCode.INVALID_REQUEST, "acknowledge types do not match the offsets")
        if first < self.start_offset or last >= self.end_offset:  # checked first: a range is never walked blindly
            raise AcknowledgeError(
                ErrorCode.INVALID_RECORD_STATE,
                f"offsets {first}-{last} are not in flight ({self.start_offset}-{self.end_offset - 1})",
            )
        kinds = []
        for i, o in enumerate(range(first, last + 1)):
            t = types[0] if len(types) == 1 else types[i]
            if t not in AckType._value2member_map_:
                raise AcknowledgeError(ErrorCode.INVALID_REQUEST, f"unknown acknowledge type {t}")
            kind = AckType(t)
            r = self.records.get(o)
            if kind == AckType.GAP:
                if r is not None and (r.state != RecordState.ACQUIRED or r.member_id != member_id):
                    raise AcknowledgeError(ErrorCode.INVALID_RECORD_STATE, f"offset {o} is not a gap acquired")
            elif r is None or r.state != RecordState.ACQUIRED or r.member_id != member_id:
                raise AcknowledgeError(
                    ErrorCode.INVALID_RECORD_STATE, f"offset {o} is not acquired by member {member_id}"
                )
            kinds.append((o, kind))
        for o, kind in kinds:
            r = self.records.get(o)
            if r is None:
                continue
            if kind in (AckType.ACCEPT, AckType.GAP):
                self._done(o, RecordState.ACKNOWLEDGED)
            elif kind == AckType.REJECT:
                self._done(o, RecordState.ARCHIVED)
            elif kind == AckType.RELEASE:
                self._release(o, r)
            else:  # RENEW: the member keeps it for another lock duration
                r.lock_deadline_ms = now_ms + self.lock_duration_ms
        self._advance_start()

    def release_member(self, member_id: str) -> int:
        """A member's share session ended: what it holds is available again (or archived at the limit)."""
        held = [o for o, r in self.records.items() if r.state == RecordState.ACQUIRED and r.member_id == member_id]
        for o in held:
            self._release(o, self.records[o])
        self._advance_start()
        return len(held)

    def tick(self, now_ms: int) -> int:
        """Acquisition locks that ran out: their records are available again (or archived at the limit)."""
        if now_ms < self._next_lock_deadline_ms:
            return 0
        held = [(o, r) for o, r in self.records.items() if r.state == RecordState.ACQUIRED]
        expired = [o for o, r in held if r.lock_deadline_ms <= now_ms]
        self._next_lock_deadline_ms = min(
            (r.lock_deadline_ms for _, r in held if r.lock_deadline_ms > now_ms), default=1 << 62
        )
        for o in expired:
            self._release(o, self.records[o])
        self._advance_start()
        return len(expired)

    def _release(self, offset: int, r: InFlight) -> None:
        if r.delivery_count >= self.delivery_count_limit:
            self._done(offset, RecordState.ARCHIVED)
            return
        r.state = RecordState.AVAILABLE
        r.member_id = None
        r.lock_deadline_ms = 0
        self.dirty = True

    def _done(self, offset: int, state: RecordState) -> None:
        r = self.records[offset]
        r.state = state
        r.member_id = None
        self.dirty = True

    def _advance_start(self) -> None:
        o = self.start_offset
        while o < self.end_offset:
            r = self.records.get(o)
            if r is not None and r.state not in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED):
                break
            self.records.pop(o, None)
            o += 1
        if o != self.start_offset:
            self.start_offset = o
            self.dirty = True

    def reset_start(self, offset: int) -> None:
        """The log's start moved past the SPSO (retention, DeleteRecords): the records below it are gone."""
        if offset <= self.start_offset:
            return
        for o in [o for o in self.records if o < offset]:
            del self.records[o]
        self.start_offset = offset
        self.end_offset = max(self.end_offset, offset)
        self.dirty = True

    # --- what is durable ---------------------------------------------------------------------

    def snapshot(self) -> tuple[int, list[StateBatch]]:
        """SPSO and the in-flight records' states as runs; an acquired record is written as Available with its
        delivery count (a lock does not survive its leader)."""
        self.dirty = False
        batches: list[StateBatch] = []
        first = last = -2  # the run being built: one StateBatch per run, not one per record
        run_state = run_count = 0
        for o in sorted(self.records):
            r = self.records[o]
            state = RecordState.AVAILABLE if r.state == RecordState.ACQUIRED else r.state
            if o == last + 1 and state == run_state and r.delivery_count == run_count:
                last = o
                continue
            if first >= 0:
                batches.append(StateBatch(first, last, run_state, run_count))
            first = last = o
            run_state, run_count = state, r.delivery_count
        if first >= 0:
            batches.append(StateBatch(first, last, run_state, run_count))
        return self.start_offset, batches

    def restore(self, start_offset: int, batches: list[StateBatch]) -> None:
        self.start_offset = start_offset
        self.records = {}
        end = start_offset
        for b in batches:
            for o in range(max(b.first_offset, start_offset), b.last_offset + 1):
                state = RecordState(b.delivery_state)
                if state == RecordState.ACQUIRED:
                    state = RecordState.AVAILABLE
                self.records[o] = InFlight(state, b.delivery_count)
                end = max(end, o + 1)
        self.end_offset = end
        self.dirty = False
        self._advance_start()

    def acquired_count(self) -> int:
        return sum(1 for r in self.records.values() if r.state == RecordState.ACQUIRED)


def _runs(offsets: list[int], counts: dict[int, int]) -> list[Acquired]:
    """Consecutive offsets of one delivery count as one AcquiredRecords entry."""
    runs: list[list[int]] = []  # [first, last, delivery count]: one Acquired per run, not one per record
    for o in offsets:
        if runs and runs[-1][1] == o - 1 and runs[-1][2] == counts[o]:
            runs[-1][1] = o
        else:
            runs.append([o, o, counts[o]])
    return [Acquired(a, b, n) for a, b, n in runs]
