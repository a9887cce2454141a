"""The nemesis' cluster: three brokers on three network-namespace hosts (so a cut is a real one), ZooKeeper,
in that mode, on the bridge; short failure detection, so the schedules' cuts and pauses of a few seconds reach
fencing and elections. Each test module passes its own subnet and name prefix."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from bench.netns import NetnsLab, available
from tests.integration.cluster_harness import FAST_FAILURE_DETECTION, ClusterHarness
from tests.integration.zk_support import require_zookeeper


@contextmanager
def netns_harness(
    root: Path, coordination: str, request: pytest.FixtureRequest, prefix: str, subnet: str, overrides: list[str] = ()
) -> Iterator[ClusterHarness]:
    """A started harness, torn down afterwards (with every broker's log printed when the test failed).
    Skips without root and iproute2, except under CI=true, where the nemesis must run."""
    if not available():
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("network namespaces need root and iproute2 (CI must run the nemesis)")
        pytest.skip("network namespaces need root and iproute2")
    if coordination == "zookeeper":
        require_zookeeper()
    lab = NetnsLab(prefix, subnet, 3).setup()
    h = ClusterHarness(root, 3, [*FAST_FAILURE_DETECTION, *overrides], coordination=coordination, lab=lab)
    try:
        h.start()
        yield h
    finally:
        failed = any(getattr(getattr(request.node, f"rep_{w}", None), "failed", False) for w in ("setup", "call"))
        if failed:
            print(h.dump_logs())
        h.cleanup()
        lab.teardown()
