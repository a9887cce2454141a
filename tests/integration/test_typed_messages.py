"""Typed messages (net/schema/, issue 26): ListOffsets, the first api whose handler takes and answers typed classes.

One handler serves three doors and they must agree: the native typed version (v1, a msgpack array checked field by
field), the native map version 0 that clients of the last release still send, and Kafka's binary protocol at
every served version. A value out of its Kafka type is refused with the field's path on both native versions,
before the handler sees it, and the connection goes on; a whole-request error on the Kafka listener is answered
in the client's version with the request's topics and partitions mirrored, as Kafka's getErrorResponse does.
"""

from __future__ import annotations

import asyncio
import re
import socket

import pytest
from kio.index import load_response_schema
from kio.serial import entity_reader

from client.sync import Producer
from net.connection import BrokerConnection
from net.errors import ErrorCode
from net.messages import encode
from net.protocol import ApiKey
from net.schema.list_offsets import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from tests.integration.cluster_harness import ClusterHarness
from tests.integration.test_kafka_protocol_errors import frame, read_frame

TOPIC = "typed"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    h = ClusterHarness(tmp_path_factory.mktemp("typed"), 1)
    try:
        h.start()
        h.create_topic(TOPIC, 2, 1)
        with Producer(h.bootstrap(), acks="all") as p:
            for i in range(3):
                p.send(TOPIC, f"v{i}".encode(), partition=0, timestamp_ms=1000 * (i + 1))
            p.flush()
        yield h
    finally:
        h.cleanup()


def _request(*partitions: tuple[int, int], epoch: int = -1) -> ListOffsetsRequest:
    return ListOffsetsRequest(
        replica_id=-1,
        topics=(
            ListOffsetsTopic(
                name=TOPIC,
                partitions=tuple(
                    ListOffsetsPartition(partition_index=p, timestamp=ts, current_leader_epoch=epoch)
                    for p, ts in partitions
                ),
            ),
        ),
    )


def _native(cluster: ClusterHarness, work):  # one connection to the native listener, for one coroutine
    async def run():
        conn = BrokerConnection("127.0.0.1", cluster[1].port, client_id="typed-test")
        await conn.connect()
        try:
            return await work(conn)
        finally:
            conn.close()

    return asyncio.run(run())


def test_typed_and_legacy_native_and_kafka_answer_the_same(cluster):
    async def work(conn):
        typed = await conn.call(_request((0, -2), (0, -1), (0, 2000), (1, -1)))
        legacy = await conn.request(ApiKey.LIST_OFFSETS, {"topics": [[TOPIC, [[0, -2], [0, -1], [0, 2000], [1, -1]]]]})
        return typed, legacy

    typed, legacy = _native(cluster, work)
    rows = [(p.partition_index, int(p.error_code), p.timestamp, p.offset) for p in typed.topics[0].partitions]
    assert rows == [(0, 0, -1, 0), (0, 0, -1, 3), (0, 0, 2000, 1), (1, 0, -1, 0)]
    assert legacy == {"topics": [[TOPIC, [list(r) for r in rows]]]}
    # Kafka's protocol, oldest and newest served version: the same offsets
    for version in (1, 9):
        with socket.create_connection(("127.0.0.1", cluster[1].kafka_port), timeout=10) as s:
            body = {"replica_id": -1, "topics": [{"name": TOPIC, "partitions": [
                {"partition_index": 0, "timestamp": 2000, "current_leader_epoch": -1}]}]}  # fmt: skip
            s.sendall(frame(2, version, 5, body))
            resp, _ = entity_reader(load_response_schema(2, version))(read_frame(s), 5 if version >= 6 else 4)
            (part,) = resp.topics[0].partitions
            assert (part.partition_index, int(part.error_code), part.offset) == (0, 0, 1)
            assert version == 1 or part.timestamp == 2000


