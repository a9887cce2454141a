"""broker/network/request_order.py: which request of a connection may start while earlier ones wait."""

from __future__ import annotations

from broker.network.request_order import RequestOrder, Unordered
from net.protocol import ApiKey


def test_anything_waits_for_an_earlier_request_with_effects():
    order = RequestOrder()
    order.started(ApiKey.OFFSET_COMMIT)
    assert not any(order.may_start(api) for api in (ApiKey.OFFSET_FETCH, ApiKey.PRODUCE, ApiKey.FETCH))
    assert order.may_start(None)  # an answer the codec gives itself (ApiVersions) reads no state
    order.finished(ApiKey.OFFSET_COMMIT)
    assert order.may_start(ApiKey.OFFSET_FETCH)


def test_produces_overlap_produces_but_nothing_else():
    order = RequestOrder()
    order.started(ApiKey.PRODUCE)
    order.started(ApiKey.PRODUCE)
    assert order.may_start(ApiKey.PRODUCE)
    assert not order.may_start(ApiKey.LIST_OFFSETS) and not order.may_start(ApiKey.FETCH)
    order.finished(ApiKey.PRODUCE)
    assert not order.may_start(ApiKey.LIST_OFFSETS)
    order.finished(ApiKey.PRODUCE)
    assert order.may_start(ApiKey.LIST_OFFSETS)


def test_no_request_waits_for_a_fetch():
    order = RequestOrder()
    order.started(ApiKey.FETCH)
    assert order.may_start(ApiKey.OFFSET_COMMIT) and order.may_start(ApiKey.PRODUCE) and order.may_start(ApiKey.FETCH)
    order.started(ApiKey.PRODUCE)
    assert order.may_start(ApiKey.PRODUCE) and not order.may_start(ApiKey.METADATA)


def test_the_inter_broker_order_holds_nothing():
    order = Unordered()
    order.started(ApiKey.ALTER_PARTITION)
    assert order.may_start(ApiKey.FETCH) and order.may_start(ApiKey.ALTER_PARTITION)
