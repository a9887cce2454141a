"""Fixtures for the real-process cluster tests (tests/integration/test_cluster*.py)."""

from __future__ import annotations

import pytest

from tests.integration.cluster_harness import ClusterHarness, failed
from tests.integration.zk_support import require_zookeeper


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


@pytest.fixture
def coordination() -> str:
    """The coordination mode of `cluster_factory`'s clusters; test modules parametrize it over both modes
    by overriding this fixture (see test_cluster_faults.py)."""
    return "custom"


@pytest.fixture
def cluster_factory(tmp_path, request, coordination):
    """cluster_factory(n=3, overrides=[...]) -> a started ClusterHarness; killed and cleaned up after the
    test, with every broker's log attached to the report when the test failed. In ZooKeeper mode each
    cluster gets its own standalone ZooKeeper, stopped afterwards."""
    made: list[ClusterHarness] = []
    if coordination == "zookeeper":
        require_zookeeper()

    def make(
        n: int = 3, overrides: list[str] | None = None, start: bool = True, mode: str | None = None
    ) -> ClusterHarness:
        h = ClusterHarness(tmp_path / f"cluster-{len(made) + 1}", n, overrides, mode or coordination)
        made.append(h)
        if start:
            h.start()
        return h

    yield make
    test_failed = failed(request.node)
    for h in made:
        if test_failed:
            print(h.dump_logs())
        h.cleanup()


@pytest.fixture
def cluster(cluster_factory) -> ClusterHarness:
    return cluster_factory()
