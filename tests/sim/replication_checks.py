"""The invariants tests/sim/replication_sim.py checks after every step, on its reading of the real logs.

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
    electing any ISR member safe, so it must hold at every instant, not only at elections. Under quorum
    commit (replica.quorum.commit.enable) it may hold instead for a quorum of the replicas (LeaderState's
    quorum_size): silent ISR members may lack what the HW passed, and a new leader recovers from enough
    replicas to meet every quorum; (b)'s takeover check then runs when it has recovered.
(d) No replica stores an idempotent producer's (producer id, sequence) twice (ReplicaView.sync).
(e) The latest offset never goes back as a client sees it (KIP-207). After every step, every broker holding a
    LeaderState is asked what it answers to ListOffsets latest from a client that knows its leader epoch
    (Partition.latest_offset, the broker's own rule; OFFSET_NOT_AVAILABLE is no answer). An answer of leader
    epoch E is never below an answer given earlier in E (the exposed HW never decreases within an epoch,
    across restarts of its leader too), nor below any answer given earlier in an epoch before E (a client
    whose leader epoch only grows, KIP-320, never sees the latest offset go back across leader changes).
    Together with (b)'s HW <= log end on every replica at every step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from net import batch as batch_fmt
from tests.sim.engine import SimFailure

if TYPE_CHECKING:
    from broker.log.log import Log

Entry = tuple[int, Any]  # (leader epoch, value)


class ReplicaView:
    """The checker's reading of one replica's real log (broker/log/log.py, on the simulation's disk).

    `sync` decodes whatever the log gained since the last call and notices truncation; the simulator
    calls it after everything that may change the log. Two invariants are checked as it reads: no
    (producer id, sequence) is stored twice (an idempotent retry appended again), and the log is never cut
    below the high watermark its current incarnation showed. The two cursors belong to the checker:
    `agree` is how much of the log is known to equal the committed prefix (a truncation below it lowers
    it), `protected` is the HW the current incarnation showed.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.log: Log | None = None
        self.entries: list[Entry] = []
        self.ids: dict[tuple[int, int], int] = {}  # (producer id, sequence) -> offset
        self._id_at: dict[int, tuple[int, int]] = {}
        self.agree = 0
        self.protected = 0

    @property
    def log_end_offset(self) -> int:
        return len(self.entries)

    def attach(self, log: Log) -> None:
        """A (re)opened log: read it again from its files (recovery may have changed its tail)."""
        self.log = log
        self.entries, self.ids, self._id_at, self.agree = [], {}, {}, 0
        self.sync()

    def sync(self) -> None:
        lg = self.log
        if lg is None:
            return
        end = lg.log_end_offset
        if end < len(self.entries):
            if end < self.protected:
                raise SimFailure(
                    f"{self.name}: truncated to {end}, below the high watermark {self.protected} it showed"
                )
            for off in range(end, len(self.entries)):
                key = self._id_at.pop(off, None)
                if key is not None:
                    del self.ids[key]
            del self.entries[end:]
            self.agree = min(self.agree, end)
        offset = len(self.entries)
        while offset < end:
            data = lg.read(offset, 1 << 20)
            if not data:
                raise SimFailure(f"{self.name}: nothing readable at offset {offset} below the log end {end}")
            for pos, h in batch_fmt.iter_batches(data):
                for rec in batch_fmt.records_of(data, pos, h):
                    at = h.base_offset + rec[0]
                    if at < offset:
                        continue
                    if at != len(self.entries):
                        raise SimFailure(f"{self.name}: offset {at} follows {len(self.entries) - 1}")
                    self.entries.append((h.leader_epoch, rec[3].decode()))
                    if h.producer_id >= 0:
                        key = (h.producer_id, h.base_sequence + rec[0])
                        if key in self.ids:
                            raise SimFailure(
                                f"{self.name}: producer {key[0]} sequence {key[1]} stored twice, at offsets "
                                f"{self.ids[key]} and {at}"
                            )
                        self.ids[key] = at
                        self._id_at[at] = key
                offset = h.next_offset


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
        # (e): per partition, leader epoch -> the highest ListOffsets latest answered in it, and by whom
        self.latest: dict[int, dict[int, tuple[int, int]]] = {p: {} for p in range(partitions)}

    def restarted(self, broker: int, logs: dict[int, ReplicaView]) -> None:
        for p, lg in logs.items():
            self.hw.pop((broker, p), None)
            lg.protected = 0

    def _agree(self, p: int, lg: ReplicaView) -> int:
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

    def check_replica(self, broker: int, p: int, epoch: int, lg: ReplicaView, hw: int) -> None:
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

    def check_takeover(self, broker: int, p: int, epoch: int, lg: ReplicaView) -> None:
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

    # --- (e) ---

    def check_latest(self, p: int, broker: int, epoch: int, offset: int) -> None:
        """Broker `broker`, leader of `epoch`, answered `offset` to ListOffsets latest."""
        answers = self.latest[p]
        same = answers.get(epoch)
        if same is not None and offset < same[0]:
            raise SimFailure(
                f"partition {p}: the latest offset went back within leader epoch {epoch}: broker {same[1]} "
                f"answered {same[0]}, then broker {broker} answered {offset}"
            )
        earlier = [(off, e, b) for e, (off, b) in answers.items() if e < epoch and off > offset]
        if earlier:
            off, e, b = max(earlier)
            raise SimFailure(
                f"partition {p}: the latest offset went back across a leader change: broker {b} answered {off} "
                f"in leader epoch {e}, then broker {broker} answered {offset} in leader epoch {epoch} (KIP-207)"
            )
        if same is None or offset > same[0]:
            answers[epoch] = (offset, broker)

    # --- (c) ---

    def check_isr(
        self,
        p: int,
        leader: int,
        epoch: int,
        hw: int,
        isr: list[int],
        logs: dict[int, ReplicaView],
        quorum: int | None = None,
    ) -> None:
        """(c). `quorum` (replica.quorum.commit.enable): it is enough that `quorum` of the replicas in `logs` (all
        of them, not only the ISR's) agree up to the HW: the leader's HW may pass silent ISR members then."""
        holders = [r for r, lg in logs.items() if self._agree(p, lg) >= hw]
        if quorum is not None and len(holders) >= quorum:
            return
        for r in isr:
            lg = logs.get(r)
            a = self._agree(p, lg) if lg is not None else 0
            if a < hw:
                have = "a shorter log" if lg is None or a >= lg.log_end_offset else f"{lg.entries[a]}"
                also = f" (a quorum is {quorum}; only {holders} hold it)" if quorum is not None else ""
                raise SimFailure(
                    f"partition {p}: ISR member {r} disagrees with leader {leader} (epoch {epoch}) below the HW "
                    f"{hw}: offset {a} is {self.committed[p][a] if a < len(self.committed[p]) else '?'} on the "
                    f"leader, {have} on {r}{also}"
                )

    def check_final(self, logs: dict[int, ReplicaView]) -> None:
        """After the liveness phase: every acknowledged value is in the log of its partition's leader."""
        for p, offset, epoch, value in self.acked:
            lg = logs.get(p)
            if lg is None or offset >= lg.log_end_offset or lg.entries[offset] != (epoch, value):
                raise SimFailure(f"acknowledged {value!r} (partition {p} offset {offset}) is gone from the leader")
