"""GroupCoordinator.call: answers that an event gives to parked requests go out before the answer to a request
handled after that event, as Kafka sends them when the event happens (a leader's SyncGroup, parked until its
assignment is written, before a follower's SyncGroup that finds the group stable)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from broker.group.coordinator import GroupCoordinator
from broker.group.logic import GroupConfig
from broker.group.outputs import Reply


def test_a_parked_answer_is_not_overtaken_by_a_request_handled_after_its_event():
    async def scenario() -> list[str]:
        rm: Any = SimpleNamespace(add_marker_listener=lambda listener: None)
        gc = GroupCoordinator(rm, GroupConfig(), 1, 1000)
        done: list[str] = []
        parked: list[Any] = []

        async def request(name: str, fn: Any) -> None:
            await gc.call(fn)
            done.append(name)

        leader = asyncio.ensure_future(request("leader's sync", lambda token: parked.append(token) or []))
        await asyncio.sleep(0)  # the leader's SyncGroup waits for its assignment's write
        assert parked and not done
        # The follower's SyncGroup was read in the same turn of the loop as the write completed: its task is
        # queued first, and finds the group stable (answered at once) after the write's event answered the leader.
        follower = asyncio.ensure_future(request("follower's sync", lambda token: [Reply(token, {"error_code": 0})]))
        gc.run([Reply(parked[0], {"error_code": 0})])  # the assignment is durable: the parked leader is answered
        await asyncio.gather(leader, follower)
        return done

    assert asyncio.run(scenario()) == ["leader's sync", "follower's sync"]
