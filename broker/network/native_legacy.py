"""Native version 0 of the apis that now take typed bodies (net/protocol.py TYPED_SINCE), for one more release.

Before the typed messages of net/schema/, a native body was a map whose rows were positional lists
(docs/FORMAT.md §6). A client of that release still sends them; this module turns such a request into the
api's typed request and the typed answer back into the old map, so the handler sees one kind of request. The
typed request is checked field by field as a typed body is (net/messages.py), so a value out of its Kafka type
is refused the same way. Delete an api's entry one release after its typed version shipped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from net.messages import MessageError, decode, encode
from net.protocol import ApiKey
from net.schema.elect_leaders import ElectLeadersRequest, ElectLeadersResponse
from net.schema.elect_leaders import TopicPartitions as ElectLeadersTopic
from net.schema.init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from net.schema.list_offsets import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsResponse, ListOffsetsTopic


def _checked(message: Any) -> Any:
    """The message as a typed body read off the wire would be: every field within its type, or MessageError."""
    return decode(type(message), encode(message))


def _rows(body: dict[str, Any], what: str, entries_are_lists: bool = True) -> list[tuple[str, list[Any]]]:
    """[[topic, [partition entries]], ...] checked for shape (an entry a list starting with the partition, or
    with `entries_are_lists` False, the partition itself)."""
    topics = body.get("topics")
    if not isinstance(topics, list):
        raise MessageError("topics must be a list")
    out = []
    for entry in topics:
        if not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[1], list):
            raise MessageError("each topics entry must be [topic, [partition entries]]")
        for p in entry[1] if entries_are_lists else ():
            if not isinstance(p, list) or not p:
                raise MessageError(f"each {what} partition entry must be a list starting with the partition")
        out.append((entry[0], entry[1]))
    return out


def list_offsets_request(body: dict[str, Any]) -> ListOffsetsRequest:
    """v0: {"topics": [[topic, [[partition, timestamp(, current leader epoch)], ...]], ...]}."""
    topics = []
    for name, parts in _rows(body, "list offsets"):
        entries = []
        for p in parts:
            if len(p) not in (2, 3):
                raise MessageError("list offsets partition entry must be [partition, timestamp(, leader epoch)]")
            epoch = p[2] if len(p) == 3 else -1
            entries.append(ListOffsetsPartition(partition_index=p[0], timestamp=p[1], current_leader_epoch=epoch))
        topics.append(ListOffsetsTopic(name=name, partitions=tuple(entries)))
    return _checked(ListOffsetsRequest(replica_id=-1, topics=tuple(topics)))  # type: ignore[no-any-return]


def list_offsets_response(resp: ListOffsetsResponse) -> dict[str, Any]:
    """v0: {"topics": [[topic, [[partition, error code, timestamp, offset], ...]], ...]}."""
    return {
        "topics": [
            [t.name, [[p.partition_index, int(p.error_code), p.timestamp, p.offset] for p in t.partitions]]
            for t in resp.topics
        ]
    }


def elect_leaders_request(body: dict[str, Any]) -> ElectLeadersRequest:
    """v0: {"election_type": 0 or 1, "topics": [[topic, [partition, ...]], ...] or nil (every partition)}."""
    topics = None
    if body.get("topics") is not None:
        topics = []
        for name, parts in _rows(body, "elect leaders", entries_are_lists=False):
            topics.append(ElectLeadersTopic(topic=name, partitions=tuple(parts)))
    election_type = body.get("election_type", 0)
    return _checked(  # type: ignore[no-any-return]
        ElectLeadersRequest(election_type=election_type, topic_partitions=None if topics is None else tuple(topics))
    )


def elect_leaders_response(resp: ElectLeadersResponse) -> dict[str, Any]:
    """v0: {"error_code", "topics": [[topic, [[partition, error code, message], ...]], ...]} (and the first
    message as "error_message" when the request failed as a whole)."""
    topics = [
        [t.topic, [[p.partition_id, int(p.error_code), p.error_message] for p in t.partition_result]]
        for t in resp.replica_election_results
    ]
    body: dict[str, Any] = {"error_code": int(resp.error_code), "topics": topics}
    if resp.error_code:
        body["error_message"] = next((r[2] for _, rows in topics for r in rows if r[2]), None)
    return body


def init_producer_id_request(body: dict[str, Any]) -> InitProducerIdRequest:
    """Version 0 had no fields: an idempotent producer's id."""
    return InitProducerIdRequest()


def init_producer_id_response(resp: InitProducerIdResponse) -> dict[str, Any]:
    return {"error_code": resp.error_code, "producer_id": resp.producer_id, "producer_epoch": resp.producer_epoch}


# The apis whose native v0 was another api under this key, answered by that api's handler in its map form for
# one more release (broker/server/kafka_apis.py MAP_FORM_HANDLERS): DescribeTopicPartitions v0 was a Metadata request.
MAP_FORM_APIS = frozenset({ApiKey.DESCRIBE_TOPIC_PARTITIONS})

# api key -> (v0 body -> typed request, typed answer -> v0 body)
LEGACY: dict[int, tuple[Callable[[dict[str, Any]], Any], Callable[[Any], dict[str, Any]]]] = {
    ApiKey.LIST_OFFSETS: (list_offsets_request, list_offsets_response),
    ApiKey.ELECT_LEADERS: (elect_leaders_request, elect_leaders_response),
    ApiKey.INIT_PRODUCER_ID: (init_producer_id_request, init_producer_id_response),
}
