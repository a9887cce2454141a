"""broker/controller/quorum_driver.py's broker-level rules: after a start, committed metadata is handed to the broker
only
once the log reached the committed end of the controller's first answer, and then all at once; fetches carry
the process's incarnation, which the driver remembers per broker. (tests/sim/replication_sim.py models both.)
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from broker.controller.quorum_driver import QuorumDriver, next_incarnation
from election import QuorumConfig
from election.log import InMemoryLog
from election.messages import BeginEpoch, FetchRequest, FetchResponse

VOTERS = {1: ("127.0.0.1", 1), 2: ("127.0.0.1", 2), 3: ("127.0.0.1", 3)}
BATCH = QuorumConfig().fetch_max_records


def record(i: int) -> dict[str, Any]:
    return {"type": "noop", "i": i}


class Broker:
    """A QuorumDriver as broker 2 with a durable log of `have` committed records, restarted."""

    def __init__(self, tmp_path: Path, have: int, voters: dict = VOTERS, broker_id: int = 2) -> None:
        self.log = InMemoryLog()
        if have:
            self.log.append([record(i) for i in range(have)], 1)
        self.published: list[list[tuple[int, int, dict]]] = []
        self.driver = QuorumDriver(
            broker_id, voters, self.log, tmp_path, QuorumConfig(), self.published.append, lambda *a: None, 42
        )
        self.driver.peers = {}  # nothing leaves: we play the controller by hand
        self.fetches: list[FetchRequest] = []
        original = self.driver._execute

        def execute(outputs: list) -> None:
            self.fetches += [o.msg for o in outputs if isinstance(getattr(o, "msg", None), FetchRequest)]
            original(outputs)

        self.driver._execute = execute  # type: ignore[method-assign]

    def answer(self, controller_log: list[dict], committed: int) -> None:
        """The controller (broker 1, epoch 1) answers our last fetch."""
        req = self.fetches[-1]
        records = tuple(
            (o, 1, controller_log[o])
            for o in range(req.fetch_offset, min(len(controller_log), req.fetch_offset + BATCH))
        )
        resp = FetchResponse(1, 1, 1, records, committed, None, None, None, req.fetch_offset, req.last_fetched_epoch)
        self.driver.receive(resp.to_wire())


def test_a_restarted_broker_publishes_nothing_until_caught_up_then_everything_at_once(tmp_path: Path):
    async def run() -> None:
        controller_log = [record(i) for i in range(2500)]
        b = Broker(tmp_path, have=5)
        b.driver.receive(BeginEpoch(1, 1).to_wire())  # learns the controller: fetches from offset 5
        assert b.fetches[-1].fetch_offset == 5 and b.fetches[-1].incarnation == 42
        b.answer(controller_log, 2500)  # records 5..1004: committed up to 1005 locally, but 2500 exist
        assert b.driver.catch_up_to == 2500 and b.published == [] and b.driver.applied == 0
        b.answer(controller_log, 2500)  # ..2004
        assert b.published == [] and not b.driver.caught_up
        b.answer(controller_log, 2500)  # ..2499: caught up
        assert b.driver.caught_up and len(b.published) == 1
        assert [o for o, _, _ in b.published[0]] == list(range(2500)) and b.driver.applied == 2500
        # From then on, committed records are handed over as they commit.
        controller_log.append(record(2500))
        b.answer(controller_log, 2501)
        assert [o for o, _, _ in b.published[1]] == [2500]

    asyncio.run(run())


def test_the_catch_up_target_is_the_first_answer_not_a_moving_one(tmp_path: Path):
    async def run() -> None:
        controller_log = [record(i) for i in range(1500)]
        b = Broker(tmp_path, have=0)
        b.driver.receive(BeginEpoch(1, 1).to_wire())
        b.answer(controller_log, 1500)
        controller_log += [record(i) for i in range(1500, 3000)]
        b.answer(controller_log, 3000)  # reached 1500 (the target): publish, although 3000 now exist
        assert b.driver.caught_up and [o for o, _, _ in b.published[0]][-1] == 1999

    asyncio.run(run())


def test_a_broker_with_everything_publishes_on_the_first_answer(tmp_path: Path):
    async def run() -> None:
        b = Broker(tmp_path, have=10)
        b.driver.receive(BeginEpoch(1, 1).to_wire())
        b.answer([record(i) for i in range(10)], 10)
        assert len(b.published) == 1 and len(b.published[0]) == 10

    asyncio.run(run())


def test_a_single_broker_starts_at_once(tmp_path: Path):
    async def run() -> None:
        b = Broker(tmp_path, have=3, voters={1: ("127.0.0.1", 1)}, broker_id=1)
        b.driver.start()
        for _ in range(50):
            if b.published:
                break
            await asyncio.sleep(0.01)
        b.driver.stop()
        # It elects itself, its log is the committed one: everything, plus its leader_change record.
        assert b.driver.caught_up and [o for o, _, _ in b.published[0]] == [0, 1, 2, 3]

    asyncio.run(run())


def test_fetches_teach_the_driver_each_brokers_newest_incarnation(tmp_path: Path):
    async def run() -> None:
        b = Broker(tmp_path, have=0)
        assert b.driver.broker_incarnation(2) == 42  # our own
        assert b.driver.broker_incarnation(3) == 0
        b.driver.receive(FetchRequest(1, 3, 0, 0, 100).to_wire())
        b.driver.receive(FetchRequest(1, 3, 0, 0, 90).to_wire())  # a late fetch of the earlier process
        assert b.driver.broker_incarnation(3) == 100
        b.driver.receive(["fq", 1, 3, 0, 0])  # a broker that sends none
        b.driver.receive(FetchRequest(1, 9, 0, 0, 500).to_wire())  # not a voter
        assert b.driver.broker_incarnation(3) == 100 and b.driver.broker_incarnation(9) == 0

    asyncio.run(run())


def test_incarnations_grow_across_restarts(tmp_path: Path):
    first = next_incarnation(tmp_path)
    second = next_incarnation(tmp_path)
    assert second > first
    (tmp_path / "broker-incarnation").write_text('{"incarnation": 99999999999999}')  # a clock that went back
    assert next_incarnation(tmp_path) == 100000000000000
    (tmp_path / "broker-incarnation").unlink()  # state lost: the clock still puts it above the earlier ones
    assert next_incarnation(tmp_path) >= second
