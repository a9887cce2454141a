"""A follower's long-polling fetch on the leader (ReplicaManager.fetch_messages): woken by one partition, it
re-reads only what moved, not the thousands of idle partitions it also names after a flood (issue 25 §4),
and still answers every partition it was asked for."""

from __future__ import annotations

import asyncio

from broker.log.manager import LogManager
from broker.metadata.image import PartitionState
from broker.replica.partition import FetchSpec, Partition
from broker.replica.replica_manager import ReplicaManager
from tests.unit.test_log_support import FakeClock, batch, config, headers

N = 200


def leader_with_partitions(tmp_path) -> tuple[ReplicaManager, LogManager]:
    m = LogManager([tmp_path], config(), clock=FakeClock())
    m.startup()
    rm = ReplicaManager(1, m, lambda t: config(), 30_000, lambda *a: None)
    for i in range(N):
        part = Partition("t", i, m.get_or_create_log("t", i, defer_files=True), 1, 1, 30_000, lambda *a: None)
        part.apply_state(PartitionState(i, 1, 3, [1, 2], [1, 2]), 0)
        rm.partitions[("t", i)] = part
    return rm, m


def test_a_woken_follower_fetch_rereads_only_what_moved_and_answers_everything(tmp_path):
    rm, m = leader_with_partitions(tmp_path)
    specs = [FetchSpec(("t", i), 0, 1 << 20, 3, -1) for i in range(N)]
    reads: list[tuple[str, int]] = []
    real_read = rm.read

    def counting_read(spec: FetchSpec, replica_id: int):
        reads.append(spec.tp)
        return real_read(spec, replica_id)

    rm.read = counting_read  # type: ignore[method-assign]

    async def scenario():
        fetch = asyncio.ensure_future(rm.fetch_messages(specs, 5000, 1, 16 << 20, replica_id=2))
        await asyncio.sleep(0.05)
        assert not fetch.done() and len(reads) == N  # one pass, then the long poll
        rm.partitions[("t", 7)].append_as_leader(batch(2), 1, 0)
        return await asyncio.wait_for(fetch, 5)

    results = asyncio.run(scenario())
    assert reads[N:] == [("t", 7)]  # woken by partition 7: only it is read again
    assert sorted(results) == [("t", i) for i in range(N)]
    assert [h.record_count for h in headers(results[("t", 7)].records)] == [2]
    assert all(r.error == 0 and r.records == b"" and r.log_end_offset == 0 for tp, r in results.items() if tp[1] != 7)
    m.shutdown()


def test_a_partition_that_changed_leader_or_went_away_while_waiting_is_answered_again(tmp_path):
    rm, m = leader_with_partitions(tmp_path)
    specs = [FetchSpec(("t", i), 0, 1 << 20, 3, -1) for i in range(N)]

    async def scenario():
        fetch = asyncio.ensure_future(rm.fetch_messages(specs, 5000, 1, 16 << 20, replica_id=2))
        await asyncio.sleep(0.05)
        rm.partitions[("t", 3)].apply_state(PartitionState(3, 2, 4, [1, 2], [1, 2]), 0)  # 2 leads now
        rm.partitions[("t", 3)].wake()
        return await asyncio.wait_for(fetch, 5)

    results = asyncio.run(scenario())
    assert results[("t", 3)].error != 0  # NOT_LEADER_OR_FOLLOWER, read again after the change
    assert all(r.error == 0 for tp, r in results.items() if tp[1] != 3)
    m.shutdown()


def test_a_parked_follower_fetch_is_answered_in_the_turn_after_the_append(tmp_path):
    """Kafka's DelayedFetch completes as the append happens: here the parked fetch resumes in the very next loop
    turn and returns then (not turns later through asyncio.wait's callbacks), a wait saved in every acks=all round."""
    rm, m = leader_with_partitions(tmp_path)
    specs = [FetchSpec(("t", i), 0, 1 << 20, 3, -1) for i in range(3)]
    turns = [0]
    counting = [True]

    def tick() -> None:  # runs once per loop turn
        turns[0] += 1
        if counting[0]:
            asyncio.get_running_loop().call_soon(tick)

    async def fetch_then_mark():
        results = await rm.fetch_messages(specs, 5000, 1, 16 << 20, replica_id=2)
        return results, turns[0]

    async def scenario():
        fetch = asyncio.ensure_future(fetch_then_mark())
        await asyncio.sleep(0.05)
        assert not fetch.done()
        asyncio.get_running_loop().call_soon(tick)
        await asyncio.sleep(0)  # resumed after tick's first run, in the same turn
        appended_at = turns[0]
        rm.partitions[("t", 1)].append_as_leader(batch(2), 1, 0)
        results, answered_at = await asyncio.wait_for(fetch, 5)
        counting[0] = False
        return results, answered_at - appended_at

    results, took = asyncio.run(scenario())
    assert [h.record_count for h in headers(results[("t", 1)].records)] == [2]
    assert took == 1, f"answered {took} turns after the append"
    m.shutdown()
