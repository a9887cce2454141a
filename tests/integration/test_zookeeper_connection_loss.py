"""The ZooKeeper mode's controller when its connection drops with a metadata change in flight (a loaded
machine's short sessions do this: a CI run's topic deletion failed "ZooKeeper error ConnectionLoss (outcome
unknown)"). The proposal is resolved once the connection is back: applied, it is answered as done, once;
not applied, it is proposed again. Never an error for a change that was made, never a change made twice.

A real ZooKeeper and the broker's own ZooKeeperCoordination; a proxy (zk_cutting_proxy.py) cuts the
connection at the transaction, before or after ZooKeeper got it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker.controller.zk_coordination import ZooKeeperCoordination
from client.cli.zk_local import LocalZooKeeper
from election.coordination import Entry
from tests.conftest import free_port
from tests.integration.zk_cutting_proxy import CuttingProxy
from tests.integration.zk_support import require_zookeeper


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory):
    require_zookeeper()
    zk = LocalZooKeeper(Path(tmp_path_factory.mktemp("zk")), free_port()).start()
    try:
        yield zk
    finally:
        zk.stop()


async def _controller(connect: str, committed: list[Entry]) -> ZooKeeperCoordination:
    roles: list[tuple[bool, int, int | None]] = []
    coord = ZooKeeperCoordination(
        1, ("127.0.0.1", 1), connect, 6000, committed.extend, lambda *role: roles.append(role), incarnation=1
    )
    coord.start()
    for _ in range(300):
        if roles and roles[-1][0]:
            return coord
        await asyncio.sleep(0.05)
    coord.stop()
    raise AssertionError(f"never became controller: {roles}")


@pytest.mark.parametrize("when", ["after", "before"])
def test_a_change_in_flight_when_the_connection_drops_is_applied_once_and_answered(zookeeper, when):
    proxy = CuttingProxy(("127.0.0.1", zookeeper.port))

    async def run() -> None:
        committed: list[Entry] = []
        coord = await _controller(f"127.0.0.1:{proxy.port}/cut-{when}", committed)
        try:
            first = await coord.propose([{"type": "probe", "n": 0}])
            proxy.cut_at_next_multi(when)
            last = await coord.propose([{"type": "probe", "n": 1}, {"type": "probe", "n": 2}], timeout=20)
            assert proxy.cuts == [when], "the proxy did not cut the transaction"
            assert last == first + 2
            for _ in range(100):  # applied by this broker, as every broker applies the log
                if len(committed) >= 3:
                    break
                await asyncio.sleep(0.05)
            probes = [r["n"] for _, _, r in committed if r.get("type") == "probe"]
            assert probes == [0, 1, 2], f"applied {probes}: a change lost or made twice"
            # and the controller goes on: the next change is the next offset
            assert await coord.propose([{"type": "probe", "n": 3}]) == last + 1
        finally:
            coord.stop()

    try:
        asyncio.run(run())
    finally:
        proxy.close()
