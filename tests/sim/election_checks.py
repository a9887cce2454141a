"""The invariants the simulator checks after every step (see tests/sim/election_sim.py for when and how).

(a) At most one controller per epoch, ever: the first (node, incarnation) seen as controller of an
    epoch owns it; any other node, or the same node after a restart, is a failure.
(b) The committed prefix is one sequence: for every node, the records below its high watermark are
    compared with a global list of committed (epoch, record) pairs, which only grows. A node may
    never truncate below what it already showed as committed, and a controller of epoch E must hold
    every record committed in an epoch < E (leader completeness, which is what (b) rests on).
(c) High watermarks never decrease within one incarnation of a node. The high watermark is not
    persisted, so a restarted node starts again from 0 and relearns it from the controller; its
    durable log keeps the committed records and (b) applies to them again as its watermark climbs.
    Every Committed output is strictly above the previous one of that incarnation.
(d) Liveness is checked by the simulator itself: after the last fault heals, a proposal must commit
    within a bounded virtual time.
"""

from __future__ import annotations

from typing import Any

from election.log import InMemoryLog
from election.quorum import QuorumNode, Role
from tests.sim.engine import SimFailure


class WatchedLog(InMemoryLog):
    """An InMemoryLog that reports truncations below what the checker verified as committed."""

    def __init__(self) -> None:
        super().__init__()
        self.protected = 0  # offsets below this were shown committed by the current incarnation
        self.violation: str | None = None

    def truncate_to(self, offset: int) -> None:
        if offset < self.protected and offset < self.end_offset and self.violation is None:
            self.violation = f"truncated to {offset} below its verified committed offset {self.protected}"
        super().truncate_to(offset)


class Checker:
    def __init__(self) -> None:
        self.owners: dict[int, tuple[int, int]] = {}  # epoch -> (node, incarnation) of its controller
        # Committed records: (epoch, record, epoch of the controller that first showed it committed).
        self.committed: list[tuple[int, Any, int]] = []
        self.hw: dict[int, int] = {}  # node -> last high watermark seen in its current incarnation
        self.committed_out: dict[int, int] = {}  # node -> last Committed output of its current incarnation
        self.completeness_ptr: dict[int, tuple[int, int]] = {}  # controller node -> (epoch, offset checked)

    def restarted(self, node_id: int, log: WatchedLog) -> None:
        self.hw[node_id] = 0
        self.committed_out[node_id] = 0
        log.protected = 0
        self.completeness_ptr.pop(node_id, None)

    def on_committed_output(self, node_id: int, hw: int) -> None:
        prev = self.committed_out.get(node_id, 0)
        if hw <= prev:
            raise SimFailure(f"node {node_id}: Committed({hw}) after Committed({prev})")
        self.committed_out[node_id] = hw

    def on_truncated_output(self, node_id: int, offset: int) -> None:
        if offset < self.committed_out.get(node_id, 0):
            raise SimFailure(f"node {node_id}: Truncated({offset}) below its Committed({self.committed_out[node_id]})")

    def check_node(self, node: QuorumNode, incarnation: int) -> None:
        nid = node.id
        log = node.log
        assert isinstance(log, WatchedLog)
        if log.violation is not None:
            raise SimFailure(f"node {nid}: {log.violation}")
        # (a)
        if node.role is Role.CONTROLLER:
            owner = self.owners.setdefault(node.epoch, (nid, incarnation))
            if owner != (nid, incarnation):
                raise SimFailure(
                    f"two controllers in epoch {node.epoch}: node {owner[0]} (incarnation {owner[1]}) "
                    f"and node {nid} (incarnation {incarnation})"
                )
        # (c)
        hw = node.high_watermark
        if hw < self.hw.get(nid, 0):
            raise SimFailure(f"node {nid}: high watermark went down from {self.hw[nid]} to {hw}")
        self.hw[nid] = hw
        if hw > log.end_offset:
            raise SimFailure(f"node {nid}: high watermark {hw} above its log end {log.end_offset}")
        # (b)
        if hw > log.protected:
            self._verify_prefix(node, log.protected, hw)
            log.protected = hw

    def _verify_prefix(self, node: QuorumNode, start: int, end: int) -> None:
        committed = self.committed
        for offset, epoch, record in node.log.read(start, end - start):
            if offset < len(committed):
                c_epoch, c_record, _ = committed[offset]
                if (c_epoch, c_record) != (epoch, record):
                    raise SimFailure(
                        f"node {node.id}: committed offset {offset} is (epoch {epoch}, {record}) but was "
                        f"(epoch {c_epoch}, {c_record})"
                    )
            elif offset == len(committed):
                committed.append((epoch, record, node.epoch))
            else:
                raise SimFailure(f"committed prefix has a gap at {len(committed)}")

    def check_controller_completeness(self, node: QuorumNode) -> None:
        """Every record committed in an epoch before the controller's must be in its log."""
        if node.role is not Role.CONTROLLER:
            self.completeness_ptr.pop(node.id, None)
            return
        epoch, start = self.completeness_ptr.get(node.id, (node.epoch, 0))
        if epoch != node.epoch:
            start = 0
        end = len(self.committed)
        if start >= end:
            self.completeness_ptr[node.id] = (node.epoch, end)
            return
        entries = node.log.read(start, end - start)
        for offset in range(start, end):
            c_epoch, c_record, c_in = self.committed[offset]
            if c_in >= node.epoch:
                continue
            i = offset - start
            if i >= len(entries) or (entries[i][1], entries[i][2]) != (c_epoch, c_record):
                raise SimFailure(
                    f"controller {node.id} of epoch {node.epoch} lacks offset {offset} committed in epoch {c_in}"
                )
        self.completeness_ptr[node.id] = (node.epoch, end)
