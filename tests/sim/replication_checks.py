"""The invariants tests/sim/replication_sim.py checks after every step, and the in-memory partition log.

(a) At most one leader per partition per leader epoch, ever: the first broker seen holding a
    LeaderState of epoch E owns E (a restart of that broker may resume it: the epoch is the
    controller's, not the process's), and it must be the broker the controller's committed records
    name for E.
(b) The committed prefix: one global list of committed (epoch, value) per partition, which only
    grows. It is extended by whichever broker first shows a higher high watermark (HW); every broker's
    log below its own HW must equal it; a broker never truncates below the HW its current incarnation
    showed (the HW is volatile: a restarted broker starts again from 0); the HW never goes down within
    an incarnation; a broker that takes over as leader of epoch E must hold every offset committed
    while in an epoch below E (clean elections only; a broker whose stale view makes it leader of an
    old epoch cannot commit anything, so it need not hold what later epochs committed); every value
    acknowledged with acks=all is in the prefix at the offset and epoch it was appended with, at the
    moment of the acknowledgement, and after the liveness phase in its partition leader's log.
(c) ISR members agree up to the HW: while the leader the controller names holds a LeaderState of the
    controller's current leader epoch, every member of the controller's ISR holds at least HW records
    and its log below HW equals the leader's (which by (b) is the committed prefix). This is what makes
    electing any ISR member safe, so it must hold at every instant, not only at elections.
"""

from __future__ import annotations

from typing import Any

from broker.log.epoch import LeaderEpochFileCache

Entry = tuple[int, Any]  # (leader epoch, value)


class SimFailure(AssertionError):
    pass


class _MemoryEpochCache(LeaderEpochFileCache):
    """The production epoch cache (KIP-101 end_offset_for_epoch, assign, truncation) without its file.

    The checkpoint file is rewritten on every change, so a crash never finds it behind the log: keeping
    it in memory across simulated crashes is the same thing.
    """

    def __init__(self) -> None:  # the parent's __init__ would read a checkpoint file
        self._epochs: list[int] = []
        self._offsets: list[int] = []

    def _flush(self) -> None:
        pass


class SimLog:
    """One replica's log of one partition: (leader_epoch, value) per offset, plus its epoch cache.

    It survives crashes (a crash kills the process; the page cache keeps what was written). The two
    cursors belong to the checker: `agree` is how much of the log is known to equal the committed
    prefix (a truncation below it lowers it), `protected` is the HW the current incarnation showed.
    """

    log_start_offset = 0  # no retention in the simulator

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.epochs = _MemoryEpochCache()
        self.agree = 0
        self.protected = 0
        self.violation: str | None = None

    @property
    def log_end_offset(self) -> int:
        return len(self.entries)

    @property
    def latest_epoch(self) -> int:
        return self.epochs.latest_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.epochs.end_offset_for_epoch(epoch, len(self.entries))

    def append_as_leader(self, value: Any, leader_epoch: int) -> int:
        offset = len(self.entries)
        self.entries.append((leader_epoch, value))
        self.epochs.assign(leader_epoch, offset)
        return offset

    def append_as_follower(self, first_offset: int, records: tuple[Entry, ...]) -> None:
        if first_offset != len(self.entries):
            # Log.append_as_follower raises UnexpectedAppendOffsetError; the fetcher's one request in
            # flight and its epoch checks are meant to make that impossible.
            raise SimFailure(f"follower append at offset {first_offset}, log end is {len(self.entries)}")
        for i, (epoch, value) in enumerate(records):
            self.entries.append((epoch, value))
            self.epochs.assign(epoch, first_offset + i)

    def truncate_to(self, offset: int) -> bool:
        if offset >= len(self.entries):
            return False
        if offset < self.protected and self.violation is None:
            self.violation = f"truncated to {offset}, below the high watermark {self.protected} it showed"
        del self.entries[offset:]
        self.epochs.truncate_from_end(offset)
        self.agree = min(self.agree, offset)
        return True

    def read(self, offset: int, max_records: int) -> tuple[Entry, ...]:
        return tuple(self.entries[offset : offset + max_records])


