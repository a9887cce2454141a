"""LeaderElectionApis: Kafka's ElectLeaders (api 43), on both listeners, typed (net/schema/elect_leaders.py).

A preferred or unclean leader election changes the replicated metadata, so it runs on the active controller
(forwarded there from any broker in an ENVELOPE, KIP-590: ControllerChannel.serve_or_forward_typed) through
ControllerService.elect_leaders, the same code path the automatic rebalance takes. It needs ALTER on the
cluster, as in Kafka (decided by broker/server/authorization.py). Each partition gets its own outcome (Kafka's codes):
elected, ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE or
UNKNOWN_TOPIC_OR_PARTITION. `topic_partitions` null means every partition, and the answer then lists only those
that needed an election, as Kafka's does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Awaitable

from broker.network.server import ConnectionContext
from net.errors import ErrorCode, KafkaLiteError
from net.protocol import ApiKey, ElectionType
from net.schema.elect_leaders import (
    ElectLeadersRequest,
    ElectLeadersResponse,
    PartitionResult,
    ReplicaElectionResult,
)

if TYPE_CHECKING:
    from broker.controller.channel import ControllerChannel
    from broker.controller.service import ControllerService


def refused(req: ElectLeadersRequest, code: int, message: str) -> ElectLeadersResponse:
    """The whole request refused: `code` at the top and in every partition asked for (Kafka's answer)."""
    return ElectLeadersResponse(
        error_code=code,
        replica_election_results=tuple(
            ReplicaElectionResult(
                topic=t.topic,
                partition_result=tuple(
                    PartitionResult(partition_id=p, error_code=code, error_message=message) for p in t.partitions
                ),
            )
            for t in req.topic_partitions or ()
        ),
    )


class LeaderElectionApis:
    def __init__(self, controller: "ControllerService", channel: "ControllerChannel") -> None:
        self.controller = controller
        self.channel = channel
        self.handlers = {ApiKey.ELECT_LEADERS: self.elect_leaders}

    def elect_leaders(self, req: ElectLeadersRequest, ctx: ConnectionContext) -> Awaitable[ElectLeadersResponse]:
        return self.channel.serve_or_forward_typed(req, ctx, lambda: self._elect(req))

    async def _elect(self, req: ElectLeadersRequest) -> ElectLeadersResponse:
        try:
            election_type = ElectionType(req.election_type)
        except ValueError:
            msg = f"election_type must be 0 (PREFERRED) or 1 (UNCLEAN), got {req.election_type}"
            return refused(req, int(ErrorCode.INVALID_REQUEST), msg)
        asked = req.topic_partitions
        partitions = None if asked is None else [(t.topic, p) for t in asked for p in t.partitions]
        try:
            outcomes = await self.controller.elect_leaders(election_type, partitions)
        except KafkaLiteError as e:  # not the controller, or the elections not committed: every row says so
            return refused(req, int(e.code), str(e))
        by_topic: dict[str, list[PartitionResult]] = {}
        for (topic, partition), outcome in sorted(outcomes.items()):
            row = PartitionResult(partition_id=partition)
            if outcome is not None:
                row.error_code, row.error_message = int(outcome.code), str(outcome)
            by_topic.setdefault(topic, []).append(row)
        results = tuple(ReplicaElectionResult(topic=t, partition_result=tuple(rows)) for t, rows in by_topic.items())
        return ElectLeadersResponse(replica_election_results=results)
