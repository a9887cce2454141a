"""ReassignmentApis: Kafka's AlterPartitionReassignments (45) and ListPartitionReassignments (46), typed
(net/schema/alter_partition_reassignments.py, list_partition_reassignments.py), on both listeners.

Both are the active controller's (forwarded there from any broker in an ENVELOPE, as ElectLeaders:
ControllerChannel.serve_or_forward_typed). The controller (broker/controller/logic.py ControllerLogic.reassign)
writes KIP-455's partition records: adding / removing replicas while the new ones catch up, the final replica
set once every target replica is in the ISR. Alter needs ALTER on the cluster, List DESCRIBE, as in Kafka
(broker/server/authorization.py). Per partition Kafka's codes: UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT,
NO_REASSIGNMENT_IN_PROGRESS (a cancel of nothing), INVALID_REPLICATION_FACTOR (v1, when not allowed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Awaitable

from broker.network.server import ConnectionContext
from net.errors import KafkaLiteError
from net.protocol import ApiKey
from net.schema.alter_partition_reassignments import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ReassignablePartitionResponse,
    ReassignableTopicResponse,
)
from net.schema.list_partition_reassignments import (
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    OngoingPartitionReassignment,
    OngoingTopicReassignment,
)

if TYPE_CHECKING:
    from broker.controller.channel import ControllerChannel
    from broker.controller.service import ControllerService


def refused_alter(
    req: AlterPartitionReassignmentsRequest, code: int, message: str
) -> AlterPartitionReassignmentsResponse:
    """The whole request refused: `code` at the top and in every partition asked for (Kafka's answer)."""
    return AlterPartitionReassignmentsResponse(
        error_code=code,
        error_message=message,
        allow_replication_factor_change=req.allow_replication_factor_change,
        responses=tuple(
            ReassignableTopicResponse(
                name=t.name,
                partitions=tuple(
                    ReassignablePartitionResponse(
                        partition_index=p.partition_index, error_code=code, error_message=message
                    )
                    for p in t.partitions
                ),
            )
            for t in req.topics
        ),
    )


class ReassignmentApis:
    def __init__(self, controller: "ControllerService", channel: "ControllerChannel") -> None:
        self.controller = controller
        self.channel = channel
        self.handlers = {
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: self.alter_reassignments,
            ApiKey.LIST_PARTITION_REASSIGNMENTS: self.list_reassignments,
        }

    def alter_reassignments(
        self, req: AlterPartitionReassignmentsRequest, ctx: ConnectionContext
    ) -> Awaitable[AlterPartitionReassignmentsResponse]:
        return self.channel.serve_or_forward_typed(req, ctx, lambda: self._alter(req))

    async def _alter(self, req: AlterPartitionReassignmentsRequest) -> AlterPartitionReassignmentsResponse:
        asked = [
            (t.name, p.partition_index, None if p.replicas is None else list(p.replicas))
            for t in req.topics
            for p in t.partitions
        ]
        try:
            outcomes = await self.controller.alter_reassignments(asked, req.allow_replication_factor_change)
        except KafkaLiteError as e:  # not the controller, or not committed: every row says so
            return refused_alter(req, int(e.code), str(e))
        responses = []
        for t in req.topics:
            rows = []
            for p in t.partitions:
                row = ReassignablePartitionResponse(partition_index=p.partition_index)
                outcome = outcomes.get((t.name, p.partition_index))
                if outcome is not None:
                    row.error_code, row.error_message = int(outcome.code), str(outcome)
                rows.append(row)
            responses.append(ReassignableTopicResponse(name=t.name, partitions=tuple(rows)))
        return AlterPartitionReassignmentsResponse(
            allow_replication_factor_change=req.allow_replication_factor_change, responses=tuple(responses)
        )

    def list_reassignments(
        self, req: ListPartitionReassignmentsRequest, ctx: ConnectionContext
    ) -> Awaitable[ListPartitionReassignmentsResponse]:
        return self.channel.serve_or_forward_typed(req, ctx, lambda: self._list(req))

    async def _list(self, req: ListPartitionReassignmentsRequest) -> ListPartitionReassignmentsResponse:
        asked = None if req.topics is None else [(t.name, p) for t in req.topics for p in t.partition_indexes]
        try:
            found = self.controller.list_reassignments(asked)
        except KafkaLiteError as e:
            return ListPartitionReassignmentsResponse(error_code=int(e.code), error_message=str(e))
        by_topic: dict[str, list[OngoingPartitionReassignment]] = {}
        for topic, st in found:
            by_topic.setdefault(topic, []).append(
                OngoingPartitionReassignment(
                    partition_index=st.partition,
                    replicas=tuple(st.replicas),
                    adding_replicas=tuple(st.adding_replicas),
                    removing_replicas=tuple(st.removing_replicas),
                )
            )
        topics = tuple(OngoingTopicReassignment(name=t, partitions=tuple(rows)) for t, rows in by_topic.items())
        return ListPartitionReassignmentsResponse(topics=topics)
