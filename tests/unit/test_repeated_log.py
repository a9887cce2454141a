"""RepeatedConditionLog: once at the start, a summary at most every interval, a count at the end."""

from __future__ import annotations

import logging

from broker.utils.repeated_log import RepeatedConditionLog


class Clock:
    t = 100.0

    def __call__(self) -> float:
        return self.t


def test_a_condition_repeating_1000_times_a_second_logs_a_few_lines(caplog):
    clock = Clock()
    rlog = RepeatedConditionLog(logging.getLogger("t.repeat"), interval_s=10, clock=clock)
    with caplog.at_level(logging.INFO, logger="t.repeat"):
        for i in range(60_000):  # 60 s at 1000 occurrences/s, two partitions alternating
            clock.t = 100 + i / 1000
            rlog.report(("t", i % 2), logging.WARNING, "t-%d: ISR change not committed: fenced", i % 2)
        rlog.clear(("t", 0), how="ISR change committed")
    lines = [r.getMessage() for r in caplog.records]
    per_key = [sum(1 for m in lines if m.startswith(f"t-{k}")) for k in (0, 1)]
    assert per_key[0] == 1 + 5 + 1 and per_key[1] == 1 + 5, lines  # start, one per 10 s, end (key 0 only)
    assert lines[0] == "t-0: ISR change not committed: fenced"
    assert "repeated" in lines[2] and "in the last 10 s" in lines[2]
    assert lines[-1].endswith("ISR change committed after 30000 occurrences over 60.0 s")
    assert not rlog.active(("t", 0)) and rlog.active(("t", 1))


def test_a_single_occurrence_ends_quietly(caplog):
    rlog = RepeatedConditionLog(logging.getLogger("t.once"), clock=Clock())
    with caplog.at_level(logging.INFO, logger="t.once"):
        rlog.report("k", logging.WARNING, "once")
        rlog.clear("k")
        rlog.clear("never-started")
    assert [r.getMessage() for r in caplog.records] == ["once"]
