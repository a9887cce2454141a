"""A seeded, deterministic simulator of the controller quorum.

One `random.Random(seed)` drives everything: the network (random delay, loss, duplication and so
reordering, rare very late deliveries), crashes and restarts (including a crash part-way through the
outputs of one call: outputs before the crash point were executed, the rest never were), random
partitions and heals, clients proposing records to whoever is controller, and the driver's PeerClosed
hint: a crashed node's peers may learn at once that its process is gone (its sockets closed, a reconnect
refused), while a partition never tells anyone; a few wrong hints about live nodes are thrown in, since
the hint must not be needed for safety. Persist outputs are
the only durable node state besides the log, which is durable on append (the MetadataLog contract).

A schedule has two phases. The fault phase runs `steps` steps (one event each: a delivery, a timer,
a fault, a client proposal). Then every fault heals at once (all nodes up, one partition, no loss; delay,
reordering and duplication stay) and the liveness phase runs until a marker proposal commits, which
must happen within a bound of the heal: 20 x (election timeout + jitter + evaluation timeout) for
elections, plus one fetch round trip per `fetch_max_records` records of the longest log, since a
cut-off controller may have appended many records that every follower must first fetch. Like any
timeout-based election, liveness needs messages to be faster than the timeouts, so after the heal
one-way delays are capped at a quarter of the evaluation timeout (and a tenth of the election
timeout); the fault phase, where only safety is checked, has no such cap. The invariants of
tests/sim/election_checks.py are checked after every step; a failure names the seed and the step, and
`run_schedule(seed, ...)` replays it exactly.

    python -m tests.sim.election_sim --seeds 1000 --nodes 5
    python -m tests.sim.election_sim --replay 1234 --nodes 5 --trace
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from election.config import QuorumConfig
from election.messages import BecameController, Committed, Output, PeerClosed, Persist, Send, Truncated, from_wire
from election.quorum import InvariantError, NotControllerError, QuorumNode, Role
from tests.sim.election_checks import Checker, SimFailure, WatchedLog
from tests.sim.engine import DELIVER, EventLoop

_WAKE, _FAULT, _CLIENT, _RESTART, _CLOSED = range(DELIVER + 1, DELIVER + 6)


@dataclass(frozen=True, slots=True)
class SimParams:
    """Everything about a schedule that is drawn from its seed."""

    config: QuorumConfig
    min_delay_ms: int
    max_delay_ms: int
    late_p: float  # probability that a message is delayed by up to 3 election timeouts
    loss_p: float
    dup_p: float
    fault_mean_ms: float
    client_mean_ms: float
    mid_call_crash_p: float  # probability that a node crashes part-way through one call's outputs
    # Crashes at the moments that make logs diverge: right after winning, right after committing.
    crash_elected_p: float
    crash_committed_p: float
    liveness_bound_ms: int
    # PeerClosed: the chance that a crash is reported to each peer that can reach the crashed node (as a
    # closed connection and a refused reconnect), and the chance per fault event of a wrong report about
    # a live node (safety must not depend on the hint being right).
    closed_p: float = 0.0
    false_closed_p: float = 0.0

    @classmethod
    def draw(cls, rng: random.Random) -> SimParams:
        if rng.random() < 0.25:
            # The production defaults: 2 s failure detection, 50 ms fetches.
            config = QuorumConfig(fetch_max_records=rng.choice([1, 3, 1000]))
        else:
            # Same shape, compressed in time so that a few hundred steps see several elections.
            config = QuorumConfig(
                election_timeout_ms=300,
                election_jitter_ms=rng.choice([0, 20, 150]),
                state_collection_ms=rng.choice([10, 40, 80]),
                evaluation_timeout_ms=rng.choice([100, 200]),
                fetch_interval_ms=rng.choice([20, 40]),
                fetch_max_wait_ms=rng.choice([0, 30, 100]),  # 0: every fetch answered at once (no long poll)
                fetch_max_records=rng.choice([1, 2, 5, 1000]),
                begin_epoch_resend_ms=60,
            )
        timeout = config.election_timeout_ms
        # Sometimes messages are slower than the step-1 window, so voters collect different states.
        max_delay = rng.choice([2, 10, config.state_collection_ms // 2 + 1, config.state_collection_ms * 2])
        return cls(
            config=config,
            min_delay_ms=1,
            max_delay_ms=max_delay,
            late_p=rng.choice([0.0, 0.005, 0.02]),
            loss_p=rng.choice([0.0, 0.02, 0.1, 0.3]),
            dup_p=rng.choice([0.0, 0.05, 0.2]),
            fault_mean_ms=timeout * rng.choice([0.3, 1.0, 3.0]),
            client_mean_ms=config.fetch_interval_ms * rng.choice([1, 5, 20]),
            mid_call_crash_p=rng.choice([0.0, 0.01, 0.05]),
            crash_elected_p=rng.choice([0.0, 0.1, 0.3]),
            crash_committed_p=rng.choice([0.0, 0.02, 0.1]),
            # Generous: every node may have to time out, and a few elections may split before one wins.
            liveness_bound_ms=20 * (timeout + config.election_jitter_ms + config.evaluation_timeout_ms),
            closed_p=rng.choice([0.0, 0.5, 1.0]),
            false_closed_p=rng.choice([0.0, 0.0, 0.1]),
        )


@dataclass
class Result:
    seed: int
    nodes: int
    steps: int
    ok: bool
    failure: str | None = None
    failed_step: int | None = None
    virtual_ms: int = 0
    max_epoch: int = 0
    controllers: int = 0  # epochs that had a controller
    committed: int = 0  # length of the committed prefix at the end
    proposals: int = 0
    crashes: int = 0
    messages: int = 0
    liveness_ms: int | None = None  # from the heal to the marker's commit
    trace: list[str] = field(default_factory=list)


@dataclass
class _SimNode:
    id: int
    log: WatchedLog
    persisted: tuple[int, int | None] = (0, None)
    node: QuorumNode | None = None
    incarnation: int = 0
    pending_wakes: set[int] = field(default_factory=set)


class Simulation(EventLoop):
    def __init__(self, seed: int, nodes: int, params: SimParams | None = None, trace: bool = False) -> None:
        super().__init__(seed)
        self.params = params or SimParams.draw(self.rng)
        self.voters = list(range(1, nodes + 1))
        self.group = {n: 0 for n in self.voters}  # nodes in different groups cannot talk
        p = self.params
        self.loss_p, self.dup_p, self.late_p = p.loss_p, p.dup_p, p.late_p
        self.min_delay_ms, self.max_delay = p.min_delay_ms, p.max_delay_ms
        self.late_max_ms = 3 * p.config.election_timeout_ms
        self.mid_call_crash_p = self.params.mid_call_crash_p
        self.checker = Checker()
        self.nodes = {n: _SimNode(n, WatchedLog()) for n in self.voters}
        self.result = Result(seed, nodes, 0, ok=True)
        self.tracing = trace
        self.trace_lines = self.result.trace
        self.faults_on = True
        self.marker: dict[str, Any] | None = None
        self.marker_sent_to: tuple[int, int] | None = None
        for sn in self.nodes.values():
            self._boot(sn)

    # --- plumbing ------------------------------------------------------------------------------------

    def _boot(self, sn: _SimNode) -> None:
        sn.incarnation += 1
        rng = random.Random(self.seed * 1_000_003 + sn.id * 10_007 + sn.incarnation)
        sn.node = QuorumNode(sn.id, self.voters, sn.log, self.params.config, sn.persisted, self.now, rng)
        sn.node.leaderships = self.rng.randint(0, 2)
        sn.pending_wakes = set()
        self.checker.restarted(sn.id, sn.log)
        self._schedule_wake(sn)

    def _schedule_wake(self, sn: _SimNode) -> None:
        if sn.node is None:
            return
        at = max(sn.node.next_deadline_ms(), self.now + 1)
        if at not in sn.pending_wakes:
            sn.pending_wakes.add(at)
            self._push(at, _WAKE, sn.id, sn.incarnation)

    def _crash(self, sn: _SimNode) -> None:
        self._trace(f"crash node {sn.id}")
        sn.node = None
        self.result.crashes += 1
        if self.params.closed_p:
            # The dead process's sockets close; a peer that can reach its address finds nothing listening.
            for other in self.nodes.values():
                if (
                    other.node is not None
                    and self.group[other.id] == self.group[sn.id]
                    and self.rng.random() < self.params.closed_p
                ):
                    at = self.now + self.rng.randint(self.params.min_delay_ms, self.max_delay)
                    self._push(at, _CLOSED, other.id, (sn.id, sn.incarnation))
        if self.faults_on:
            downtime = self.rng.randint(1, 3 * self.params.config.election_timeout_ms)
            self._push(self.now + downtime, _RESTART, sn.id)

    def _crash_point(self, sn: _SimNode, outs: list[Output]) -> int | None:
        """None, or how many of `outs` are executed before the node crashes."""
        if not outs or not self.faults_on:
            return None
        p, rng = self.params, self.rng
        if self.mid_call_crash_p and rng.random() < self.mid_call_crash_p:
            return rng.randrange(len(outs))
        if p.crash_elected_p and any(isinstance(o, BecameController) for o in outs):
            return rng.randint(0, len(outs)) if rng.random() < p.crash_elected_p else None
        node = sn.node
        if p.crash_committed_p and node is not None and node.role is Role.CONTROLLER:
            if any(isinstance(o, Committed) for o in outs) and rng.random() < p.crash_committed_p:
                # Committed, but the response that would tell the follower may or may not leave.
                return rng.randint(len(outs) - 1, len(outs))
        return None

    def _execute(self, sn: _SimNode, outs: list[Output]) -> None:
        """Run a call's outputs in order; maybe crash part-way (the rest is then never executed)."""
        crash_at = self._crash_point(sn, outs)
        for o in outs if crash_at is None else outs[:crash_at]:
            if self.tracing and not (isinstance(o, Send) and o.msg.TAG in ("fq", "fr")):
                self._trace(f"node {sn.id} -> {o}")
            if isinstance(o, Send):
                self._send(sn.id, o.to, o.msg)
            elif isinstance(o, Persist):
                epoch, voted = sn.persisted
                if o.epoch < epoch or (o.epoch == epoch and voted is not None and o.voted_for != voted):
                    raise SimFailure(f"node {sn.id}: Persist{(o.epoch, o.voted_for)} over persisted {sn.persisted}")
                sn.persisted = (o.epoch, o.voted_for)
            elif isinstance(o, Committed):
                self.checker.on_committed_output(sn.id, o.high_watermark)
            elif isinstance(o, Truncated):
                self.checker.on_truncated_output(sn.id, o.offset)
            elif isinstance(o, BecameController):
                self.result.controllers += 1
                self._trace(f"node {sn.id} controller of epoch {o.epoch}")
        if crash_at is not None:
            self._crash(sn)
        else:
            self._schedule_wake(sn)

    def _after_call(self, sn: _SimNode, node: QuorumNode, outs: list[Output]) -> None:
        # Check the state the call left before executing outputs: the node's memory is what it is even
        # if the driver dies half-way through the list.
        self.checker.check_node(node, sn.incarnation)
        self.result.max_epoch = max(self.result.max_epoch, node.epoch)
        self._execute(sn, outs)

    def _send(self, src: int, dst: int, msg: Any, dup: bool = True) -> None:
        super()._send(src, dst, msg.to_wire(), dup)

    # --- events --------------------------------------------------------------------------------------

    def _deliver(self, dst: int, payload: tuple[int, list[Any]]) -> None:
        src, wire = payload
        sn = self.nodes[dst]
        if sn.node is None or self.group[src] != self.group[dst]:
            return
        msg = from_wire(wire)
        self.result.messages += 1
        node = sn.node
        self._after_call(sn, node, node.receive(msg, self.now))

    def _wake(self, node_id: int, incarnation: int, at: int) -> None:
        sn = self.nodes[node_id]
        sn.pending_wakes.discard(at)
        if sn.node is None or sn.incarnation != incarnation:
            return
        node = sn.node
        self._after_call(sn, node, node.tick(self.now))

    def _closed(self, dst: int, payload: tuple[int, int | None]) -> None:
        """PeerClosed(peer) to dst; a true report only while peer's process is still the dead one (a
        restarted process listens again, so the reconnect that would report it succeeds)."""
        peer, incarnation = payload
        sn, gone = self.nodes[dst], self.nodes[peer]
        if sn.node is None:
            return
        if incarnation is not None and (gone.node is not None or gone.incarnation != incarnation):
            return
        self._trace(f"node {dst} <- PeerClosed({peer})" + ("" if incarnation is not None else " (wrong)"))
        node = sn.node
        self._after_call(sn, node, node.receive(PeerClosed(peer), self.now))

    def _fault(self) -> None:
        rng = self.rng
        if self.params.false_closed_p and rng.random() < self.params.false_closed_p:
            up = [sn.id for sn in self.nodes.values() if sn.node is not None]
            if len(up) >= 2:
                dst, peer = rng.sample(up, 2)
                self._push(self.now + 1, _CLOSED, dst, (peer, None))
        up = [sn for sn in self.nodes.values() if sn.node is not None]
        ctrls = self._controllers()
        kind = rng.random()
        if kind < 0.15 and up:
            self._crash(rng.choice(up))
        elif kind < 0.3 and ctrls:
            # Deposing controllers right after they appended is what leaves logs divergent.
            self._crash(rng.choice(ctrls))
        elif kind < 0.55:
            if rng.random() < 0.6:
                isolated = rng.choice(ctrls).id if ctrls and rng.random() < 0.6 else rng.choice(self.voters)
                self.group = {n: int(n == isolated) for n in self.voters}
            else:
                self.group = {n: rng.randint(0, 1) for n in self.voters}
            self._trace(f"partition {self.group}")
        elif kind < 0.8:
            self.group = {n: 0 for n in self.voters}
            self._trace("heal partition")
        elif kind < 0.9:
            self.loss_p = rng.choice([0.0, 0.05, 0.3, 0.7])
        elif up:
            rng.choice(up).node.leaderships = rng.randint(0, 3)  # type: ignore[union-attr]
        self._push(self.now + int(rng.expovariate(1 / self.params.fault_mean_ms)) + 1, _FAULT)

    def _controllers(self) -> list[_SimNode]:
        return [sn for sn in self.nodes.values() if sn.node is not None and sn.node.role is Role.CONTROLLER]

    def _client(self) -> None:
        rng = self.rng
        ctrls = self._controllers()
        if self.marker is not None:
            # Liveness phase: propose the marker to the newest controller until it commits.
            if ctrls:
                sn = max(ctrls, key=lambda s: s.node.epoch)  # type: ignore[union-attr]
                node = sn.node
                assert node is not None
                if self.marker_sent_to != (sn.id, node.epoch):
                    self.marker_sent_to = (sn.id, node.epoch)
                    self._propose(sn, [self.marker])
            self._push(self.now + self.params.config.fetch_interval_ms, _CLIENT)
            return
        if ctrls:
            sn = rng.choice(ctrls)
            self._propose(sn, [{"c": self.result.proposals, "i": i} for i in range(rng.randint(1, 3))])
        self._push(self.now + int(rng.expovariate(1 / self.params.client_mean_ms)) + 1, _CLIENT)

    def _propose(self, sn: _SimNode, records: list[dict[str, Any]]) -> None:
        node = sn.node
        assert node is not None
        try:
            _, outs = node.propose(records, self.now)
        except NotControllerError:
            return
        self.result.proposals += 1
        self._after_call(sn, node, outs)

    def _heal_all(self) -> None:
        self.faults_on = False
        self.group = {n: 0 for n in self.voters}
        self.loss_p = 0.0
        self.late_p = 0.0
        self.mid_call_crash_p = 0.0
        cfg = self.params.config
        cap = min(cfg.evaluation_timeout_ms // 4, cfg.election_timeout_ms // 10)
        self.max_delay = max(self.params.min_delay_ms, min(self.max_delay, cap))
        for sn in self.nodes.values():
            if sn.node is None:
                self._boot(sn)
        self.marker = {"marker": self.seed}
        self._trace("heal everything")
        self._push(self.now, _CLIENT)

    def _liveness_bound(self) -> int:
        # Elections, plus catching a follower up on the longest log, one fetch round trip per batch: a
        # controller may have appended many records it could not commit while cut off.
        p = self.params
        longest = max(sn.log.end_offset for sn in self.nodes.values())
        # (a lost fetch or answer is sent again after fetch_max_wait_ms + fetch_interval_ms)
        round_trip = 2 * self.max_delay + p.config.fetch_interval_ms + p.config.fetch_max_wait_ms
        return p.liveness_bound_ms + (longest // p.config.fetch_max_records + 1) * round_trip

    def _marker_committed(self) -> bool:
        marker = self.marker
        return any(rec == marker for _, rec, _ in self.checker.committed)

    # --- main loop -----------------------------------------------------------------------------------

    def _dispatch(self, kind: int, a: Any, b: Any, at: int) -> None:
        if kind == DELIVER:
            self._deliver(a, b)
        elif kind == _WAKE:
            self._wake(a, b, at)
        elif kind == _FAULT:
            if self.faults_on:
                self._fault()
        elif kind == _CLIENT:
            self._client()
        elif kind == _CLOSED:
            self._closed(a, b)
        elif kind == _RESTART:
            sn = self.nodes[a]
            if sn.node is None and self.faults_on:
                self._trace(f"restart node {a} from {sn.persisted}")
                self._boot(sn)
        for sn in self._controllers():
            self.checker.check_controller_completeness(sn.node)  # type: ignore[arg-type]

    def run(self, steps: int) -> Result:
        r = self.result
        try:
            self._push(int(self.rng.expovariate(1 / self.params.fault_mean_ms)) + 1, _FAULT)
            self._push(1, _CLIENT)
            self._run_steps(steps)
            self._heal_all()
            healed_at = self.now
            bound = self._liveness_bound()
            self._run_until(
                self._marker_committed,
                healed_at + bound,
                lambda: f"liveness: nothing committed {bound} ms after the last fault healed",
            )
            r.liveness_ms = self.now - healed_at
        except Exception as e:  # noqa: BLE001 - any exception out of a node is a bug to report with its seed
            r.ok = False
            what = str(e) if isinstance(e, SimFailure | InvariantError) else f"{type(e).__name__}: {e}"
            r.failure = f"seed={self.seed} nodes={len(self.voters)} step={self.step} t={self.now}ms: {what}"
            r.failed_step = self.step
        r.steps = self.step
        r.virtual_ms = self.now
        r.committed = len(self.checker.committed)
        return r


def run_schedule(seed: int, steps: int = 400, nodes: int = 3, trace: bool = False) -> Result:
    """Run one seeded schedule; the same arguments always give the same Result."""
    return Simulation(seed, nodes, trace=trace).run(steps)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.sim.election_sim", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=1000, help="number of schedules")
    ap.add_argument("--start", type=int, default=0, help="first seed")
    ap.add_argument("--nodes", type=int, default=5, choices=[1, 2, 3, 4, 5, 6, 7])
    ap.add_argument("--steps", type=int, default=400, help="fault-phase steps per schedule")
    ap.add_argument("--replay", type=int, help="run only this seed and print its result")
    ap.add_argument("--trace", action="store_true", help="with --replay: print the event trace")
    args = ap.parse_args(argv)
    if args.replay is not None:
        r = run_schedule(args.replay, args.steps, args.nodes, trace=args.trace)
        for line in r.trace:
            print(line)
        print(r if not args.trace else {k: v for k, v in vars(r).items() if k != "trace"})
        return 0 if r.ok else 1
    started = time.monotonic()
    failures: list[Result] = []
    totals = {"steps": 0, "controllers": 0, "committed": 0, "crashes": 0, "messages": 0, "max_epoch": 0}
    liveness: list[int] = []
    for seed in range(args.start, args.start + args.seeds):
        r = run_schedule(seed, args.steps, args.nodes)
        if not r.ok:
            failures.append(r)
            print(f"FAIL {r.failure}", flush=True)
            continue
        for k in ("steps", "controllers", "committed", "crashes", "messages"):
            totals[k] += getattr(r, k)
        totals["max_epoch"] = max(totals["max_epoch"], r.max_epoch)
        if r.liveness_ms is not None:
            liveness.append(r.liveness_ms)
    elapsed = time.monotonic() - started
    liveness.sort()
    p = (lambda q: liveness[min(len(liveness) - 1, int(q * len(liveness)))]) if liveness else (lambda q: None)
    print(
        f"{args.seeds} schedules of {args.nodes} nodes (seeds {args.start}..{args.start + args.seeds - 1}) "
        f"in {elapsed:.1f}s: {args.seeds - len(failures)} ok, {len(failures)} failed"
    )
    print(
        f"  steps {totals['steps']}, messages {totals['messages']}, crashes {totals['crashes']}, "
        f"controllers elected {totals['controllers']}, committed records {totals['committed']}, "
        f"highest epoch {totals['max_epoch']}"
    )
    print(f"  time from last heal to a commit (virtual ms): median {p(0.5)}, p99 {p(0.99)}, max {p(1.0)}")
    for r in failures:
        print(
            f"  replay: python -m tests.sim.election_sim --replay {r.seed} --nodes {r.nodes} "
            f"--steps {args.steps} --trace"
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
