"""Where the time goes in a fault: brokers' log lines and time-stamped client events on one clock.

Brokers log with millisecond wall-clock timestamps (`2026-11-22 10:00:00,123 [broker 2] INFO ...`); a
benchmark wraps a few methods of its own producer (`trace_client`) to time-stamp what the client does with
the same clock. `log_rows` merges both into `(ms since the fault, text)` rows, `first` finds phase marks in
them, and `phase_lines` prints median (min–max) of each mark over runs. bench/run_cluster.py (failover) and
bench/run_recovery.py (kill-all, leader kill, ZooKeeper-mode leader cut) use them.
"""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \[broker (\d+)\] \w+ [\w.]+: (.*)$")
# Broker log lines that mark a phase of a failover or a recovery.
EVENTS = (
    "started on",
    "process is gone",
    "no controller in epoch",
    "voted for",
    "became controller",
    "following controller",
    "controller is",
    "fencing broker",
    "liveness update committed",
    "metadata: caught up",
    "became leader of",
    "following broker",
    "ISR change",
    "sent no fetch for over",
    "shrinking ISR",
    "fetches again",
    "leadership moved",
)

Rows = list[tuple[float, str]]


def log_rows(
    log_paths: Iterable[Path], since_wall: float, events: Sequence[tuple[float, str]] = (), needles=EVENTS
) -> Rows:
    """Broker log lines containing one of `needles`, and client `events` (wall time, text), from
    `since_wall` on, as (ms after since_wall, text), in time order."""
    rows: Rows = []
    for path in sorted(log_paths):
        try:
            text = Path(path).read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            m = LOG_LINE.match(line)
            if m is None or not any(n in m.group(3) for n in needles):
                continue
            t = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            if t >= since_wall - 0.001:
                rows.append(((t - since_wall) * 1000, f"broker {m.group(2)}: {m.group(3)}"))
    rows += [((t - since_wall) * 1000, text) for t, text in events if t >= since_wall]
    rows.sort(key=lambda r: r[0])
    return rows


def first(rows: Rows, *needles: str, after: float = float("-inf")) -> float:
    """ms of the first row at or after `after` containing every needle (NaN: none)."""
    return next((ms for ms, text in rows if ms >= after and all(n in text for n in needles)), float("nan"))


def print_rows(rows: Rows, indent: str = "    ") -> None:
    for ms, text in rows:
        print(f"{indent}{ms:8.1f} ms  {text[:160]}", flush=True)


def phase_lines(all_marks: Sequence[dict[str, float]], skip: Iterable[str] = ()) -> list[tuple[str, str, int]]:
    """(mark, "median (min–max)" in ms, runs that saw it) per mark, in first-seen order; NaN dropped."""
    skip = set(skip)
    out = []
    for name in dict.fromkeys(k for m in all_marks for k in m):
        if name in skip:
            continue
        vals = [m[name] for m in all_marks if name in m and m[name] == m[name]]
        if vals:
            med = f"{statistics.median(vals):.0f} ({min(vals):.0f}–{max(vals):.0f})"
            out.append((name, med, len(vals)))
    return out


def trace_client(producer: Any, events: list[tuple[float, str]], tp: tuple[str, int] | None = None) -> None:
    """Wrap a few methods of this producer instance to time-stamp (wall clock) what it does for partition
    `tp` (None: every partition): metadata refreshes, produce requests sent, produce errors."""
    sender = producer.sender  # client/sender.py: where produce requests are sent and their errors handled
    refresh, dispatch, on_error = producer.client.refresh_metadata, sender._dispatch, sender._on_partition_error

    def mine(t: tuple[str, int]) -> bool:
        return tp is None or t == tp

    def add(text: str) -> None:
        # A producer retrying or streaming repeats itself every few ms: keep each change only.
        if not events or events[-1][1] != text:
            events.append((time.time(), text))

    async def traced_refresh(topics: Any = None) -> Any:
        md = await refresh(topics)
        add(f"client: metadata says leader {md.leader(*tp)}" if tp is not None else "client: metadata refreshed")
        return md

    def traced_dispatch(leader: int, request: list) -> None:
        if any(mine(r[0]) for r in request):
            add(f"client: produce sent to {leader}")
        dispatch(leader, request)

    def traced_error(tp_: tuple[str, int], batches: list, err: Exception, **kw: Any) -> None:
        if mine(tp_):
            add(f"client: produce failed: {type(err).__name__}: {str(err)[:60]}")
        on_error(tp_, batches, err, **kw)

    producer.client.refresh_metadata = traced_refresh
    sender._dispatch = traced_dispatch
    sender._on_partition_error = traced_error
