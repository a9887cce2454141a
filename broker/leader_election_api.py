"""LeaderElectionApis: Kafka's ElectLeaders (api 43), on both listeners.

A preferred or unclean leader election changes the replicated metadata, so it runs on the active controller
(forwarded there from any broker, KIP-590) through ControllerService.elect_leaders, the same code path the
automatic rebalance takes. It needs ALTER on the cluster, as in Kafka (decided by broker/authorization.py).
Each partition gets its own outcome (Kafka's codes): elected, ELECTION_NOT_NEEDED,
PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE or UNKNOWN_TOPIC_OR_PARTITION.
Body layouts are in docs/FORMAT.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Awaitable

from broker.network.server import BadRequest, ConnectionContext, as_list, error_body
from net.errors import KafkaLiteError
from net.protocol import ApiKey, ElectionType

if TYPE_CHECKING:
    from broker.controller_channel import ControllerChannel
    from broker.controller_service import ControllerService


def parse_partitions(topics: Any) -> list[tuple[str, int]] | None:
    """[[topic, [partition, ...]], ...] -> [(topic, partition), ...]; nil: every partition."""
    if topics is None:
        return None
    out = []
    for entry in as_list(topics, "topics"):
        if not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[0], str):
            raise BadRequest("each topics entry must be [topic, [partition, ...]]")
        for p in as_list(entry[1], "partitions"):
            if not isinstance(p, int) or isinstance(p, bool):
                raise BadRequest("partitions must be integers")
            out.append((entry[0], p))
    return out


def election_type_of(body: dict[str, Any]) -> ElectionType:
    value = body.get("election_type", int(ElectionType.PREFERRED))
    try:
        return ElectionType(value)
    except ValueError:
        raise BadRequest(f"election_type must be 0 (PREFERRED) or 1 (UNCLEAN), got {value!r}") from None


class LeaderElectionApis:
    def __init__(self, controller: "ControllerService", channel: "ControllerChannel") -> None:
        self.controller = controller
        self.channel = channel
        self.handlers = {ApiKey.ELECT_LEADERS: self.elect_leaders}

    def elect_leaders(self, body: dict[str, Any], ctx: ConnectionContext) -> dict[str, Any] | Awaitable[dict[str, Any]]:
        election_type = election_type_of(body)
        partitions = parse_partitions(body.get("topics"))
        return self.channel.serve_or_forward(ApiKey.ELECT_LEADERS, body, lambda: self._elect(election_type, partitions))

    async def _elect(self, election_type: ElectionType, partitions: list[tuple[str, int]] | None) -> dict[str, Any]:
        try:
            outcomes = await self.controller.elect_leaders(election_type, partitions)
        except KafkaLiteError as e:  # not the controller, or the elections not committed: nothing to report per row
            return error_body(e.code, str(e))
        by_topic: dict[str, list[list[Any]]] = {}
        for (topic, partition), outcome in sorted(outcomes.items()):
            row = [partition, 0, None] if outcome is None else [partition, int(outcome.code), str(outcome)]
            by_topic.setdefault(topic, []).append(row)
        return {"error_code": 0, "topics": [[t, rows] for t, rows in by_topic.items()]}
