"""A metadata change is visible on every broker when its request is answered (issue 27, section 1).

A client that creates a topic through one broker and at once asks another (a Metadata refresh, ListOffsets at the
new leader) must not get UNKNOWN_TOPIC_OR_PARTITION; an ACL created through one broker is in every broker's
DescribeAcls answer. The controller answers only once every live broker has applied the change
(broker/metadata/propagation.py). Before that, 5 of 30 tries failed.
"""

from __future__ import annotations

import asyncio

import pytest

from client.cluster import ClusterMetadata, metadata_request
from net.acl import AclBinding, AclBindingFilter, AclOperation, AclPermission, PatternType, ResourceType
from net.connection import BrokerConnection
from net.protocol import ApiKey
from tests.integration.cluster_harness import ClusterHarness

ROUNDS = 30


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # The ACL authorizer, with the plaintext clients of this test as super users: ACLs are stored and described.
    h = ClusterHarness(tmp_path_factory.mktemp("visibility"), 3, ["authorizer=acl", "super.users=User:ANONYMOUS"])
    try:
        yield h.start()
    finally:
        h.cleanup()


async def _connections(cluster: ClusterHarness) -> dict[int, BrokerConnection]:
    conns = {}
    for bid, b in cluster.brokers.items():
        conns[bid] = BrokerConnection("127.0.0.1", b.port, client_id="visibility")
        await conns[bid].connect()
    return conns


def test_a_created_topic_is_known_to_every_broker_when_the_answer_arrives(cluster):
    async def run() -> list[str]:
        conns = await _connections(cluster)
        misses = []
        try:
            for i in range(ROUNDS):
                name, via = f"seen-{i}", conns[1 + i % 3]
                topic = {"name": name, "num_partitions": 1, "replication_factor": 2 + i % 2}
                answer = await via.request(ApiKey.CREATE_TOPICS, {"topics": [topic]})
                assert answer["topics"][0][1] == 0, answer
                for bid, conn in conns.items():
                    md = ClusterMetadata()
                    md.update(await conn.call(metadata_request([name])), [name])
                    meta = md.topics.get(name)
                    leader = md.leader(name, 0)
                    if meta is None or meta.error or leader is None:
                        misses.append(f"round {i}: broker {bid} does not know {name}")
                        continue
                    # ...and the leader it names serves the partition at once.
                    body = {"topics": [[name, [[0, -1]]]]}
                    offsets = await conns[leader].request(ApiKey.LIST_OFFSETS, body)
                    code = offsets["topics"][0][1][0][1]
                    if code:
                        misses.append(f"round {i}: leader {leader} answers ListOffsets for {name} with {code}")
        finally:
            for c in conns.values():
                c.close()
        return misses

    assert asyncio.run(run()) == []


def test_a_created_acl_is_described_by_every_broker_when_the_answer_arrives(cluster):
    async def run() -> list[str]:
        conns = await _connections(cluster)
        misses = []
        try:
            for i in range(ROUNDS):
                user = f"User:seen-{i}"
                binding = AclBinding(
                    ResourceType.TOPIC, "t", PatternType.LITERAL, user, "*", AclOperation.READ, AclPermission.ALLOW
                )
                answer = await conns[1 + i % 3].request(ApiKey.CREATE_ACLS, {"creations": [binding.to_wire()]})
                assert answer["results"] == [[0, None]], answer
                wanted = AclBindingFilter(principal=user)
                for bid, conn in conns.items():
                    found = await conn.request(ApiKey.DESCRIBE_ACLS, {"filter": wanted.to_wire()})
                    if [AclBinding.from_wire(r) for r in found["bindings"]] != [binding]:
                        misses.append(f"round {i}: broker {bid} does not describe {user}'s ACL")
        finally:
            for c in conns.values():
                c.close()
        return misses

    assert asyncio.run(run()) == []