def test_max_timestamp_and_the_local_and_tiered_specs_answer_as_kafka(cluster):
    """-3 (KIP-734): the record with the largest timestamp; -4/-5 (KIP-1005) as a Kafka without tiered storage:
    the log start, and none. On both listeners."""

    async def work(conn):
        return await conn.call(_request((0, -3), (0, -4), (0, -5)))

    rows = [(p.offset, p.timestamp, int(p.error_code)) for p in _native(cluster, work).topics[0].partitions]
    assert rows == [(2, 3000, 0), (0, -1, 0), (-1, -1, 0)]
    with socket.create_connection(("127.0.0.1", cluster[1].kafka_port), timeout=10) as s:
        parts = [{"partition_index": 0, "timestamp": ts, "current_leader_epoch": -1} for ts in (-3, -4, -5)]
        s.sendall(frame(2, 9, 6, {"replica_id": -1, "topics": [{"name": TOPIC, "partitions": parts}]}))
        resp, _ = entity_reader(load_response_schema(2, 9))(read_frame(s), 5)
        assert [(p.offset, p.timestamp) for p in resp.topics[0].partitions] == [r[:2] for r in rows]


@pytest.mark.parametrize(
    ("version", "body", "error"),
    [
        (
            1,
            lambda: _with(encode(_request((0, -1))), [2, 0, 1, 0, 0], 2**31),
            "partition_index 2147483648 is out of range",
        ),
        (1, lambda: _with(encode(_request((0, -1))), [2, 0, 1, 0, 2], 2**63), "out of range for int64"),
        (1, lambda: _with(encode(_request((0, -1))), [2, 0, 0], None), r"topics\[0\]\.name may not be null"),
        (1, lambda: encode(_request((0, -1)))[:2], "has 2 fields, ListOffsetsRequest has 3"),
        (0, lambda: {"topics": [[TOPIC, [[0, -1, 2**31]]]]}, "current_leader_epoch 2147483648 is out of range"),
        (0, lambda: {"topics": [[TOPIC, [[0]]]]}, r"must be \[partition, timestamp\(, leader epoch\)\]"),
        (0, lambda: {"topics": "all"}, "topics must be a list"),
    ],
    ids=["int32", "int64", "null-name", "arity", "v0-epoch", "v0-shape", "v0-topics"],
)
def test_a_field_out_of_its_type_is_refused_with_its_path_and_the_connection_goes_on(cluster, version, body, error):
    async def work(conn):
        refused = await conn.request(ApiKey.LIST_OFFSETS, body(), version)
        after = await conn.call(_request((0, -1)))
        return refused, after

    refused, after = _native(cluster, work)
    assert refused["error_code"] == ErrorCode.INVALID_REQUEST
    assert re.search(error, refused["error_message"]), refused
    assert after.topics[0].partitions[0].offset == 3  # the same connection still answers


def _with(wire: list, path: list[int], value: object) -> list:
    """`wire` with the value at `path` (indexes into the nested arrays) replaced."""
    at = wire
    for i in path[:-1]:
        at = at[i]
    at[path[-1]] = value
    return wire


def test_a_partition_that_cannot_exist_is_answered_not_crashed(cluster):
    async def work(conn):
        return await conn.call(_request((-1, -1), (7, -1)))

    answer = _native(cluster, work)
    codes = [int(p.error_code) for p in answer.topics[0].partitions]
    assert codes == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] * 2


def test_an_unserved_kafka_version_is_answered_in_its_own_layout_with_the_request_mirrored(cluster):
    with socket.create_connection(("127.0.0.1", cluster[1].kafka_port), timeout=10) as s:
        body = {"replica_id": -1, "topics": [{"name": TOPIC, "partitions": [
            {"partition_index": 1, "timestamp": -1, "current_leader_epoch": -1}]}]}  # fmt: skip
        s.sendall(frame(2, 10, 9, body))  # ListOffsets v10: Kafka has it, Kafka Lite serves 1-9
        resp, _ = entity_reader(load_response_schema(2, 10))(read_frame(s), 5)
        (topic,) = resp.topics
        assert topic.name == TOPIC and [(p.partition_index, int(p.error_code)) for p in topic.partitions] == [
            (1, ErrorCode.UNSUPPORTED_VERSION)
        ]
