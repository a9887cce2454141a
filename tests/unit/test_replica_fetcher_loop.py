"""The replica fetcher's loop (broker/replica/replica_fetcher.py ReplicaFetcher._run): the acknowledging fetch goes
out in the turn the previous answer was handled, and a partition joining cuts a long poll short
without ending the loop."""

from __future__ import annotations

import asyncio

from broker.replica.replica_fetcher import ReplicaFetcher
from net.schema.fetch import FetchRequest, FetchResponse
from tests.unit.test_replica_fetcher_backoff import asked_partitions, follower, idle_answer


class Turns:
    """Counts the event loop's turns: a callback that schedules itself again runs once per turn."""

    def __init__(self) -> None:
        self.n = 0
        self._on = True
        asyncio.get_running_loop().call_soon(self._tick)

    def _tick(self) -> None:
        self.n += 1
        if self._on:
            asyncio.get_running_loop().call_soon(self._tick)

    def stop(self) -> None:
        self._on = False


def test_the_next_fetch_goes_out_in_the_turn_the_answer_is_handled(tmp_path):
    async def scenario() -> None:
        turns = Turns()
        answered: list[int] = []
        asked: list[int] = []
        gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def leader(_leader_id: int, request: FetchRequest, _timeout: float) -> FetchResponse:
            asked.append(turns.n)
            if len(asked) == 1:
                await gate  # the leader answers when the test says
                answered.append(turns.n)
            elif len(asked) > 2:
                await asyncio.sleep(10)  # a long poll
            return idle_answer(request)

        f = ReplicaFetcher(1, 2, leader, max_wait_ms=10)
        f.add(follower(tmp_path, 0))
        await asyncio.sleep(0.01)
        gate.set_result(None)
        await asyncio.sleep(0.01)
        f.stop()
        turns.stop()
        assert len(asked) >= 2 and asked[1] - answered[0] <= 1, (asked, answered)

    asyncio.run(scenario())


def test_a_partition_joining_cuts_the_long_poll_short_and_the_loop_goes_on(tmp_path):
    async def scenario() -> None:
        asked: list[list[int]] = []

        async def leader(_leader_id: int, request: FetchRequest, _timeout: float) -> FetchResponse:
            asked.append(sorted(asked_partitions(request)))
            await asyncio.sleep(10)  # every fetch is a long poll that nothing answers
            return idle_answer(request)

        f = ReplicaFetcher(1, 2, leader, max_wait_ms=10_000)
        f.add(follower(tmp_path, 0))
        await asyncio.sleep(0.01)
        assert asked == [[0]]
        f.add(follower(tmp_path, 1))  # leader epoch 1 (a leader change): cuts the poll short
        await asyncio.sleep(0.01)
        assert asked == [[0], [0, 1]]  # at once, not after replica.fetch.wait.max.ms
        f.add(follower(tmp_path, 2))
        await asyncio.sleep(0.01)
        assert asked == [[0], [0, 1], [0, 1, 2]]  # and again: the loop survived the first cut
        assert f._task is not None and not f._task.done()
        f.stop()
        await asyncio.sleep(0.01)
        assert f._task.done()  # stop() ends it

    asyncio.run(scenario())
