"""Shared fixtures: real kl-broker processes on loopback."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import time
from pathlib import Path

import pytest

from client.cli.cluster import start_command, wait_registered
from tests.ports import free_port
from tests.waiting import wait_port

ROOT = Path(__file__).resolve().parent.parent

# Every JVM a test starts (Spark's drivers, executors and standalone daemons) lives for seconds to a minute on
# a few thousand records: the C1 compiler alone gets there with far less CPU than C1 then C2 (a kl-spark
# hashtags run: 47 -> 26 CPU seconds), on a 2-core machine that runs two test modules at once. Same results;
# Java names the setting on stderr ("Picked up JAVA_TOOL_OPTIONS"). ZooKeeper's command line has it already.
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1")


class BrokerProcess:
    """One `kl-broker start` subprocess; restartable with the same id, port and data dir."""

    def __init__(self, data_dir: Path, broker_id: int = 1, port: int | None = None, extra: list[str] | None = None):
        self.data_dir = data_dir
        self.broker_id = broker_id
        self.port = port or free_port()
        self.extra = extra or []
        self.proc: subprocess.Popen | None = None
        self.log_path = data_dir.parent / f"broker-{broker_id}.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "BrokerProcess":
        cmd = start_command(self.broker_id, self.port, self.data_dir, extra=self.extra)
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)}
        )
        wait_port(self.port, proc=self.proc)
        # listening is not ready: until the broker has elected itself controller, admin requests get NOT_CONTROLLER.
        # Asked a second at a time, so that a broker that exited (its port taken by another process, which then
        # answers instead) fails the test at once with its own words, not after 30 s with a stranger's.
        deadline = time.monotonic() + 30
        while not wait_registered(self.bootstrap, 1, 1):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                state = "elected no controller within 30s" if self.proc.poll() is None else "exited"
                raise TimeoutError(f"broker {self.broker_id} on port {self.port} {state}; its log ends:\n{self.tail()}")
        if self.proc.poll() is not None:
            raise RuntimeError(f"broker {self.broker_id} on port {self.port} exited; its log ends:\n{self.tail()}")
        return self

    def tail(self, lines: int = 20) -> str:
        return "\n".join(self.logs().splitlines()[-lines:])

    def kill(self, sig: int = signal.SIGKILL) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        rc = self.proc.wait(30)
        self._log.close()
        return rc

    def stop(self) -> int:
        return self.kill(signal.SIGTERM)

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def cleanup(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def broker_factory(tmp_path):
    made: list[BrokerProcess] = []

    def make(**kw) -> BrokerProcess:
        b = BrokerProcess(tmp_path / f"data-{len(made) + 1}", **kw)
        made.append(b)
        return b.start()

    yield make
    for b in made:
        b.cleanup()


@pytest.fixture
def broker(broker_factory) -> BrokerProcess:
    return broker_factory()


_last_cpu = [0.0]


def cpu_since_last_report() -> float:
    """CPU seconds (user + system) of this process and of its children waited for (brokers stopped, CLIs and
    Spark drivers that exited) since the previous call. A daemon a test leaves to others (a JVM's own children)
    is not counted, nor a child that is never waited for: a lower bound of what a test costs the machine."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    delta, _last_cpu[0] = total - _last_cpu[0], total
    return delta


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--seed", type=int, default=None, help="replay one schedule of tests/integration/test_nemesis.py")


def pytest_configure(config: pytest.Config) -> None:
    # Each module's seconds at the end of a run (tests/module_order.py): in the process that reports, not in
    # xdist's workers (whose reports reach it).
    if not hasattr(config, "workerinput"):
        from tests.module_order import ModuleTimes

        config.pluginmanager.register(ModuleTimes(), "kl-module-times")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Longest modules first, so that xdist's workers finish together (tests/module_order.py).
    from tests.module_order import longest_first

    items[:] = longest_first(items)
    cpu_since_last_report()  # the first test's CPU starts here, not with the interpreter and the collection


# Under CI=true a promised feature never skips: a skip for a missing tool, package or privilege fails the test.
# Only the soaks (KL_SOAK=1) may skip there.
def _ci_forbids_skip(reason: str) -> bool:
    return os.environ.get("CI") == "true" and "KL_SOAK" not in reason


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> object:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    # The CPU this phase took in this process and its reaped children (tests/module_order.py's CPU column).
    report.user_properties.append(("cpu_s", cpu_since_last_report()))
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if _ci_forbids_skip(reason):
            report.outcome = "failed"
            report.longrepr = f"skipped under CI=true, where every promised feature must run: {reason}"
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> object:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.skipped:
        reason = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if _ci_forbids_skip(reason):
            report.outcome = "failed"
            report.longrepr = f"module skipped under CI=true, where every promised feature must run: {reason}"
    return None
