"""The order test modules are handed to xdist's workers in: longest first.

scripts/test.sh runs `-n 4 --dist loadfile` (two workers until 28 November 2026, then three, then four): a
worker takes a whole module and asks for the next one when it is done. xdist's default order (most tests
first) hands out the one-test modules last, and some of those are long (a Spark cluster on three hosts, an
install on a fresh host): a run can end with one worker busy on such a module while the others have nothing
left to do. Longest first (scripts/test.sh passes --no-loadscope-reorder so xdist keeps this order) bounds that
tail by the shortest modules instead. A simulation of two workers with two measured runs' module times gives
1,598 s against 1,612 s for the default order, and 1,616 s against 1,619 s: a small gain, and no dependence on
which long module happens to have one test.

The seconds are a module's whole time (set-up, tests, teardown) in a run of the suite on a busy machine (two
runs of 26 November 2026, averaged): only their order matters, and a stale figure costs a little balance,
never a test.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import pytest

MODULE_SECONDS = {
    # The modules in the top 25 of at least two of three runs of 27-28 November 2026 (three and four workers):
    # their mean; the others at most 30 s, as they were below every table's 25th (about 30 s).
    "tests/integration/test_spark.py": 182,
    "tests/integration/test_cluster_faults.py": 168,
    "tests/integration/test_spark_streaming.py": 163,
    "tests/integration/test_deploy_netns.py": 143,
    "tests/integration/test_spark_exactly_once.py": 100,
    "tests/integration/test_share_groups.py": 93,
    "tests/integration/test_console_tools.py": 81,
    "tests/integration/test_deploy_node.py": 62,
    "tests/unit/test_replication_sim.py": 25,  # 150 schedules since 28 November (450 before)
    "tests/integration/test_spark_multihost.py": 59,
    "tests/integration/test_nemesis.py": 55,
    "tests/integration/test_liveness.py": 54,
    "tests/integration/test_transactions_kafka_clients.py": 50,
    "tests/integration/test_nemesis_transactions.py": 49,
    "tests/integration/test_spark_standalone.py": 49,
    "tests/integration/test_groups.py": 48,
    "tests/integration/test_dashboard.py": 46,
    "tests/integration/test_zookeeper.py": 46,
    "tests/integration/test_kafka_clients.py": 41,
    "tests/integration/test_security.py": 41,
    "tests/integration/test_transactions_clients.py": 41,
    "tests/integration/test_cli.py": 39,
    "tests/integration/test_coordination_survival.py": 37,
    "tests/integration/test_kafka_consumer_protocol.py": 32,
    "tests/integration/test_limits_quotas.py": 31,
    "tests/integration/test_kafka_listener.py": 30,
    "tests/integration/test_deploy_scripts.py": 30,
    "tests/unit/test_native_messages.py": 30,
    "tests/unit/test_election_sim.py": 30,
    "tests/integration/test_kafka_groups.py": 30,
    "tests/integration/test_ports.py": 30,
    "tests/integration/test_leader_rebalance.py": 30,
    "tests/integration/test_partition_floods.py": 30,
    "tests/integration/test_exactly_once_loop.py": 30,
    "tests/integration/test_transaction_verification.py": 30,
    "tests/integration/test_compaction_horizon.py": 30,
    "tests/integration/test_console_security.py": 30,
    "tests/integration/test_recovery.py": 30,
    "tests/integration/test_spark_cds.py": 30,  # 28 November 2026: two JVMs
    "tests/integration/test_replication_throttles.py": 25,
}
# Modules not in the table: an integration test starts brokers (seconds), a unit test mostly does not.
PER_TEST_SECONDS = {"integration": 3.0}
DEFAULT_PER_TEST_SECONDS = 0.1


def module_of(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def estimate(module: str, tests: int) -> float:
    if module in MODULE_SECONDS:
        return MODULE_SECONDS[module]
    kind = module.split("/")[1] if module.count("/") >= 2 else ""
    return tests * PER_TEST_SECONDS.get(kind, DEFAULT_PER_TEST_SECONDS)


def longest_first(items: Sequence[pytest.Item]) -> list[pytest.Item]:
    """The items regrouped by module, the modules longest first; within a module the order is kept."""
    counts = Counter(module_of(i) for i in items)
    rank = {m: (-estimate(m, n), m) for m, n in counts.items()}
    return sorted(items, key=lambda i: rank[module_of(i)])  # stable: a module's own order is kept


class ModuleTimes:
    """A pytest plugin: each module's seconds (its tests' set-up, call and teardown, module fixtures included)
    summed from the test reports, the longest printed at the end of the run, to keep MODULE_SECONDS current.
    Under xdist the controller receives every worker's reports, so one table covers the whole run."""

    def __init__(self) -> None:
        self.seconds: Counter[str] = Counter()
        # CPU seconds, as each worker measured them (tests/conftest.py cpu_since_last_report): on a CPU-bound run
        # the suite's time follows the CPU its modules take, not their seconds (which include waiting).
        self.cpu: Counter[str] = Counter()
        # Wall-clock span of each module (its first report's start, its last one's stop): the run's tail, where
        # fewer modules are left than workers, shows in which modules end last.
        self.spans: dict[str, tuple[float, float]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        module = report.nodeid.split("::", 1)[0]
        self.seconds[module] += report.duration
        self.cpu[module] += sum(v for k, v in report.user_properties if k == "cpu_s")
        first, last = self.spans.get(module, (report.start, report.stop))
        self.spans[module] = (min(first, report.start), max(last, report.stop))

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.seconds:
            return
        terminalreporter.write_sep("=", f"module times (s), total {sum(self.seconds.values()):.0f}")
        for module, seconds in self.seconds.most_common(25):
            terminalreporter.write_line(f"{seconds:7.1f}  {module}")
        terminalreporter.write_sep(
            "=", f"module CPU (s, the test process and the children it waited for), total {sum(self.cpu.values()):.0f}"
        )
        for module, cpu in self.cpu.most_common(25):
            terminalreporter.write_line(f"{cpu:7.1f}  {module}")
        begin = min(first for first, _ in self.spans.values())
        end = max(last for _, last in self.spans.values())
        # The run's tail: the modules still running in its last 30%, where workers run out of modules to take and
        # the CPU may idle; a long module starting late shows here.
        tail = [
            (m, (first, last))
            for m, (first, last) in self.spans.items()
            if last >= begin + 0.7 * (end - begin) and last - first >= 5  # the few-second unit modules left out
        ]
        terminalreporter.write_sep("=", "the run's last 30%: modules running then (s from the first test's start)")
        for module, (first, last) in sorted(tail, key=lambda kv: kv[1][0]):
            terminalreporter.write_line(f"{first - begin:6.0f} - {last - begin:4.0f}  {module}")
