"""The order test modules are handed to xdist's workers in: longest first.

scripts/test.sh runs `-n 3 --dist loadfile` (two workers until 28 November 2026): a worker takes a whole module
and asks for the next one when it is done. xdist's default order (most tests first) hands out the one-test
modules last, and some of those are long (a Spark cluster on three hosts, an install on a fresh host): a run can
end with one worker busy on such a module while the others have nothing left to do. Longest first
(scripts/test.sh passes --no-loadscope-reorder so xdist keeps this order) bounds that tail by the shortest modules
instead. A simulation of the two workers
with two measured runs' module times gives 1,598 s against 1,612 s for the default order, and 1,616 s
against 1,619 s: a small gain today, and no dependence on which long module happens to have one test.

The seconds are a module's whole time (set-up, tests, teardown) in a run of the suite on a busy machine (two
runs of 26 November 2026, averaged): only their order matters, and a stale figure costs a little balance,
never a test.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import pytest

MODULE_SECONDS = {
    "tests/integration/test_cluster_faults.py": 285,  # x0.70 alone (0.55-0.84), 27 November 2026: shared clusters
    "tests/integration/test_spark.py": 385,
    "tests/integration/test_spark_streaming.py": 315,
    "tests/integration/test_deploy_netns.py": 230,
    "tests/integration/test_console_tools.py": 220,
    "tests/unit/test_replication_sim.py": 140,
    "tests/integration/test_spark_multihost.py": 135,
    "tests/integration/test_spark_standalone.py": 105,
    "tests/integration/test_spark_exactly_once.py": 110,
    "tests/integration/test_exactly_once_loop.py": 45,
    "tests/integration/test_transactions_clients.py": 90,
    "tests/integration/test_transactions_kafka_clients.py": 60,
    "tests/integration/test_coordination_survival.py": 55,  # x0.54 alone, 27 November 2026
    "tests/integration/test_deploy_node.py": 95,
    "tests/integration/test_security.py": 75,
    "tests/integration/test_zookeeper.py": 70,
    "tests/integration/test_dashboard.py": 65,
    "tests/integration/test_cli.py": 60,
    "tests/integration/test_console_security.py": 60,
    "tests/integration/test_nemesis.py": 60,
    "tests/integration/test_liveness.py": 55,
    "tests/integration/test_kafka_clients.py": 50,
    "tests/integration/test_leader_rebalance.py": 40,
    "tests/unit/test_election_sim.py": 40,
    "tests/integration/test_groups.py": 31,  # x0.77 alone, 27 November 2026
    "tests/integration/test_deploy_scripts.py": 40,
    "tests/integration/test_recovery.py": 40,
    "tests/integration/test_kafka_groups.py": 30,
    "tests/integration/test_limits_quotas.py": 30,
    "tests/integration/test_kafka_listener.py": 30,
    # Missing above, so handed out near the end as a few-test module: 86 s and 43 s in a run of 26 November
    # 2026 at load 15-25 (scaled by that run's 548 s for test_cluster_faults.py against its 405 here then).
    "tests/integration/test_ports.py": 65,
    "tests/integration/test_partition_floods.py": 32,
    # Added 27 November 2026, from their own runs on a busy machine.
    "tests/integration/test_nemesis_transactions.py": 75,
    "tests/integration/test_transaction_verification.py": 50,
    "tests/integration/test_replication_throttles.py": 25,
    "tests/integration/test_compaction_horizon.py": 30,  # 27 November 2026, fourth session
    "tests/integration/test_kafka_consumer_protocol.py": 45,  # 27 November 2026, fourth session
    "tests/integration/test_share_groups.py": 54,  # 27 November 2026, fourth session; x0.9 (CPU) alone, late night
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

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid.split("::", 1)[0]] += report.duration

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.seconds:
            return
        terminalreporter.write_sep("=", f"module times (s), total {sum(self.seconds.values()):.0f}")
        for module, seconds in self.seconds.most_common(25):
            terminalreporter.write_line(f"{seconds:7.1f}  {module}")
