"""Where a stalled event loop spends its time, logged once per stall (a diagnostic, no effect on liveness).

A broker's loop that shows no progress for seconds is judged from another thread (the heartbeat thread,
broker/controller/heartbeat.py), which can also see what the loop's thread is doing: `StallSampler` samples
that thread's stack while the stall lasts and, when it ends, logs one WARNING with the stall's length and the
most frequent stacks. A stall caused by one slow piece of work shows it; one caused by a starved CPU shows
ordinary frames spread thin.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections import Counter
from types import FrameType
from typing import Callable

log = logging.getLogger("kafkalite.stall")

SAMPLE_S = 0.2  # how often the loop's thread is sampled during a stall
STACK_DEPTH = 6  # innermost frames kept per sample


def _stack(frame: FrameType | None) -> str:
    """The innermost frames, innermost first: names and line numbers only. No source lines (traceback's
    default reads the files, on the thread that must stay light on a starved machine)."""
    parts: list[str] = []
    while frame is not None and len(parts) < STACK_DEPTH:
        parts.append(f"{frame.f_code.co_name} ({frame.f_code.co_filename}:{frame.f_lineno})")
        frame = frame.f_back
    return " <- ".join(parts)


class StallSampler:
    """Samples the loop thread's stack while `stalled_ms()` is at least `threshold_ms`."""

    def __init__(self, stalled_ms: Callable[[], int], thread_id: Callable[[], int | None], threshold_ms: int) -> None:
        self._stalled_ms = stalled_ms
        self._thread_id = thread_id
        self.threshold_ms = threshold_ms
        self._samples: Counter[str] = Counter()
        self._longest = 0
        self.reports = 0  # stalls logged, for the tests

    def sample(self) -> None:
        """One tick: sample if the loop is stalled, report when a stall has ended."""
        stalled = self._stalled_ms()
        if stalled >= self.threshold_ms:
            self._longest = max(self._longest, stalled)
            ident = self._thread_id()
            frame = sys._current_frames().get(ident) if ident is not None else None
            if frame is not None:
                self._samples[_stack(frame)] += 1
        elif self._longest:
            self._report()

    def _report(self) -> None:
        total = sum(self._samples.values())
        top = "; ".join(f"{n}/{total}: {s}" for s, n in self._samples.most_common(3))
        log.warning("event loop stalled for %d ms; where its thread was: %s", self._longest, top or "not sampled")
        self.reports += 1
        self._samples.clear()
        self._longest = 0

    async def run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(SAMPLE_S)
