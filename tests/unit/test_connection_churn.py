"""When the listeners hand freed memory back to the kernel (broker/network/memory.py): after 256 connections
have closed, or after a flood's tail of 16+ once nothing comes or goes for a sweep; not per client goodbye."""

from __future__ import annotations

from broker.network.memory import ConnectionChurn, release_freed_memory


def churn(accepted: int) -> ConnectionChurn:
    c = ConnectionChurn()
    for _ in range(accepted):
        c.accepted()
    return c


def test_a_flood_that_closed_is_released_at_once():
    c = churn(300)
    assert not c.release_if_due(300)  # all still open
    assert c.release_if_due(44)  # 256 closed
    assert c.closed_since_release(44) == 0
    assert not c.release_if_due(44)


def test_the_tail_of_a_flood_is_released_once_it_settles():
    c = churn(300)
    assert c.release_if_due(0)  # 300 closed
    for _ in range(40):
        c.accepted()
    assert not c.release_if_due(20)  # 20 closed, still moving
    assert c.release_if_due(20)  # nothing came or went since: released
    assert not c.release_if_due(20)


def test_a_few_goodbyes_release_nothing():
    c = churn(10)
    assert not c.release_if_due(0)
    assert not c.release_if_due(0)  # settled, but only 10 closed


def test_glibc_is_there_to_call():
    assert release_freed_memory()  # Debian's Python runs on glibc: the call is made
