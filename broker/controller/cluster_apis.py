"""ClusterApis: Kafka's DescribeQuorum (55) and ListConfigResources (74), typed end to end (net/schema/).

DescribeQuorum describes the controller quorum as KRaft does: its one partition `__cluster_metadata-0`, the leader
(the active controller), its epoch, the high watermark (the committed end of the metadata log) and each voter's
log end offset and last fetch as the leader tracks them (election/quorum.py). Only the leader knows the voters'
progress: any other broker forwards a client's request to it over the inter-broker listener, and answers
NOT_LEADER_OR_FOLLOWER to a forwarded one (the leader moved meanwhile), so a request never travels twice. In
ZooKeeper mode there is no such quorum: UNSUPPORTED_VERSION, as a ZooKeeper-mode Kafka broker answers.

ListConfigResources (KIP-1142) lists the resources that configs can be described for: topics and brokers (the types
asked, or all supported ones); client metrics resources and groups with configs do not exist here, so those lists
are empty. Only v1 is served: v0 (Kafka's ListClientMetricsResources) answers client metrics resources alone, in a
layout without the resource type, which a handler that does not see the version could not tell apart.
BROKER_LOGGER (8) is not served: UNSUPPORTED_VERSION, Kafka's answer for a type it does not support.

Authorization is decided before these run (broker/server/authorization.py): DESCRIBE on the cluster for DescribeQuorum,
DESCRIBE_CONFIGS on the cluster for ListConfigResources, as Kafka's KafkaApis.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from broker.controller.quorum_driver import QuorumDriver
from broker.metadata.metadata_log import METADATA_TOPIC
from broker.network.server import INTER_BROKER_LISTENER, ConnectionContext, error_body
from net.errors import ErrorCode, KafkaLiteError
from net.messages import MessageError, decode, encode
from net.protocol import ApiKey
from net.schema.describe_quorum import (
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    DescribeQuorumResponsePartitionData,
    DescribeQuorumResponseTopicData,
    Listener,
    Node,
    ReplicaState,
)
from net.schema.list_config_resources import ConfigResource, ListConfigResourcesRequest, ListConfigResourcesResponse

if TYPE_CHECKING:
    from broker.controller.channel import ControllerChannel
    from broker.metadata.image import MetadataImage
    from election.coordination import Coordination

log = logging.getLogger("kafkalite.api")
FORWARD_TIMEOUT_S = 10.0
# Kafka's ConfigResource.Type ids
TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
SUPPORTED_CONFIG_RESOURCES = (TOPIC, BROKER, CLIENT_METRICS, GROUP)


class ClusterApis:
    def __init__(
        self, broker_id: int, coordination: "Coordination", channel: "ControllerChannel", image: "MetadataImage"
    ) -> None:
        self.broker_id = broker_id
        self.coordination = coordination
        self.channel = channel  # its peers reach the quorum leader
        self.image = image
        self.handlers: dict[ApiKey, Callable[..., object]] = {
            ApiKey.DESCRIBE_QUORUM: self.describe_quorum,
            ApiKey.LIST_CONFIG_RESOURCES: self.list_config_resources,
        }

    # --- DescribeQuorum -----------------------------------------------------------------------------------

    def describe_quorum(
        self, req: DescribeQuorumRequest, ctx: ConnectionContext
    ) -> DescribeQuorumResponse | dict[str, Any] | Awaitable[DescribeQuorumResponse | dict[str, Any]]:
        driver = self.coordination
        if not isinstance(driver, QuorumDriver):
            return error_body(ErrorCode.UNSUPPORTED_VERSION, "no controller quorum in ZooKeeper mode")
        asked = [(t.topic_name, p.partition_index) for t in req.topics for p in t.partitions]
        if asked != [(METADATA_TOPIC, 0)]:
            return _partition_error(req, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        node = driver.node
        leader = node.leader_id
        if leader == self.broker_id:
            return self._describe(driver)
        if ctx.listener == INTER_BROKER_LISTENER or leader is None:
            return _partition_error(req, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return self._forward(req, leader)

    async def _forward(self, req: DescribeQuorumRequest, leader: int) -> DescribeQuorumResponse | dict[str, Any]:
        """A client's request, to the quorum leader once (Kafka's brokers forward it to the active controller)."""
        try:
            body: Any = encode(req)  # a typed body: the message's array, as every native typed request
            answer: Any = await self.channel.peers.request(leader, ApiKey.DESCRIBE_QUORUM, body, FORWARD_TIMEOUT_S)
        except (KafkaLiteError, TimeoutError, OSError) as e:
            log.info("could not forward DescribeQuorum to the quorum leader %d: %s", leader, e)
            return _partition_error(req, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if isinstance(answer, dict):
            return answer
        try:
            return decode(DescribeQuorumResponse, answer)
        except MessageError as e:
            return error_body(ErrorCode.UNKNOWN_SERVER_ERROR, f"malformed DescribeQuorum answer of {leader}: {e}")

    def _describe(self, driver: QuorumDriver) -> DescribeQuorumResponse:
        node = driver.node
        wall_ms, mono_ms = int(time.time() * 1000), int(time.monotonic() * 1000)
        own_end = driver.log_end_offset
        voters = []
        for v in sorted(driver.voters):
            if v == self.broker_id:
                end, fetched = own_end, wall_ms
            else:
                matched, last = node.follower_end(v), node.follower_last_fetch_ms(v)
                end = matched if matched is not None else -1
                fetched = wall_ms - (mono_ms - last) if last is not None else -1
            # Caught up as of its last fetch: its log matched ours to the end (the leader keeps no other time).
            voters.append(
                ReplicaState(
                    replica_id=v,
                    log_end_offset=end,
                    last_fetch_timestamp=fetched,
                    last_caught_up_timestamp=fetched if end >= own_end else -1,
                )
            )
        partition = DescribeQuorumResponsePartitionData(
            partition_index=0,
            leader_id=self.broker_id,
            leader_epoch=int(node.epoch),
            high_watermark=node.high_watermark,
            current_voters=tuple(voters),
        )
        nodes = tuple(
            Node(node_id=v, listeners=(Listener(name="CONTROLLER", host=host, port=port),))
            for v, (host, port) in sorted(driver.voters.items())
        )
        return DescribeQuorumResponse(
            topics=(DescribeQuorumResponseTopicData(topic_name=METADATA_TOPIC, partitions=(partition,)),),
            nodes=nodes,
        )

    # --- ListConfigResources ----------------------------------------------------------------------------

    def list_config_resources(
        self, req: ListConfigResourcesRequest, ctx: ConnectionContext
    ) -> ListConfigResourcesResponse:
        types = req.resource_types or SUPPORTED_CONFIG_RESOURCES
        if any(t not in SUPPORTED_CONFIG_RESOURCES for t in types):
            return ListConfigResourcesResponse(error_code=int(ErrorCode.UNSUPPORTED_VERSION))
        found: list[ConfigResource] = []
        if BROKER in types:
            brokers = sorted(b for b, info in self.image.brokers.items() if not info.fenced)
            found += [ConfigResource(resource_name=str(b), resource_type=BROKER) for b in brokers]
        if TOPIC in types:
            found += [ConfigResource(resource_name=t, resource_type=TOPIC) for t in sorted(self.image.topics)]
        # CLIENT_METRICS and GROUP: no client metrics subscriptions or group configs exist in Kafka Lite.
        return ListConfigResourcesResponse(config_resources=tuple(found))


def _partition_error(req: DescribeQuorumRequest, code: ErrorCode) -> DescribeQuorumResponse:
    """Kafka's DescribeQuorumRequest.getPartitionLevelErrorResponse: each partition asked, with `code`."""
    return DescribeQuorumResponse(
        topics=tuple(
            DescribeQuorumResponseTopicData(
                topic_name=t.topic_name,
                partitions=tuple(
                    DescribeQuorumResponsePartitionData(partition_index=p.partition_index, error_code=int(code))
                    for p in t.partitions
                ),
            )
            for t in req.topics
        )
    )
