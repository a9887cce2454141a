"""ZooKeeper for the tests: a standalone server per cluster (client/cli/zk_local.py), on a free loopback port
with its own data directory, stopped after the test.

When Debian's `zookeeper` package is missing the ZooKeeper tests skip, except under CI=true, where they
fail with the command to run: CI must never pass without having run them (scripts/test.sh installs it)."""

from __future__ import annotations

import os

import pytest

from client.cli.zk_local import INSTALL_HINT, zookeeper_installed


def require_zookeeper() -> None:
    if zookeeper_installed():
        return
    msg = f"ZooKeeper (Debian package `zookeeper`, and java) is not installed: {INSTALL_HINT}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(msg + " (CI=true: the ZooKeeper tests must run)", pytrace=False)
    pytest.skip(msg)
