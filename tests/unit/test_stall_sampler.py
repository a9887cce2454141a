"""StallSampler: samples a stalled loop thread's stack and logs one line per stall (broker/utils/stall_sampler.py)."""

from __future__ import annotations

import logging
import threading
import time

from broker.utils.stall_sampler import StallSampler


def _busy_in_a_named_function(stop: threading.Event) -> None:
    while not stop.is_set():
        sum(range(1000))


def test_a_stall_is_reported_once_with_the_stalled_threads_stack(caplog):
    stop = threading.Event()
    t = threading.Thread(target=_busy_in_a_named_function, args=(stop,))
    t.start()
    stalled = [0]
    sampler = StallSampler(lambda: stalled[0], lambda: t.ident, threshold_ms=2000)
    try:
        with caplog.at_level(logging.WARNING, "kafkalite.stall"):
            for ms in (100, 2500, 3000, 4200):  # below the threshold, then a stall growing to 4.2 s
                stalled[0] = ms
                sampler.sample()
                time.sleep(0.01)
            assert sampler.reports == 0, "reported before the stall ended"
            stalled[0] = 5  # the loop ticked again
            sampler.sample()
            sampler.sample()
    finally:
        stop.set()
        t.join()
    assert sampler.reports == 1
    [record] = [r for r in caplog.records if r.name == "kafkalite.stall"]
    assert "stalled for 4200 ms" in record.getMessage()
    assert "_busy_in_a_named_function" in record.getMessage()
    assert "3/3" in record.getMessage() or "/3:" in record.getMessage()


def test_no_report_without_a_stall_or_without_a_thread(caplog):
    sampler = StallSampler(lambda: 10, lambda: None, threshold_ms=2000)
    for _ in range(5):
        sampler.sample()
    assert sampler.reports == 0
    stalled = [3000]
    sampler = StallSampler(lambda: stalled[0], lambda: None, threshold_ms=2000)
    sampler.sample()
    stalled[0] = 0
    with caplog.at_level(logging.WARNING, "kafkalite.stall"):
        sampler.sample()
    assert sampler.reports == 1 and "not sampled" in caplog.records[-1].getMessage()
