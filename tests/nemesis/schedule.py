"""A seeded fault schedule: which fault, on which broker, when, for how long. The same seed gives the
same schedule, so a failing run replays with `pytest tests/integration/test_nemesis.py --seed N`."""

from __future__ import annotations

import random
from dataclasses import dataclass

KINDS = ("kill", "pause", "cut", "kill-all")
# The transactional nemesis (tests/nemesis/txn_runner.py) also kills whichever broker coordinates a
# transactional.id when the fault starts (found with FindCoordinator key_type 1); `broker` is the fallback.
TXN_KINDS = (*KINDS, "kill-coordinator")


@dataclass(frozen=True)
class Fault:
    at_s: float  # seconds after the load started
    # kill: SIGKILL then restart; pause: SIGSTOP then SIGCONT; cut: the broker's host cut off from the other
    # brokers' hosts (not from ZooKeeper or the clients), then healed; kill-all: every broker, then all back
    kind: str
    broker: int  # the broker (ignored for kill-all)
    duration_s: float  # how long until the restart / SIGCONT

    def __str__(self) -> str:
        who = "all" if self.kind == "kill-all" else f"broker {self.broker}"
        return f"t={self.at_s:.1f}s {self.kind} {who} for {self.duration_s:.1f}s"


def make_schedule(
    seed: int,
    duration_s: float,
    brokers: list[int],
    kill_all: bool = True,
    cuts: bool = True,
    kinds: tuple[str, ...] = KINDS,
) -> list[Fault]:
    """Faults one after another (each healed before the next starts), until `duration_s`. A pause or a cut
    lasts longer than the broker session timeout (2 s in the nemesis' clusters: FAST_FAILURE_DETECTION) half
    the time, so both a fenced and an unfenced one occur; at most one kill-all per run (each costs a full
    restart). `cuts` needs brokers on network-namespace hosts."""
    rnd = random.Random(seed)
    out: list[Fault] = []
    t = rnd.uniform(1.0, 2.0)
    used_kill_all = not kill_all
    while t < duration_s:
        allowed = [k for k in kinds if (k != "kill-all" or not used_kill_all) and (k != "cut" or cuts)]
        kind = rnd.choice(allowed)
        used_kill_all = used_kill_all or kind == "kill-all"
        dur = rnd.uniform(0.5, 4.0) if kind in ("pause", "cut") else rnd.uniform(0.5, 2.5)
        out.append(Fault(round(t, 2), kind, rnd.choice(brokers), round(dur, 2)))
        t += dur + rnd.uniform(2.0, 4.0)  # time to recover before the next fault
    return out
