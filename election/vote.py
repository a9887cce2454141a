"""Steps 1 and 2 of the election: which collected state is the most up to date.

Kept free of I/O and of node state so that the rule every voter applies is one function, and the
same inputs give the same choice on every node.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from election.messages import ElectionState


def rank(state: ElectionState) -> tuple[int, int, int, int]:
    # (last epoch, end offset) first, as Raft's "at least as up to date": a long log from a deposed
    # epoch can hold records that were never committed and lack committed ones from a later epoch, so
    # the end offset alone would elect it and lose data. Then fewest leaderships, then lowest id.
    return (state.last_log_epoch, state.log_end_offset, -state.leaderships, -state.sender)


def choose(states: Iterable[ElectionState]) -> int:
    """The sender of the most up-to-date state."""
    return max(states, key=rank).sender


@dataclass(slots=True)
class ElectionRound:
    """One node's view of the election of one epoch."""

    epoch: int
    own: ElectionState
    collect_deadline_ms: int
    states: dict[int, ElectionState] = field(default_factory=dict)
    voted: bool = False
    decide_deadline_ms: int | None = None
    votes_for_me: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.states[self.own.sender] = self.own
