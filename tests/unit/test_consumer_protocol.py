"""The embedded consumer protocol is Kafka's ConsumerProtocol format (so Kafka clients and ours can share a
group); Kafka Lite 0.1's msgpack form is still read."""

from __future__ import annotations

import struct

import msgpack
import pytest

from net.consumer_protocol import Assignment, Subscription


def kstr(s: str) -> bytes:
    return struct.pack(">h", len(s)) + s.encode()


def test_round_trip_in_version_3():
    s = Subscription(("orders", "payments"), frozenset({("orders", 2), ("payments", 0)}), b"ud", 7, "rack-a")
    raw = s.encode()
    assert raw[:2] == b"\x00\x03"
    assert Subscription.decode(raw) == s
    a = Assignment(frozenset({("orders", 0), ("orders", 2)}), None)
    assert Assignment.decode(a.encode()) == a


def test_a_version_0_subscription_as_old_kafka_clients_write_it():
    # version 0: topics ["orders"], user_data null (kafka-python writes this layout)
    raw = struct.pack(">h", 0) + struct.pack(">i", 1) + kstr("orders") + struct.pack(">i", -1)
    s = Subscription.decode(raw)
    assert s.topics == ("orders",) and s.owned == frozenset() and s.user_data is None


def test_an_assignment_of_a_newer_version_is_read_by_its_known_fields():
    # a future version 9 with the v3 fields and something appended
    body = struct.pack(">i", 1) + kstr("t") + struct.pack(">iii", 2, 4, 5) + struct.pack(">i", -1)
    a = Assignment.decode(struct.pack(">h", 9) + body + b"\x00\x01future")
    assert a.partitions == frozenset({("t", 4), ("t", 5)})


def test_kafka_lite_0_1_msgpack_forms_are_still_read():
    sub = msgpack.packb({"topics": ["x"], "owned": [["x", [1]]], "user_data": None}, use_bin_type=True)
    assert Subscription.decode(sub) == Subscription(("x",), frozenset({("x", 1)}))
    asg = msgpack.packb({"partitions": [["x", [0, 3]]], "user_data": b"u"}, use_bin_type=True)
    assert Assignment.decode(asg) == Assignment(frozenset({("x", 0), ("x", 3)}), b"u")


@pytest.mark.parametrize("raw", [b"\x00", b"\x00\x03\x00\x00\x00\x05", b"\xff\xff"])
def test_garbage_is_a_value_error(raw):
    with pytest.raises(ValueError):
        Subscription.decode(raw)
