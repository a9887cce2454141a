"""Scripted fault scenarios on a whole quorum: a fixed sequence instead of random schedules."""

from __future__ import annotations

import random

from election import InMemoryLog, NotControllerError, Persist, QuorumConfig, QuorumNode, Role, Send, Truncated

CFG = QuorumConfig()


class Cluster:
    """Instant, ordered delivery between live nodes in the same partition group; time moves in 10 ms ticks."""

    def __init__(self, n: int) -> None:
        self.voters = list(range(1, n + 1))
        self.logs = {v: InMemoryLog() for v in self.voters}
        self.persisted: dict[int, tuple[int, int | None]] = {v: (0, None) for v in self.voters}
        self.now = 0
        self.nodes = {v: self._boot(v) for v in self.voters}
        self.group = {v: 0 for v in self.voters}
        self.truncations: list[tuple[int, int]] = []

    def _boot(self, v: int) -> QuorumNode:
        return QuorumNode(v, self.voters, self.logs[v], CFG, self.persisted[v], self.now, random.Random(v))

    def crash_and_restart(self, v: int) -> None:
        self.nodes[v] = self._boot(v)

    def _run(self, src: int, outs: list) -> None:
        queue = [(src, o) for o in outs]
        while queue:
            s, o = queue.pop(0)
            if isinstance(o, Persist):
                self.persisted[s] = (o.epoch, o.voted_for)
            elif isinstance(o, Truncated):
                self.truncations.append((s, o.offset))
            elif isinstance(o, Send) and self.group[s] == self.group[o.to]:
                queue.extend((o.to, x) for x in self.nodes[o.to].receive(o.msg, self.now))

    def advance(self, ms: int) -> None:
        end = self.now + ms
        while self.now < end:
            self.now += 10
            for v in self.voters:
                self._run(v, self.nodes[v].tick(self.now))

    def controllers(self) -> list[int]:
        return [v for v, n in self.nodes.items() if n.role is Role.CONTROLLER]

    def propose(self, v: int, record: dict) -> None:
        _, outs = self.nodes[v].propose([record], self.now)
        self._run(v, outs)


def test_partitioned_controller_stops_and_its_uncommitted_tail_is_replaced():
    c = Cluster(5)
    c.advance(4000)
    [old] = c.controllers()
    old_epoch = c.nodes[old].epoch
    c.propose(old, {"k": "committed"})
    c.advance(200)
    committed = c.nodes[old].high_watermark
    assert all(n.high_watermark == committed for n in c.nodes.values())
    # Cut the controller off; it keeps accepting proposals for a while but cannot commit them.
    c.group = {v: int(v == old) for v in c.voters}
    for i in range(3):
        c.propose(old, {"k": f"lost-{i}"})
    c.advance(CFG.election_timeout_ms + CFG.fetch_interval_ms)
    assert c.nodes[old].role is not Role.CONTROLLER  # check-quorum
    c.advance(3000)
    [new] = c.controllers()
    assert new != old and c.nodes[new].epoch > old_epoch
    try:
        c.propose(old, {"k": "refused"})
        raise AssertionError("a deposed controller accepted a proposal")
    except NotControllerError:
        pass
    c.propose(new, {"k": "after"})
    c.advance(200)
    # Heal: the old controller learns the new epoch, truncates its tail, catches up.
    c.group = {v: 0 for v in c.voters}
    c.advance(6000)
    [ctrl] = c.controllers()
    assert all(n.high_watermark == c.nodes[ctrl].high_watermark for n in c.nodes.values())
    records = [r for _, _, r in c.logs[old].read(0, 1000)]
    assert {"k": "committed"} in records and {"k": "after"} in records
    assert not any(r.get("k", "").startswith("lost") for r in records)
    assert any(v == old for v, _ in c.truncations)
    assert all(off >= committed for _, off in c.truncations)  # never below what was committed


def test_minority_cannot_elect_and_majority_restart_recovers():
    c = Cluster(3)
    c.advance(4000)
    [ctrl] = c.controllers()
    others = [v for v in c.voters if v != ctrl]
    # Lose a majority: the survivor cannot keep or win the controllership.
    c.group = {v: (0 if v == ctrl else 1 + i) for i, v in enumerate(c.voters)}
    c.advance(10_000)
    assert c.controllers() == []
    stuck_epoch = c.nodes[ctrl].epoch
    # Restart the cut-off nodes from what they persisted, heal: an election succeeds, nothing committed is lost.
    for v in others:
        c.crash_and_restart(v)
    c.group = {v: 0 for v in c.voters}
    c.advance(10_000)
    [new] = c.controllers()
    assert c.nodes[new].epoch >= stuck_epoch
    c.propose(new, {"k": "x"})
    c.advance(300)
    assert all(n.high_watermark == c.logs[new].end_offset for n in c.nodes.values())
