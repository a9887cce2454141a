"""The order test modules are handed to xdist's workers in: longest first.

scripts/test.sh runs `-n 2 --dist loadfile`: a worker takes a whole module and asks for the next one when it
is done. xdist's default order (most tests first) hands out the one-test modules last, and those are the
longest (a Spark cluster on three hosts, an install on a fresh host): the run then ends with one worker
busy on such a module for minutes while the other has nothing left to do. Longest first keeps both busy
to the end (scripts/test.sh passes --no-loadscope-reorder so xdist keeps this order).

The seconds are a module's whole time (set-up, tests, teardown) in a run of the suite on a busy machine:
only their order matters, and a stale figure costs a little balance, never a test.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import pytest

MODULE_SECONDS = {
    "tests/integration/test_cluster_faults.py": 360,
    "tests/integration/test_spark.py": 270,
    "tests/integration/test_deploy_netns.py": 200,
    "tests/unit/test_replication_sim.py": 200,
    "tests/integration/test_spark_multihost.py": 165,
    "tests/integration/test_console_tools.py": 160,
    "tests/integration/test_spark_streaming.py": 150,
    "tests/integration/test_deploy_node.py": 125,
    "tests/integration/test_spark_standalone.py": 120,
    "tests/integration/test_cli.py": 120,
    "tests/integration/test_coordination_survival.py": 110,
    "tests/integration/test_kafka_listener.py": 70,
    "tests/integration/test_groups.py": 70,
    "tests/unit/test_election_sim.py": 65,
    "tests/integration/test_deploy_scripts.py": 60,
    "tests/integration/test_leader_rebalance.py": 60,
    "tests/integration/test_liveness.py": 55,
    "tests/integration/test_zookeeper.py": 50,
    "tests/integration/test_nemesis.py": 45,
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
