"""Seeded fuzzing of the broker's front end: random and mutated frames never crash or stall it,
and never corrupt a log."""

from __future__ import annotations

import random
import socket
import struct

import msgpack
import pytest

from client.consumer import TopicPartition
from client.sync import Consumer
from net import batch as batch_fmt
from net.messages import encode
from net.protocol import ApiKey
from net.schema.fetch import FetchPartition, FetchRequest, FetchTopic
from tests.integration.test_protocol_errors import RawClient, assert_alive, make_topic

pytestmark = pytest.mark.timeout(120)


def mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        op = rng.random()
        if op < 0.5 and b:
            b[rng.randrange(len(b))] = rng.randrange(256)
        elif op < 0.7 and b:
            del b[rng.randrange(len(b)) :]
        else:
            b[rng.randrange(len(b) + 1) : 0] = rng.randbytes(rng.randint(1, 16))
    return bytes(b)


def test_fuzzed_requests(broker):
    make_topic(broker.bootstrap, "fz", 2)
    good = batch_fmt.build([[0, 0, b"k", b"value", None], [1, 1, None, b"v2", [["h", b"x"]]]], 1000, 1001)
    c = RawClient(broker.port)
    row = c.request(ApiKey.PRODUCE, {"acks": 1, "topics": [["fz", [[0, good]]]]})["topics"][0][1][0]
    assert row[1] == 0
    rng = random.Random(20261122)
    templates = [
        [ApiKey.PRODUCE, 0, 1, "f", {"acks": 1, "topics": [["fz", [[0, good]]]]}],
        [ApiKey.FETCH, 0, 1, "f", {"max_wait_ms": 0, "topics": [["fz", [[0, 0, 1000]]]]}],
        # Fetch's typed native v1 (issue 26 §1): the message's array, a consumer's and a follower's
        [
            ApiKey.FETCH,
            1,
            1,
            "f",
            encode(
                FetchRequest(topics=(FetchTopic(topic="fz", partitions=(FetchPartition(partition_max_bytes=1000),)),))
            ),
        ],
        [
            ApiKey.FETCH,
            1,
            1,
            "f",
            encode(
                FetchRequest(
                    replica_id=1,
                    session_epoch=0,
                    topics=(FetchTopic(topic="fz", partitions=(FetchPartition(partition_max_bytes=1000),)),),
                )
            ),
        ],
        [ApiKey.METADATA, 0, 1, "f", {"topics": ["fz"]}],
        [ApiKey.LIST_OFFSETS, 0, 1, "f", {"topics": [["fz", [[0, -1]]]]}],
        [ApiKey.CREATE_TOPICS, 0, 1, "f", {"topics": [{"name": "x", "num_partitions": 1}]}],
    ]
    for i in range(600):
        t = rng.choice(templates)
        if rng.random() < 0.5:
            # mutate the batch inside a valid frame: exercises header/CRC checks, not just msgpack
            body = dict(t[4]) if isinstance(t[4], dict) else t[4]
            if t[0] == ApiKey.PRODUCE:
                body = {"acks": 1, "topics": [["fz", [[rng.randrange(3), mutate(rng, good)]]]]}
            payload = msgpack.packb([t[0], t[1], i, "f", body], use_bin_type=True)
        else:
            payload = mutate(rng, msgpack.packb(t, use_bin_type=True))
        s = socket.create_connection(("127.0.0.1", broker.port), timeout=5)
        try:
            s.sendall(struct.pack(">I", len(payload)) + payload)
            s.settimeout(2)
            try:
                s.recv(65536)
            except (TimeoutError, ConnectionResetError):
                pass
        finally:
            s.close()
    assert broker.proc.poll() is None
    assert_alive(broker.port)
    # every record in the log is part of a whole, CRC-valid batch the consumer can decode
    with Consumer(broker.bootstrap, auto_offset_reset="earliest", max_poll_records=100000) as cons:
        tps = [TopicPartition("fz", 0), TopicPartition("fz", 1)]
        cons.assign(tps)
        ends = cons.list_offsets(tps, -1)
        got = []
        for _ in range(20):
            got.extend(cons.poll(500))
            if len(got) >= sum(ends.values()):
                break
    assert len(got) == sum(ends.values()) >= 2
    for p in (0, 1):
        offs = [r.offset for r in got if r.partition == p]
        assert offs == list(range(len(offs)))