class Checker:
    def __init__(self, partitions: int) -> None:
        self.committed: dict[int, list[Entry]] = {p: [] for p in range(partitions)}
        # The leader epoch of the view that first showed each committed offset: a leader of epoch E must
        # hold what was committed before E, not what a later leader committed (a stale view of an old
        # epoch may still create a LeaderState; it just cannot commit anything).
        self.committed_in: dict[int, list[int]] = {p: [] for p in range(partitions)}
        self.owners: dict[tuple[int, int], int] = {}  # (partition, leader epoch) -> broker that acted as leader
        self.hw: dict[tuple[int, int], int] = {}  # (broker, partition) -> HW seen in its current incarnation
        self.acked: list[tuple[int, int, int, Any]] = []  # (partition, offset, epoch, value)

    def restarted(self, broker: int, logs: dict[int, SimLog]) -> None:
        for p, lg in logs.items():
            self.hw.pop((broker, p), None)
            lg.protected = 0

    def _agree(self, p: int, lg: SimLog) -> int:
        """Advance lg.agree as far as its entries equal the committed prefix; returns it."""
        c, e, a = self.committed[p], lg.entries, lg.agree
        n = min(len(e), len(c))
        while a < n and e[a] == c[a]:
            a += 1
        lg.agree = a
        return a

    # --- (a) ---

    def check_leader(self, p: int, broker: int, epoch: int, assigned: int | None) -> None:
        owner = self.owners.setdefault((p, epoch), broker)
        if owner != broker:
            raise SimFailure(f"partition {p}: brokers {owner} and {broker} both lead leader epoch {epoch}")
        if assigned != broker:
            raise SimFailure(f"partition {p}: broker {broker} leads epoch {epoch}, the controller chose {assigned}")

    # --- (b) ---

    def check_replica(self, broker: int, p: int, epoch: int, lg: SimLog, hw: int) -> None:
        if lg.violation is not None:
            raise SimFailure(f"broker {broker} partition {p}: {lg.violation}")
        if hw > lg.log_end_offset:
            raise SimFailure(f"broker {broker} partition {p}: HW {hw} above its log end {lg.log_end_offset}")
        prev = self.hw.get((broker, p), 0)
        if hw < prev:
            raise SimFailure(f"broker {broker} partition {p}: HW went down from {prev} to {hw}")
        self.hw[(broker, p)] = hw
        if hw <= lg.protected:
            return
        c = self.committed[p]
        a = self._agree(p, lg)
        if a < min(hw, len(c)):
            raise SimFailure(
                f"broker {broker} partition {p}: offset {a} below its HW {hw} is {lg.entries[a]}, "
                f"but {c[a]} was committed"
            )
        if hw > len(c):
            self.committed_in[p].extend([epoch] * (hw - len(c)))
            c.extend(lg.entries[len(c) : hw])
            lg.agree = hw
        lg.protected = hw

    def check_takeover(self, broker: int, p: int, epoch: int, lg: SimLog) -> None:
        c = self.committed[p]
        a = self._agree(p, lg)
        need = max((i + 1 for i, e in enumerate(self.committed_in[p]) if e < epoch), default=0)
        if a < need:
            got = lg.entries[a] if a < len(lg.entries) else "nothing"
            raise SimFailure(
                f"broker {broker} took over partition {p} in leader epoch {epoch} without committed offset {a} "
                f"({c[a]}; it has {got})"
            )

    def check_ack(self, broker: int, p: int, offset: int, epoch: int, value: Any) -> None:
        c = self.committed[p]
        if offset >= len(c) or c[offset] != (epoch, value):
            have = c[offset] if offset < len(c) else "nothing committed there"
            raise SimFailure(
                f"broker {broker} acknowledged {value!r} at partition {p} offset {offset} (epoch {epoch}), "
                f"committed prefix has {have}"
            )
        self.acked.append((p, offset, epoch, value))

    # --- (c) ---

    def check_isr(self, p: int, leader: int, epoch: int, hw: int, isr: list[int], logs: dict[int, SimLog]) -> None:
        for r in isr:
            lg = logs.get(r)
            a = self._agree(p, lg) if lg is not None else 0
            if a < hw:
                have = "a shorter log" if lg is None or a >= lg.log_end_offset else f"{lg.entries[a]}"
                raise SimFailure(
                    f"partition {p}: ISR member {r} disagrees with leader {leader} (epoch {epoch}) below the HW "
                    f"{hw}: offset {a} is {self.committed[p][a] if a < len(self.committed[p]) else '?'} on the "
                    f"leader, {have} on {r}"
                )

    def check_final(self, logs: dict[int, SimLog]) -> None:
        """After the liveness phase: every acknowledged value is in the log of its partition's leader."""
        for p, offset, epoch, value in self.acked:
            lg = logs.get(p)
            if lg is None or offset >= lg.log_end_offset or lg.entries[offset] != (epoch, value):
                raise SimFailure(f"acknowledged {value!r} (partition {p} offset {offset}) is gone from the leader")
