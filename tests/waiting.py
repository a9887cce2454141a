"""The one way a test waits: poll a condition until it holds, with a deadline and a message that says what did
not happen. No test sleeps a fixed time for something it can observe.

A condition may raise while it waits (a cluster in flux refuses connections, a log is not written yet): the
error is kept and reported if the deadline passes. `give_up` says when waiting longer is pointless (a
process the condition depends on exited, a streaming query died): the test fails at once with its reason.
`detail` adds what helps to read a timeout (the logs, a query's progress), computed only then.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    cond: Callable[[], T],
    timeout: float,
    what: str,
    interval: float = 0.1,
    *,
    give_up: Callable[[], str | None] | None = None,
    detail: Callable[[], str] | None = None,
) -> T:
    """The first truthy value of `cond()` within `timeout` seconds; AssertionError naming `what` if none."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while True:
        try:
            v = cond()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 - conditions probe things in flux
            last_exc = e
        if give_up is not None and (reason := give_up()):
            raise AssertionError(f"gave up waiting for {what}: {reason}" + _more(detail))
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"timed out after {timeout}s waiting for {what}"
                + (f" (last error: {last_exc!r})" if last_exc else "")
                + _more(detail)
            )
        time.sleep(interval)


def _more(detail: Callable[[], str] | None) -> str:
    return "" if detail is None else "\n" + detail()


def wait_port(port: int, timeout: float = 20.0, proc: subprocess.Popen | None = None, host: str = "127.0.0.1") -> None:
    """Until something accepts connections on host:port; at once if `proc` (the server) exits first."""

    def accepts() -> bool:
        with socket.create_connection((host, port), timeout=0.5):
            return True

    def exited() -> str | None:
        return None if proc is None or proc.poll() is None else f"the server exited with {proc.returncode}"

    wait_until(accepts, timeout, f"a listener on {host}:{port}", 0.05, give_up=exited)
