"""The authorization table: what every request needs, decided from what it does, before any handler runs.

`RULES` has one `Rule` per native api key (net/protocol.py ApiKey): the resource type, the operation and
whether it is asked for the request as a whole or for each item it names (Kafka's KafkaApis rules, see
broker/security/request_authorizer.py). `Authorization.authorize` is the one call KafkaApis.handle makes
for every request of both client listeners (the native one, and the Kafka one whose adapters turn each Kafka
request into a native body): it

1. shapes the body: a typed request (net/schema/) was checked field by field when it was decoded; of a map
   body, the fields that say what the request is about are checked (a topic name is a string, a topics list
   is `[[topic, [...]], ...]`). Keys an api does not define are read by neither the table nor the handler, so
   no extra key changes what is checked (the native v0 maps of the typed apis carrying both a single and a
   batched field, FindCoordinator's `key`/`keys`, OffsetFetch's `group_id`/`groups`, are refused as
   INVALID_REQUEST when read, broker/network/native_legacy.py);
2. extracts the resources from that shape and asks the ACL authorizer;
3. refuses the whole request (the right *_AUTHORIZATION_FAILED code, nothing runs), or hands the handler
   the same shaped body without the items it may not touch, and adds their rows (per-item error codes, as
   Kafka answers DescribeGroups, CreateTopics, Produce...) to the handler's answer.

A request a broker forwarded to the controller (`forwarded`, KIP-590) also needs CLUSTER_ACTION. An api
key without a rule is refused: a new api is closed until the table says what it needs.
"""

from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass, replace
from typing import Any, Callable

from broker.controller.leader_election_api import refused as refused_election
from broker.controller.reassignment_api import refused_alter
from broker.group.api import FETCH_ROWS_BEFORE_V8, FETCH_ROWS_V8
from broker.network.server import INTER_BROKER_LISTENER, BadRequest, ConnectionContext, as_list, error_body
from broker.replica.partition import FetchResult
from broker.replica.replica_manager import ProduceResult
from broker.security.request_authorizer import (
    CLUSTER_DENIED,
    GROUP_DENIED,
    TOPIC_DENIED,
    RequestAuthorizer,
    denied_message,
)
from broker.utils.repeated_log import RepeatedConditionLog
from net.acl import CLUSTER_NAME, AclOperation, ResourceType
from net.errors import ErrorCode
from net.protocol import ApiKey
from net.schema.add_partitions_to_txn import (
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnTopicResult,
)
from net.schema.alter_configs import AlterConfigsRequest, AlterConfigsResourceResponse
from net.schema.alter_partition_reassignments import AlterPartitionReassignmentsRequest
from net.schema.alter_share_group_offsets import (
    AlterShareGroupOffsetsResponsePartition,
    AlterShareGroupOffsetsResponseTopic,
)
from net.schema.base import ZERO_UUID
from net.schema.consumer_group_describe import DescribedGroup as ConsumerDescribedGroup
from net.schema.convert import error_response
from net.schema.create_partitions import CreatePartitionsTopicResult
from net.schema.create_topics import CreatableTopicResult
from net.schema.delete_groups import DeletableGroupResult
from net.schema.delete_records import DeleteRecordsPartitionResult, DeleteRecordsTopic, DeleteRecordsTopicResult
from net.schema.delete_share_group_offsets import DeleteShareGroupOffsetsResponseTopic
from net.schema.delete_share_group_state import DeleteStateResult
from net.schema.delete_share_group_state import PartitionResult as DeletePartitionResult
from net.schema.delete_topics import DeletableTopicResult
from net.schema.describe_cluster import DescribeClusterRequest
from net.schema.describe_configs import DescribeConfigsRequest, DescribeConfigsResult
from net.schema.describe_groups import DescribedGroup, DescribeGroupsRequest
from net.schema.describe_producers import PartitionResponse
from net.schema.describe_producers import TopicRequest as DescribeProducersTopic
from net.schema.describe_producers import TopicResponse as DescribeProducersTopicResponse
from net.schema.describe_share_group_offsets import DescribeShareGroupOffsetsResponseGroup
from net.schema.describe_topic_partitions import DescribeTopicPartitionsResponseTopic
from net.schema.describe_topic_partitions import TopicRequest as DescribeTopicRequest
from net.schema.describe_transactions import TransactionState as DescribedTxnState
from net.schema.elect_leaders import ElectLeadersRequest
from net.schema.fetch import FetchableTopicResponse, FetchRequest
from net.schema.find_coordinator import Coordinator, FindCoordinatorRequest, FindCoordinatorResponse
from net.schema.incremental_alter_configs import AlterConfigsResourceResponse as IncrementalAlterConfigsResourceResponse
from net.schema.incremental_alter_configs import IncrementalAlterConfigsRequest
from net.schema.initialize_share_group_state import InitializeStateResult
from net.schema.initialize_share_group_state import PartitionResult as InitializePartitionResult
from net.schema.list_offsets import ListOffsetsRequest, ListOffsetsTopicResponse
from net.schema.messages import MESSAGES
from net.schema.metadata import MetadataRequest, MetadataRequestTopic, MetadataResponseTopic
from net.schema.offset_commit import OffsetCommitResponseTopic
from net.schema.offset_delete import OffsetDeleteResponseTopic
from net.schema.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
)
from net.schema.offset_for_leader_epoch import OffsetForLeaderTopicResult
from net.schema.produce import ProduceRequest, ProduceResponse, TopicProduceData, TopicProduceResponse
from net.schema.read_share_group_state import PartitionResult as ReadPartitionResult
from net.schema.read_share_group_state import ReadStateResult
from net.schema.read_share_group_state_summary import PartitionResult as SummaryPartitionResult
from net.schema.read_share_group_state_summary import ReadStateSummaryResult as SummaryStateResult
from net.schema.share_acknowledge import PartitionData as ShareAckPartition
from net.schema.share_acknowledge import ShareAcknowledgeTopicResponse
from net.schema.share_fetch import PartitionData as ShareFetchPartition
from net.schema.share_fetch import ShareFetchableTopicResponse
from net.schema.share_group_describe import DescribedGroup as DescribedShareGroup
from net.schema.txn_offset_commit import TxnOffsetCommitResponseTopic
from net.schema.write_share_group_state import PartitionResult as WritePartitionResult
from net.schema.write_share_group_state import WriteStateResult
from net.schema.write_txn_markers import WriteTxnMarkersResponse

log = logging.getLogger("kafkalite.security")
# Broker-only requests refused to a principal without ClusterAction, by (api, principal): the first logged, then a
# count at most every 10 s (a client may send them as fast as it likes; one line each would fill the disk).
_refusals = RepeatedConditionLog(log)
Op = AclOperation
TOPIC, GROUP, CLUSTER, TXN = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
_DENIED_CODE = {
    TOPIC: TOPIC_DENIED,
    GROUP: GROUP_DENIED,
    CLUSTER: CLUSTER_DENIED,
    TXN: int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
}
Finish = Callable[[Any], Any]


class Decision:
    """The table's verdict: `answer` (the request is refused; None with `refused` means no answer, a
    one-way message), or the shaped `body` to hand the handler and `finish`, which adds the refused items'
    rows to its answer."""

    __slots__ = ("refused", "answer", "body", "finish")

    def __init__(self, body: Any, finish: Finish | None = None, *, refused: bool = False, answer: Any = None):
        self.refused = refused
        self.answer = answer
        self.body = body
        self.finish = finish

    def complete(self, result: Any) -> Any:
        """The handler's result (a body, None, or an awaitable of either) with the refused rows added."""
        if self.finish is None:
            return result
        if not inspect.isawaitable(result):
            return self.finish(result)
        finish = self.finish

        async def finished() -> Any:
            return finish(await result)

        return finished()


@dataclass(frozen=True)
class Need:
    """One authorization a request needs: `op` on a `resource`, for the `scope` ("request": the whole request
    is refused without it; "each": every item without it is answered with its own error code). `alt` is
    Kafka's alternative where there is one (CREATE on the cluster or the topic...)."""

    resource: ResourceType
    op: AclOperation
    scope: str = "request"
    alt: str = ""


@dataclass(frozen=True)
class Rule:
    needs: tuple[Need, ...]
    decide: Callable[["Authorization", Any, ConnectionContext], Decision]
    note: str = ""


# --- shaping: the fields that name what a request touches, checked ---------------------------------------


def _name(body: dict[str, Any], key: str) -> str:
    v = body.get(key)
    if not isinstance(v, str):
        raise BadRequest(f"field {key!r} must be a string")
    return v


def _topic_entries(body: dict[str, Any], key: str = "topics") -> list[list[Any]]:
    """[[topic, [partition entries]], ...]: the topics named and what the handler does on each."""
    out = []
    for entry in as_list(body.get(key), key):
        if not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[0], str):
            raise BadRequest(f"each {key} entry must be [topic, [partition entries]]")
        as_list(entry[1], "partitions")
        out.append(entry)
    return out


def _partition(p: Any) -> Any:
    return p[0] if isinstance(p, list) and p else p


def _add(key: str, rows: list[Any], first: bool = False) -> Finish:
    """Adds refused rows to the answer's list `key`; an answer without it (a request-level error, no answer
    for acks=0) is left as it is."""

    def finish(answer: Any) -> Any:
        if isinstance(answer, dict) and isinstance(answer.get(key), list):
            return dict(answer, **{key: rows + answer[key] if first else answer[key] + rows})
        return answer

    return finish


def _then(*steps: Finish | None) -> Finish | None:
    todo = [s for s in steps if s is not None]
    if not todo:
        return None

    def finish(answer: Any) -> Any:
        for s in todo:
            answer = s(answer)
        return answer

    return finish


class Authorization:
    """Applies RULES with the broker's ACL authorizer (everything allowed without `authorizer=acl`)."""

    def __init__(self, authz: RequestAuthorizer, auto_create_topics: bool = False) -> None:
        self.authz = authz
        self.auto_create_topics = auto_create_topics  # auto.create.topics.enable: Metadata may create

    def authorize(self, api: int, body: dict[str, Any], ctx: ConnectionContext) -> Decision:
        """Raises BadRequest for a body without the api's shape."""
        rule: Rule | None = RULES.get(api)  # type: ignore[call-overload]  # an int finds its ApiKey member
        if rule is None:
            return self.refuse(CLUSTER, Op.ALL, f"api {api}", ctx)
        if isinstance(body, dict) and body.get("forwarded") and not self.authz.cluster(ctx, Op.CLUSTER_ACTION):
            return self.refuse_broker_only(api, ctx)
        return rule.decide(self, body, ctx)

    def broker(self, ctx: ConnectionContext) -> bool:
        """What only brokers send (the heartbeat listener asks this too)."""
        return self.authz.cluster(ctx, Op.CLUSTER_ACTION)

    # --- verdicts ---

    def refuse(self, rt: ResourceType, op: AclOperation, what: str, ctx: ConnectionContext) -> Decision:
        code = _DENIED_CODE.get(rt, CLUSTER_DENIED)
        return Decision({}, refused=True, answer=error_body(ErrorCode(code), denied_message(op, what, ctx)))

    def refuse_broker_only(self, api: int, ctx: ConnectionContext) -> Decision:
        name = ApiKey(api).name
        _refusals.report(
            (api, ctx.principal), logging.WARNING, "refused %s from %s at %s: no ClusterAction on the cluster", name,
            ctx.principal, ctx.peer,
        )  # fmt: skip
        if api == ApiKey.QUORUM:
            return Decision({}, refused=True, answer=None)  # one-way: nothing to answer
        return self.refuse(CLUSTER, Op.CLUSTER_ACTION, name, ctx)

    # --- the checks rules are made of ---

    def whole_cluster(self, op: AclOperation, ctx: ConnectionContext, body: dict[str, Any], api: str) -> Decision:
        if self.authz.cluster(ctx, op):
            return Decision(body)
        return self.refuse(CLUSTER, op, f"the cluster ({api})", ctx)

    def whole_group(
        self, op: AclOperation, group: str, ctx: ConnectionContext, body: dict[str, Any]
    ) -> Decision | None:
        """None if allowed (the caller goes on), else the refusal."""
        if self.authz.group(ctx, op, group):
            return None
        return self.refuse(GROUP, op, f"group {group}", ctx)

    def per_topic(
        self, body: dict[str, Any], ctx: ConnectionContext, op: AclOperation, row: Callable[[Any, str], list[Any]]
    ) -> Decision:
        """Requests of [[topic, [partition entries]]]: a topic without `op` is left out of the handler's
        body, each of its partitions answered by `row(partition, message)`."""
        kept: list[Any] = []
        refused: list[Any] = []
        for entry in _topic_entries(body):
            (kept if self.authz.topic(ctx, op, entry[0]) else refused).append(entry)
        if not refused:
            return Decision(body)
        rows = [[t, [row(_partition(p), denied_message(op, f"topic {t}", ctx)) for p in parts]] for t, parts in refused]
        return Decision(dict(body, topics=kept), _add("topics", rows))

    def per_item(
        self,
        body: dict[str, Any],
        key: str,
        name: Callable[[Any], Any],
        allowed: Callable[[Any], bool],
        row: Callable[[Any, str], Any],
        what: Callable[[Any], str],
        op: AclOperation,
        ctx: ConnectionContext,
        answer_key: str | None = None,
        first: bool = False,
    ) -> Decision:
        """Requests naming several resources: each item without its authorization is left out of the
        handler's body and answered with its own row."""
        items = as_list(body.get(key), key)
        kept, rows = [], []
        for item in items:
            if allowed(name(item)):
                kept.append(item)
            else:
                rows.append(row(name(item), denied_message(op, what(name(item)), ctx)))
        if not rows:
            return Decision(body)
        return Decision(dict(body, **{key: kept}), _add(answer_key or key, rows, first))


# --- the rules, api by api -----------------------------------------------------------------------------------


def _open(a: Authorization, body: dict[str, Any], ctx: ConnectionContext) -> Decision:
    return Decision(body)


def _broker_only_api(api: ApiKey) -> Callable[[Authorization, dict[str, Any], ConnectionContext], Decision]:
    def decide(a: Authorization, body: dict[str, Any], ctx: ConnectionContext) -> Decision:
        return Decision(body) if a.broker(ctx) else a.refuse_broker_only(api, ctx)

    return decide


def _cluster(op: AclOperation, api: str) -> Callable[[Authorization, dict[str, Any], ConnectionContext], Decision]:
    def decide(a: Authorization, body: dict[str, Any], ctx: ConnectionContext) -> Decision:
        return a.whole_cluster(op, ctx, body, api)

    return decide


def _consumer_group_describe(a: Authorization, req: Any, ctx: ConnectionContext) -> Decision:
    """DESCRIBE on each group; the others answered GROUP_AUTHORIZATION_FAILED in their rows. Asked for, each
    described group gets the operations the principal may do on it."""
    authz = a.authz
    denied = [g for g in req.group_ids if not authz.group(ctx, Op.DESCRIBE, g)]
    rows = tuple(
        ConsumerDescribedGroup(
            group_id=g, error_code=GROUP_DENIED, error_message=denied_message(Op.DESCRIBE, f"group {g}", ctx)
        )
        for g in denied
    )

    def finish(answer: Any) -> Any:
        if isinstance(answer, dict):
            return answer
        if req.include_authorized_operations:
            for row in answer.groups:
                if not row.error_code:
                    row.authorized_operations = authz.authorized_operations(ctx, GROUP, row.group_id)
        answer.groups = answer.groups + rows
        return answer

    kept = tuple(g for g in req.group_ids if g not in denied)
    return Decision(replace(req, group_ids=kept), finish)


def _typed_group(op: AclOperation) -> Callable[[Authorization, Any, ConnectionContext], Decision]:
    """A typed request about one group (`group_id`): the consumer and share group heartbeats (KIP-848, KIP-932)."""

    def decide(a: Authorization, req: Any, ctx: ConnectionContext) -> Decision:
        return a.whole_group(op, req.group_id or "", ctx, {}) or Decision(req)

    return decide


def _share_topics(row: Callable[[Any, int], Any]) -> Callable[[Authorization, Any, ConnectionContext], Decision]:
    """ShareFetch / ShareAcknowledge: READ on the group, and READ on each topic (named by id; an id of no topic
    is the handler's UNKNOWN_TOPIC_ID); a refused topic is left out and answered by `row(topic, code)`."""

    def decide(a: Authorization, req: Any, ctx: ConnectionContext) -> Decision:
        refused_group = a.whole_group(Op.READ, req.group_id or "", ctx, {})
        if refused_group is not None:
            return refused_group
        names = {t.topic_id: name for name, t in a.authz.image.topics.items()}
        kept: list[Any] = []
        refused: list[Any] = []
        for t in req.topics:
            name = names.get(t.topic_id.hex if t.topic_id is not None else "")
            (refused if name is not None and not a.authz.topic(ctx, Op.READ, name) else kept).append(t)
        if not refused:
            return Decision(req)
        rows = tuple(row(t, TOPIC_DENIED) for t in refused)

        def finish(answer: Any) -> Any:
            if not isinstance(answer, dict):
                answer.responses = answer.responses + rows
            return answer

        return Decision(replace(req, topics=tuple(kept)), finish)

    return decide


def _share_fetch_denied(t: Any, code: int) -> Any:
    return ShareFetchableTopicResponse(
        topic_id=t.topic_id,
        partitions=tuple(ShareFetchPartition(partition_index=p.partition_index, error_code=code) for p in t.partitions),
    )


def _share_ack_denied(t: Any, code: int) -> Any:
    return ShareAcknowledgeTopicResponse(
        topic_id=t.topic_id,
        partitions=tuple(ShareAckPartition(partition_index=p.partition_index, error_code=code) for p in t.partitions),
    )


def _share_state(result: Callable[..., Any], row: Callable[..., Any]) -> Callable[..., Decision]:
    """Read/WriteShareGroupState: brokers only (CLUSTER_ACTION); refused, each partition asked is answered
    CLUSTER_AUTHORIZATION_FAILED in the api's own rows (its answer has no request-level code)."""

    def decide(a: Authorization, req: Any, ctx: ConnectionContext) -> Decision:
        if a.broker(ctx):
            return Decision(req)
        rows = tuple(
            result(
                topic_id=t.topic_id,
                partitions=tuple(row(partition=p.partition, error_code=CLUSTER_DENIED) for p in t.partitions),
            )
            for t in req.topics
        )
        answer = MESSAGES[ApiKey(req.API_KEY)][1](results=rows)
        return Decision({}, refused=True, answer=answer)

    return decide


def _share_group_offsets(a: Authorization, req: Any, ctx: ConnectionContext) -> Decision:
    """DescribeShareGroupOffsets: DESCRIBE on each group (the others answered GROUP_AUTHORIZATION_FAILED), and only
    the topics it may DESCRIBE are answered (Kafka leaves the others out)."""
    denied = [g for g in req.groups if not a.authz.group(ctx, Op.DESCRIBE, g.group_id)]
    rows = tuple(
        DescribeShareGroupOffsetsResponseGroup(
            group_id=g.group_id, error_code=int(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        )
        for g in denied
    )

    def finish(answer: Any) -> Any:
        if not isinstance(answer, dict):
            for g in answer.groups:
                g.topics = tuple(t for t in g.topics if a.authz.topic(ctx, Op.DESCRIBE, t.topic_name))
            answer.groups = answer.groups + rows
        return answer

    return Decision(replace(req, groups=tuple(g for g in req.groups if g not in denied)), finish)


def _share_offsets_change(
    group_op: AclOperation, denied_row: Callable[[Any, str], Any]
) -> Callable[[Authorization, Any, ConnectionContext], Decision]:
    """Alter/DeleteShareGroupOffsets (Kafka's KafkaApis): `group_op` on the group (READ to alter, DELETE to delete)
    or the whole request is GROUP_AUTHORIZATION_FAILED; READ on each topic, a topic without it left out of the
    handler's request and answered TOPIC_AUTHORIZATION_FAILED by `denied_row(topic, message)` (unless the answer
    is a request-level error, which Kafka gives for every topic)."""

    def decide(a: Authorization, req: Any, ctx: ConnectionContext) -> Decision:
        refused_group = a.whole_group(group_op, req.group_id or "", ctx, {})
        if refused_group is not None:
            return refused_group
        refused = [t for t in req.topics if not a.authz.topic(ctx, Op.READ, t.topic_name)]
        if not refused:
            return Decision(req)
        rows = tuple(denied_row(t, denied_message(Op.READ, f"topic {t.topic_name}", ctx)) for t in refused)

        def finish(answer: Any) -> Any:
            if not isinstance(answer, dict) and not answer.error_code:
                answer.responses = answer.responses + rows
            return answer

        return Decision(replace(req, topics=tuple(t for t in req.topics if t not in refused)), finish)

    return decide


def _alter_share_offsets_denied(t: Any, message: str) -> Any:
    return AlterShareGroupOffsetsResponseTopic(
        topic_name=t.topic_name,
        partitions=tuple(
            AlterShareGroupOffsetsResponsePartition(
                partition_index=p.partition_index, error_code=TOPIC_DENIED, error_message=message
            )
            for p in t.partitions
        ),
    )


def _delete_share_offsets_denied(t: Any, message: str) -> Any:
    return DeleteShareGroupOffsetsResponseTopic(topic_name=t.topic_name, error_code=TOPIC_DENIED, error_message=message)


def _share_group_describe(a: Authorization, req: Any, ctx: ConnectionContext) -> Decision:
    """DESCRIBE on each group; the others answered GROUP_AUTHORIZATION_FAILED."""
    denied = [g for g in req.group_ids if not a.authz.group(ctx, Op.DESCRIBE, g)]
    if not denied:
        return Decision(req)
    rows = tuple(
        DescribedShareGroup(error_code=int(ErrorCode.GROUP_AUTHORIZATION_FAILED), group_id=g, group_state="Dead")
        for g in denied
    )

    def finish(answer: Any) -> Any:
        if not isinstance(answer, dict):
            answer.groups = answer.groups + rows
        return answer

    return Decision(replace(req, group_ids=tuple(g for g in req.group_ids if g not in denied)), finish)


def _produce(a: Authorization, req: ProduceRequest, ctx: ConnectionContext) -> Decision:
    """WRITE on each topic; a transactional produce also WRITE on its transactional id (Kafka's rule). A refused
    topic is left out of the handler's request and answered TOPIC_AUTHORIZATION_FAILED in each of its partitions."""
    txn = req.transactional_id
    if txn is not None and not a.authz.allowed(ctx, Op.WRITE, TXN, txn):
        return a.refuse(TXN, Op.WRITE, f"transactional id {txn}", ctx)
    kept: list[TopicProduceData] = []
    refused: list[TopicProduceData] = []
    for t in req.topic_data:
        (kept if a.authz.topic(ctx, Op.WRITE, t.name) else refused).append(t)
    if not refused:
        return Decision(req)
    rows = tuple(
        TopicProduceResponse(
            name=t.name,
            partition_responses=tuple(
                ProduceResult(TOPIC_DENIED, message=denied_message(Op.WRITE, f"topic {t.name}", ctx)).typed(p.index)
                for p in t.partition_data
            ),
        )
        for t in refused
    )

    def finish(answer: Any) -> Any:
        if isinstance(answer, ProduceResponse):  # None: acks=0; a dict: a whole-request error
            answer.responses = answer.responses + rows
        return answer

    return Decision(replace(req, topic_data=tuple(kept)), finish)


def _fetch(a: Authorization, req: FetchRequest, ctx: ConnectionContext) -> Decision:
    """A follower's fetch (replica_id >= 0) needs CLUSTER_ACTION (and the inter-broker listener, kafka_apis.py
    broker_only); a consumer's READ on each topic, a refused one answered TOPIC_AUTHORIZATION_FAILED per partition."""
    if req.replica_id >= 0:
        return Decision(req) if a.broker(ctx) else a.refuse_broker_only(ApiKey.FETCH, ctx)
    return _fetched(a, req, ctx)


def _list_offsets(a: Authorization, req: ListOffsetsRequest, ctx: ConnectionContext) -> Decision:
    """DESCRIBE on each topic, whatever the replica id (Kafka's rule: with one, the answer is the log end offset, an
    offset a DESCRIBE may see; no record is read)."""
    return _listed(a, req, ctx)


def _typed_topics(
    op: AclOperation,
    row: Callable[[Any], Any],
    name: str = "name",
    cluster_alt: AclOperation | None = None,
    answer_field: str = "topics",
) -> Callable[[Authorization, Any, ConnectionContext], Decision]:
    """A typed request of `topics` (net/schema/): each topic needs `op` (or `cluster_alt` on the cluster, for the
    whole request); a refused topic is left out of the handler's request and answered by `row(topic)`, its answer
    row with TOPIC_AUTHORIZATION_FAILED in each partition."""

    def decide(a: Authorization, req: Any, ctx: ConnectionContext) -> Decision:
        if cluster_alt is not None and a.authz.cluster(ctx, cluster_alt):
            return Decision(req)
        kept: list[Any] = []
        refused: list[Any] = []
        for t in req.topics:
            (kept if a.authz.topic(ctx, op, getattr(t, name)) else refused).append(t)
        if not refused:
            return Decision(req)
        rows = tuple(row(t) for t in refused)

        def finish(answer: Any) -> Any:
            if not isinstance(answer, dict):  # a typed answer; a dict is a whole-request error
                setattr(answer, answer_field, getattr(answer, answer_field) + rows)
            return answer

        return Decision(replace(req, topics=tuple(kept)), finish)

    return decide


def _denied_rows(cls: type) -> Callable[[Any], Any]:
    """The answer row of a refused topic: the request's topic mirrored, every partition TOPIC_AUTHORIZATION_FAILED."""
    return lambda t: error_response(t, cls, TOPIC_DENIED)


_fetched = _typed_topics(
    Op.READ,
    lambda t: FetchableTopicResponse(
        topic=t.topic,
        partitions=tuple(FetchResult(TOPIC_DENIED).typed(p.partition) for p in t.partitions),
    ),
    "topic",
    answer_field="responses",
)


_listed = _typed_topics(Op.DESCRIBE, _denied_rows(ListOffsetsTopicResponse))


def _describe_quorum(a: Authorization, req: Any, ctx: ConnectionContext) -> Decision:
    """DESCRIBE on the cluster; a broker forwarding a client's request (whose DESCRIBE it checked) to the quorum
    leader needs CLUSTER_ACTION, as Kafka's forwarded requests."""
    if getattr(ctx, "listener", None) == INTER_BROKER_LISTENER and a.broker(ctx):
        return Decision(req)
    return a.whole_cluster(Op.DESCRIBE, ctx, req, "DescribeQuorum")


def _deleted_records_denied(t: DeleteRecordsTopic) -> DeleteRecordsTopicResult:
    rows = tuple(
        DeleteRecordsPartitionResult(partition_index=p.partition_index, low_watermark=-1, error_code=TOPIC_DENIED)
        for p in t.partitions
    )
    return DeleteRecordsTopicResult(name=t.name, partitions=rows)


def _producers_denied(t: DescribeProducersTopic) -> DescribeProducersTopicResponse:
    rows = tuple(PartitionResponse(partition_index=i, error_code=TOPIC_DENIED) for i in t.partition_indexes)
    return DescribeProducersTopicResponse(name=t.name, partitions=rows)


def _alter_reassignments(a: Authorization, req: AlterPartitionReassignmentsRequest, ctx: ConnectionContext) -> Decision:
    """ALTER on the cluster; without it, CLUSTER_AUTHORIZATION_FAILED at the top and in every partition asked."""
    if a.authz.cluster(ctx, Op.ALTER):
        return Decision(req)
    message = denied_message(Op.ALTER, "the cluster (AlterPartitionReassignments)", ctx)
    return Decision(req, refused=True, answer=refused_alter(req, CLUSTER_DENIED, message))


def _elect_leaders(a: Authorization, req: ElectLeadersRequest, ctx: ConnectionContext) -> Decision:
    """ALTER on the cluster; without it, CLUSTER_AUTHORIZATION_FAILED at the top and in every partition asked."""
    if a.authz.cluster(ctx, Op.ALTER):
        return Decision(req)
    message = denied_message(Op.ALTER, "the cluster (ElectLeaders)", ctx)
    if req.topic_partitions is None:  # no partition rows to carry the reason: a whole-request error does
        return Decision(req, refused=True, answer=error_body(ErrorCode(CLUSTER_DENIED), message))
    return Decision(req, refused=True, answer=refused_election(req, CLUSTER_DENIED, message))


def _metadata(a: Authorization, req: MetadataRequest, ctx: ConnectionContext) -> Decision:
    """All topics (`topics` nil): those it may not describe are left out. Named topics: each needs DESCRIBE,
    and one that does not exist is created (allow_auto_topic_creation, auto.create.topics.enable) only with
    CREATE on the cluster or the topic, else TOPIC_AUTHORIZATION_FAILED, as in Kafka. A topic named by id (v10+,
    a KIP-848 consumer resolving its assignment) is checked, and answered, by the name it has; an id no topic has
    goes on to the handler (UNKNOWN_TOPIC_ID). Asked for, each topic answered gets the operations the principal
    may do on it, and the answer those on the cluster."""
    authz = a.authz
    if req.topics is None:

        def hide(answer: Any) -> Any:
            if not isinstance(answer, dict):  # a typed answer; a dict is a whole-request error
                answer.topics = tuple(t for t in answer.topics if authz.topic(ctx, Op.DESCRIBE, t.name))
            return answer

        return _metadata_operations(a, req, ctx, Decision(req, hide))
    image = authz.image
    creating = a.auto_create_topics and req.allow_auto_topic_creation
    by_id: dict[str, str] | None = None  # built only when a topic is named by id
    kept: list[MetadataRequestTopic] = []
    refused: list[str] = []
    for t in req.topics:
        name = t.name
        if name is None and t.topic_id is not None and t.topic_id.int:
            if by_id is None:
                by_id = {info.topic_id: n for n, info in image.topics.items()}
            name = by_id.get(t.topic_id.hex)
            if name is not None:
                t = MetadataRequestTopic(topic_id=t.topic_id, name=name)
        if name is None:  # an unknown id (or nothing named): the handler answers it
            kept.append(t)
        elif authz.topic(ctx, Op.DESCRIBE, name) and (
            not creating or name in image.topics or authz.create_topic(ctx, name)
        ):
            kept.append(t)
        else:
            refused.append(name)
    if not refused and by_id is None:  # every topic allowed, none named by id: the request as it came
        return _metadata_operations(a, req, ctx, Decision(req))
    rows = tuple(MetadataResponseTopic(error_code=TOPIC_DENIED, name=n) for n in dict.fromkeys(refused))

    def finish(answer: Any) -> Any:
        if not isinstance(answer, dict):
            answer.topics = answer.topics + rows
        return answer

    return _metadata_operations(a, req, ctx, Decision(replace(req, topics=tuple(kept)), finish if rows else None))


def _metadata_operations(a: Authorization, req: MetadataRequest, ctx: ConnectionContext, d: Decision) -> Decision:
    """Kafka's `topic_authorized_operations` (include_topic_authorized_operations) on each answered topic the
    principal may see, and `cluster_authorized_operations` (include_cluster_authorized_operations), once the
    rule's own rows are in; a request not asking gets none (clients read Kafka's -2147483648, "not given")."""
    asked, cluster = req.include_topic_authorized_operations, req.include_cluster_authorized_operations
    if not (asked or cluster):
        return d
    authz = a.authz

    def operations(answer: Any) -> Any:
        if isinstance(answer, dict):
            return answer
        if asked:
            for t in answer.topics:
                if t.error_code != TOPIC_DENIED and t.name is not None:
                    t.topic_authorized_operations = authz.authorized_operations(ctx, TOPIC, t.name)
        if cluster:
            answer.cluster_authorized_operations = authz.authorized_operations(ctx, CLUSTER, CLUSTER_NAME)
        return answer

    return Decision(d.body, _then(d.finish, operations))


def _describe_topic_partitions(a: Authorization, req: Any, ctx: ConnectionContext) -> Decision:
    """KIP-966, as Kafka's DescribeTopicPartitionsRequestHandler: the request as sent is checked first (a cursor
    names one of the topics asked and a partition >= 0, else INVALID_REQUEST); then DESCRIBE on each topic. A
    listing of every topic leaves out the ones it may not describe, before the handler fills its page; a named
    one it may not describe is answered TOPIC_AUTHORIZATION_FAILED (without its id), after the page. Every
    answered topic carries the operations this principal may do on it. Native v0 is a Metadata request (authorized
    as one: broker/server/kafka_apis.py `_metadata_map`)."""
    authz = a.authz
    cursor = req.cursor
    names = [t.name for t in req.topics]
    if cursor is not None and (cursor.partition_index < 0 or (names and cursor.topic_name not in names)):
        why = f"the cursor {cursor.topic_name}-{cursor.partition_index} is not a partition of the topics asked"
        return Decision(req, refused=True, answer=error_body(ErrorCode.INVALID_REQUEST, why))
    kept: list[Any] = []
    refused: list[str] = []
    if names:
        for t in req.topics:
            if authz.topic(ctx, Op.DESCRIBE, t.name):
                kept.append(t)
            else:
                refused.append(t.name)
    else:
        kept = [DescribeTopicRequest(name=n) for n in sorted(authz.image.topics) if authz.topic(ctx, Op.DESCRIBE, n)]
    denied = tuple(
        DescribeTopicPartitionsResponseTopic(error_code=TOPIC_DENIED, name=n, topic_id=ZERO_UUID)
        for n in dict.fromkeys(refused)
    )

    def finish(answer: Any) -> Any:
        if isinstance(answer, dict):  # the request failed as a whole
            return answer
        for t in answer.topics:
            t.topic_authorized_operations = authz.authorized_operations(ctx, TOPIC, t.name)
        answer.topics = answer.topics + denied
        return answer

    return Decision(replace(req, topics=tuple(kept)), finish)


def _describe_cluster(a: Authorization, req: DescribeClusterRequest, ctx: ConnectionContext) -> Decision:
    """Open to every logged-in client, as Kafka's; asked for (`include_cluster_authorized_operations`), the answer
    says what the principal may do on the cluster (0: nothing), else Kafka's "not given"."""
    if not req.include_cluster_authorized_operations:
        return Decision(req)
    authz = a.authz

    def operations(answer: Any) -> Any:
        if not isinstance(answer, dict):
            answer.cluster_authorized_operations = authz.authorized_operations(ctx, CLUSTER, CLUSTER_NAME)
        return answer

    return Decision(req, operations)


def _init_producer_id(a: Authorization, req: Any, ctx: ConnectionContext) -> Decision:
    """A transactional producer: WRITE on its transactional id; an idempotent one: IDEMPOTENT_WRITE on the
    cluster or WRITE on any topic (KIP-679)."""
    tid = getattr(req, "transactional_id", None)
    if tid is not None:
        return Decision(req) if a.authz.allowed(ctx, Op.WRITE, TXN, tid) else _txn_refused(Op.WRITE, tid, ctx)
    if a.authz.idempotent_write(ctx):
        return Decision(req)
    return a.refuse(CLUSTER, Op.IDEMPOTENT_WRITE, "the cluster (nor WRITE on any topic)", ctx)


def _txn_refused(op: AclOperation, tid: str, ctx: ConnectionContext) -> Decision:
    msg = denied_message(op, f"transactional id {tid}", ctx)
    return Decision({}, refused=True, answer=error_body(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, msg))


def _txn_write(field: str = "transactional_id", group_op: AclOperation | None = None) -> Callable[..., Decision]:
    """WRITE on the request's transactional id (and `group_op` on its group_id): Kafka's rule for AddOffsetsToTxn,
    EndTxn and TxnOffsetCommit."""

    def decide(a: Authorization, req: Any, ctx: ConnectionContext) -> Decision:
        tid = getattr(req, field)
        if not a.authz.allowed(ctx, Op.WRITE, TXN, tid):
            return _txn_refused(Op.WRITE, tid, ctx)
        if group_op is not None and not a.authz.allowed(ctx, group_op, GROUP, req.group_id):
            return a.refuse(GROUP, group_op, f"group {req.group_id}", ctx)
        return Decision(req)

    return decide


def _txn_offset_commit(a: Authorization, req: Any, ctx: ConnectionContext) -> Decision:
    """WRITE on the transactional id, READ on the group, READ on each topic (Kafka's handleTxnOffsetCommitRequest)."""
    d = _txn_write(group_op=Op.READ)(a, req, ctx)
    if d.refused:
        return d
    return _typed_topics(Op.READ, _denied_rows(TxnOffsetCommitResponseTopic))(a, req, ctx)


def _add_partitions_to_txn(a: Authorization, req: Any, ctx: ConnectionContext) -> Decision:
    """A client's (v0-3): WRITE on the transactional id and on every topic added, or nothing is added (the denied
    topics TOPIC_AUTHORIZATION_FAILED, the others OPERATION_NOT_ATTEMPTED, as Kafka). A broker's batched form
    (v4+, KIP-890): CLUSTER_ACTION."""
    if req.transactions:
        return Decision(req) if a.broker(ctx) else a.refuse(CLUSTER, Op.CLUSTER_ACTION, "AddPartitionsToTxn v4+", ctx)
    tid = req.v3_and_below_transactional_id
    txn_denied = not a.authz.allowed(ctx, Op.WRITE, TXN, tid)
    denied = (
        set() if txn_denied else {t.name for t in req.v3_and_below_topics if not a.authz.topic(ctx, Op.WRITE, t.name)}
    )
    if not txn_denied and not denied:
        return Decision(req)

    def code(topic: str) -> int:  # the answer names every partition asked, as Kafka's error response does
        if txn_denied:
            return int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        return TOPIC_DENIED if topic in denied else int(ErrorCode.OPERATION_NOT_ATTEMPTED)

    rows = tuple(
        AddPartitionsToTxnTopicResult(
            name=t.name,
            results_by_partition=tuple(
                AddPartitionsToTxnPartitionResult(partition_index=p, partition_error_code=code(t.name))
                for p in t.partitions
            ),
        )
        for t in req.v3_and_below_topics
    )
    top = int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED) if txn_denied else 0  # the v4+ field
    return Decision(
        {}, refused=True, answer=AddPartitionsToTxnResponse(error_code=top, results_by_topic_v3_and_below=rows)
    )


def _write_txn_markers(a: Authorization, req: Any, ctx: ConnectionContext) -> Decision:
    """CLUSTER_ACTION: a transaction coordinator's broker, or an admin aborting a hanging transaction (kl-transactions
    abort, on a client listener as in Kafka); anyone else gets CLUSTER_AUTHORIZATION_FAILED in every partition named
    (Kafka's error response), never an empty answer."""
    if a.broker(ctx):
        return Decision(req)
    a.refuse_broker_only(ApiKey.WRITE_TXN_MARKERS, ctx)  # logged as every broker-only refusal
    answer = error_response(req, WriteTxnMarkersResponse, CLUSTER_DENIED)
    if not answer.markers:
        return a.refuse_broker_only(ApiKey.WRITE_TXN_MARKERS, ctx)
    return Decision({}, refused=True, answer=answer)


def _describe_transactions(a: Authorization, req: Any, ctx: ConnectionContext) -> Decision:
    """DESCRIBE on each transactional id; the others answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED."""
    denied = [t for t in req.transactional_ids if not a.authz.allowed(ctx, Op.DESCRIBE, TXN, t)]
    if not denied:
        return Decision(req)
    rows = tuple(
        DescribedTxnState(error_code=int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED), transactional_id=t)
        for t in denied
    )

    def finish(answer: Any) -> Any:
        if not isinstance(answer, dict):
            answer.transaction_states = answer.transaction_states + rows
        return answer

    kept = tuple(t for t in req.transactional_ids if t not in denied)
    return Decision(replace(req, transactional_ids=kept), finish)


def _list_transactions(a: Authorization, req: Any, ctx: ConnectionContext) -> Decision:
    """Only the transactional ids the principal may DESCRIBE are listed (Kafka filters them)."""

    def finish(answer: Any) -> Any:
        if not isinstance(answer, dict):
            answer.transaction_states = tuple(
                s for s in answer.transaction_states if a.authz.allowed(ctx, Op.DESCRIBE, TXN, s.transactional_id)
            )
        return answer

    return Decision(req, finish)


def _typed_items(
    fields: tuple[str, ...],
    answered: str,
    refused: Callable[["Authorization", Any, ConnectionContext], tuple[ResourceType, AclOperation, str] | None],
    row: Callable[[Any, Any, int, str], Any],
    first: bool = False,
) -> Callable[["Authorization", Any, ConnectionContext], Decision]:
    """A typed request naming several resources (the items of its `fields`): `refused(a, item, ctx)` says what an
    item lacks ((resource type, operation, what it names); None: allowed); such an item is left out of the
    handler's request and answered by `row(request, item, code, message)` among the answer's `answered` rows
    (before the others with `first`)."""

    def decide(a: Authorization, req: Any, ctx: ConnectionContext) -> Decision:
        kept: dict[str, tuple[Any, ...]] = {}
        rows: list[Any] = []
        for field in fields:
            items = getattr(req, field) or ()
            ok = []
            for item in items:
                why = refused(a, item, ctx)
                if why is None:
                    ok.append(item)
                else:
                    rt, op, what = why
                    rows.append(row(req, item, _DENIED_CODE[rt], denied_message(op, what, ctx)))
            kept[field] = tuple(ok)
        if not rows:
            return Decision(req)

        def finish(answer: Any) -> Any:
            if not isinstance(answer, dict):
                own = tuple(getattr(answer, answered))
                setattr(answer, answered, (*rows, *own) if first else (*own, *rows))
            return answer

        return Decision(replace(req, **kept), finish)

    return decide


def _topic_row(cls: type) -> Callable[[Any, Any, int, str], Any]:
    """The answer row of a refused topic (an item with its `name`, or a bare name)."""

    def row(req: Any, item: Any, code: int, message: str) -> Any:
        if isinstance(item, str):
            return cls(name=item, error_code=code, error_message=message)
        return error_response(item, cls, code, message)

    return row


def _topic_op(op: AclOperation) -> Callable[[Authorization, Any, ConnectionContext], Any]:
    """`op` on the topic an item names (CREATE: on the cluster or the topic); an item naming a topic by id (DeleteTopics
    v6) is checked on the topic of that id, and one of no topic left to the handler (UNKNOWN_TOPIC_ID)."""

    def refused(a: Authorization, item: Any, ctx: ConnectionContext) -> tuple[ResourceType, AclOperation, str] | None:
        name = item if isinstance(item, str) else item.name
        if name is None:
            topic_id = getattr(item, "topic_id", None)
            name = next((n for n, t in a.authz.image.topics.items() if topic_id and t.topic_id == topic_id.hex), None)
            if name is None:
                return None
        allowed = a.authz.create_topic(ctx, name) if op == Op.CREATE else a.authz.topic(ctx, op, name)
        return None if allowed else (TOPIC, op, f"topic {name}")

    return refused


_BROKER_RESOURCE, _TOPIC_RESOURCE, _GROUP_RESOURCE, _BROKER_LOGGER_RESOURCE = 4, 2, 32, 8  # Kafka's ConfigResource.Type


def _config_op(op: AclOperation) -> Callable[[Authorization, Any, ConnectionContext], Any]:
    """A config resource: `op` on the topic, on the cluster for a broker's (or the cluster default's) configs and its
    log levels (BROKER_LOGGER), on the group; a resource of another type is the handler's to refuse (INVALID_REQUEST
    in its row)."""

    def refused(a: Authorization, r: Any, ctx: ConnectionContext) -> tuple[ResourceType, AclOperation, str] | None:
        kind, name = r.resource_type, r.resource_name
        if kind == _TOPIC_RESOURCE and not a.authz.topic(ctx, op, name):
            return TOPIC, op, f"topic {name}"
        if kind in (_BROKER_RESOURCE, _BROKER_LOGGER_RESOURCE) and not a.authz.cluster(ctx, op):
            return CLUSTER, op, "the cluster"
        if kind == _GROUP_RESOURCE and not a.authz.group(ctx, op, name):
            return GROUP, op, f"group {name}"
        return None

    return refused


def _config_row(req: Any, r: Any, code: int, message: str) -> Any:
    """A refused config resource's row, of its api's answer (the legacy native AlterConfigs may carry either)."""
    cls = _CONFIG_ROWS[type(req)]
    return cls(error_code=code, error_message=message, resource_type=r.resource_type, resource_name=r.resource_name)


_CONFIG_ROWS: dict[type, type] = {
    DescribeConfigsRequest: DescribeConfigsResult,
    AlterConfigsRequest: AlterConfigsResourceResponse,
    IncrementalAlterConfigsRequest: IncrementalAlterConfigsResourceResponse,
}


def _find_coordinator(a: Authorization, req: FindCoordinatorRequest, ctx: ConnectionContext) -> Decision:
    """DESCRIBE on the group (key_type 0) or the transactional id (1); with `coordinator_keys` (v4+), on each: a key
    without it is answered in its own row."""
    if req.key_type not in (0, 1):
        raise BadRequest("key_type must be 0 (group) or 1 (transaction)")
    rt = GROUP if req.key_type == 0 else TXN
    code = _DENIED_CODE[rt]
    what = "group" if rt == GROUP else "transactional id"
    if req.coordinator_keys:
        kept = tuple(k for k in req.coordinator_keys if a.authz.allowed(ctx, Op.DESCRIBE, rt, k))
        rows = tuple(
            Coordinator(
                key=k,
                node_id=-1,
                host="",
                port=-1,
                error_code=code,
                error_message=denied_message(Op.DESCRIBE, f"{what} {k}", ctx),
            )
            for k in req.coordinator_keys
            if k not in kept
        )
        if not rows:
            return Decision(req)
        if not kept:  # nothing left to ask: answered here (an empty batch would read as the one-key form)
            return Decision(req, refused=True, answer=FindCoordinatorResponse(coordinators=rows))

        def finish(answer: Any) -> Any:
            if not isinstance(answer, dict):
                answer.coordinators = answer.coordinators + rows
            return answer

        return Decision(replace(req, coordinator_keys=kept), finish)
    if a.authz.allowed(ctx, Op.DESCRIBE, rt, req.key):
        return Decision(req)
    return a.refuse(rt, Op.DESCRIBE, f"{what} {req.key}", ctx)


def _typed_topics_of_group(
    op: AclOperation, topic_op: AclOperation, row: Callable[[Any], Any]
) -> Callable[[Authorization, Any, ConnectionContext], Decision]:
    """`op` on the request's group (else refused as a whole), and `topic_op` on each topic (a topic without it is
    answered by `row(topic)`, TOPIC_AUTHORIZATION_FAILED in its partitions, the others served): Kafka's rules for
    OffsetCommit (READ, READ) and OffsetDelete (DELETE, READ)."""
    topics = _typed_topics(topic_op, row)

    def decide(a: Authorization, req: Any, ctx: ConnectionContext) -> Decision:
        return a.whole_group(op, req.group_id, ctx, {}) or topics(a, req, ctx)

    return decide


def _fetch_denied(topic_cls: type[Any], partition_cls: type[Any]) -> Callable[[Any], Any]:
    """An OffsetFetch topic she may not describe, as the answer's row of `topic_cls`: every partition asked
    TOPIC_AUTHORIZATION_FAILED, no offset."""

    def row(t: Any) -> Any:
        parts = (
            partition_cls(partition_index=p, committed_offset=-1, metadata="", error_code=TOPIC_DENIED)
            for p in t.partition_indexes
        )
        return topic_cls(name=t.name, partitions=tuple(parts))

    return row


def _fetched_topics(
    a: Authorization, entry: Any, ctx: ConnectionContext, denied: Callable[[Any], Any]
) -> tuple[Any, Finish]:
    """One group's OffsetFetch (the request before v8, or one of its `groups`): DESCRIBE on each topic named, a
    topic without it answered by `denied(topic)`; with every topic (nil), the topics it may not describe are left
    out of the answer (Kafka's handleOffsetFetchRequest). `finish` takes and gives the group's answer rows."""
    authz = a.authz
    if entry.topics is None:

        def hide(topics: tuple[Any, ...]) -> tuple[Any, ...]:
            return tuple(t for t in topics if authz.topic(ctx, Op.DESCRIBE, t.name))

        return entry, hide
    kept = tuple(t for t in entry.topics if authz.topic(ctx, Op.DESCRIBE, t.name))
    rows = tuple(denied(t) for t in entry.topics if t not in kept)
    return replace(entry, topics=kept), lambda topics: topics + rows


def _offset_fetch(a: Authorization, req: OffsetFetchRequest, ctx: ConnectionContext) -> Decision:
    """DESCRIBE on the group (before v8: else refused as a whole; v8+: each group, else GROUP_AUTHORIZATION_FAILED
    in its row), and on the topics as `_fetched_topics` says."""
    if not req.groups:
        refused = a.whole_group(Op.DESCRIBE, req.group_id, ctx, {})
        if refused is not None:
            return refused
        shaped, fix = _fetched_topics(a, req, ctx, _fetch_denied(*FETCH_ROWS_BEFORE_V8))

        def finish_one(answer: Any) -> Any:
            if not isinstance(answer, dict):
                answer.topics = fix(answer.topics)
            return answer

        return Decision(shaped, finish_one)
    kept: list[Any] = []
    fixes: list[Finish] = []
    rows: list[OffsetFetchResponseGroup] = []
    for g in req.groups:
        if a.authz.group(ctx, Op.DESCRIBE, g.group_id):
            shaped, fix = _fetched_topics(a, g, ctx, _fetch_denied(*FETCH_ROWS_V8))
            kept.append(shaped)
            fixes.append(fix)
        else:
            rows.append(OffsetFetchResponseGroup(group_id=g.group_id, error_code=GROUP_DENIED))
    if not kept:  # nothing left to fetch: answered here (an empty batch would read as the one-group form)
        return Decision(req, refused=True, answer=OffsetFetchResponse(groups=tuple(rows)))

    def finish(answer: Any) -> Any:
        if isinstance(answer, dict):
            return answer
        for fix, g in zip(fixes, answer.groups):  # the handler answers the groups in the order asked
            g.topics = fix(g.topics)
        answer.groups = answer.groups + tuple(rows)
        return answer

    return Decision(replace(req, groups=tuple(kept)), finish)


def _list_groups(a: Authorization, req: Any, ctx: ConnectionContext) -> Decision:
    """DESCRIBE on the cluster lists every group; without it, the groups it may describe."""
    authz = a.authz
    if authz.cluster(ctx, Op.DESCRIBE):
        return Decision(req)

    def visible(answer: Any) -> Any:
        if not isinstance(answer, dict):
            answer.groups = tuple(g for g in answer.groups if authz.group(ctx, Op.DESCRIBE, g.group_id))
        return answer

    return Decision(req, visible)


def _typed_groups_each(
    op: AclOperation, asked: str, answered: str, row: Callable[[str, str], Any]
) -> Callable[[Authorization, Any, ConnectionContext], Decision]:
    """A typed request naming groups (`asked`): each needs `op`; a group without it is left out of the handler's
    request and answered by `row(group, message)` in the answer's `answered` rows."""

    def decide(a: Authorization, req: Any, ctx: ConnectionContext) -> Decision:
        groups = getattr(req, asked)
        kept = tuple(g for g in groups if a.authz.group(ctx, op, g))
        rows = tuple(row(g, denied_message(op, f"group {g}", ctx)) for g in groups if g not in kept)
        if not rows:
            return Decision(req)

        def finish(answer: Any) -> Any:
            if not isinstance(answer, dict):
                setattr(answer, answered, getattr(answer, answered) + rows)
            return answer

        return Decision(replace(req, **{asked: kept}), finish)

    return decide


def _describe_groups(a: Authorization, req: DescribeGroupsRequest, ctx: ConnectionContext) -> Decision:
    """DESCRIBE on each group, the others answered GROUP_AUTHORIZATION_FAILED in their rows; asked for
    (`include_authorized_operations`, v3+), each described group gets the operations the principal may do on it."""
    d = _typed_groups_each(
        Op.DESCRIBE, "groups", "groups", lambda g, msg: DescribedGroup(group_id=g, error_code=GROUP_DENIED)
    )(a, req, ctx)
    if not req.include_authorized_operations:
        return d
    authz = a.authz

    def operations(answer: Any) -> Any:
        if not isinstance(answer, dict):
            for row in answer.groups:
                if row.error_code != GROUP_DENIED:
                    row.authorized_operations = authz.authorized_operations(ctx, GROUP, row.group_id)
        return answer

    return Decision(d.body, _then(d.finish, operations))


R, E = "request", "each"
RULES: dict[ApiKey, Rule] = {
    ApiKey.PRODUCE: Rule((Need(TOPIC, Op.WRITE, E), Need(TXN, Op.WRITE, R)), _produce, "the transactional id's if any"),
    ApiKey.FETCH: Rule(
        (Need(TOPIC, Op.READ, E), Need(CLUSTER, Op.CLUSTER_ACTION, R)),
        _fetch,
        "CLUSTER_ACTION only for a follower's fetch, replica_id ≥ 0",
    ),
    ApiKey.LIST_OFFSETS: Rule(
        (Need(TOPIC, Op.DESCRIBE, E),), _list_offsets, "whatever the replica_id, as Kafka (with one: the log end)"
    ),
    ApiKey.DELETE_RECORDS: Rule((Need(TOPIC, Op.DELETE, E),), _typed_topics(Op.DELETE, _deleted_records_denied)),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: Rule(
        (Need(TOPIC, Op.DESCRIBE, E, "or CLUSTER_ACTION on the cluster"),),
        _typed_topics(Op.DESCRIBE, _denied_rows(OffsetForLeaderTopicResult), "topic", Op.CLUSTER_ACTION),
        "KIP-320: consumers with DESCRIBE on the topic, brokers with CLUSTER_ACTION",
    ),
    ApiKey.DESCRIBE_PRODUCERS: Rule((Need(TOPIC, Op.READ, E),), _typed_topics(Op.READ, _producers_denied)),
    ApiKey.DESCRIBE_LOG_DIRS: Rule((Need(CLUSTER, Op.DESCRIBE, R),), _cluster(Op.DESCRIBE, "DescribeLogDirs")),
    ApiKey.DESCRIBE_QUORUM: Rule(
        (Need(CLUSTER, Op.DESCRIBE, R, "or CLUSTER_ACTION, forwarded by a broker"),),
        _describe_quorum,
        "a broker forwards a client's request to the quorum leader on the inter-broker listener",
    ),
    ApiKey.LIST_CONFIG_RESOURCES: Rule(
        (Need(CLUSTER, Op.DESCRIBE_CONFIGS, R),), _cluster(Op.DESCRIBE_CONFIGS, "ListConfigResources")
    ),
    ApiKey.METADATA: Rule(
        (Need(TOPIC, Op.DESCRIBE, E), Need(TOPIC, Op.CREATE, E, "or CREATE on the cluster")),
        _metadata,
        "all topics: those it may not describe are left out; automatic creation needs CREATE",
    ),
    ApiKey.DESCRIBE_CLUSTER: Rule(
        (), _describe_cluster, "open to every logged-in client; its authorized operations on the cluster when asked"
    ),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: Rule(
        (Need(TOPIC, Op.DESCRIBE, E),),
        _describe_topic_partitions,
        "topics it may not describe are left out of a listing of every topic; native v0 is a Metadata request",
    ),
    ApiKey.OFFSET_COMMIT: Rule(
        (Need(GROUP, Op.READ, R), Need(TOPIC, Op.READ, E)),
        _typed_topics_of_group(Op.READ, Op.READ, _denied_rows(OffsetCommitResponseTopic)),
    ),
    ApiKey.OFFSET_FETCH: Rule(
        (Need(GROUP, Op.DESCRIBE, E), Need(TOPIC, Op.DESCRIBE, E)),
        _offset_fetch,
        "each group of a batched request; all topics: those it may not describe are left out",
    ),
    ApiKey.FIND_COORDINATOR: Rule(
        (Need(GROUP, Op.DESCRIBE, E), Need(TXN, Op.DESCRIBE, E)), _find_coordinator, "each key of a batched request"
    ),
    ApiKey.JOIN_GROUP: Rule((Need(GROUP, Op.READ, R),), _typed_group(Op.READ)),
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: Rule(
        (Need(CLUSTER, Op.CLUSTER_ACTION, R),),
        _share_state(InitializeStateResult, InitializePartitionResult),
        "brokers only",
    ),
    ApiKey.READ_SHARE_GROUP_STATE: Rule(
        (Need(CLUSTER, Op.CLUSTER_ACTION, R),), _share_state(ReadStateResult, ReadPartitionResult), "brokers only"
    ),
    ApiKey.WRITE_SHARE_GROUP_STATE: Rule(
        (Need(CLUSTER, Op.CLUSTER_ACTION, R),), _share_state(WriteStateResult, WritePartitionResult), "brokers only"
    ),
    ApiKey.DELETE_SHARE_GROUP_STATE: Rule(
        (Need(CLUSTER, Op.CLUSTER_ACTION, R),), _share_state(DeleteStateResult, DeletePartitionResult), "brokers only"
    ),
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: Rule(
        (Need(CLUSTER, Op.CLUSTER_ACTION, R),), _share_state(SummaryStateResult, SummaryPartitionResult), "brokers only"
    ),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: Rule(
        (Need(GROUP, Op.READ, R), Need(TOPIC, Op.READ, E)),
        _share_offsets_change(Op.READ, _alter_share_offsets_denied),
        "a topic it may not read is answered TOPIC_AUTHORIZATION_FAILED in its rows",
    ),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: Rule(
        (Need(GROUP, Op.DELETE, R), Need(TOPIC, Op.READ, E)),
        _share_offsets_change(Op.DELETE, _delete_share_offsets_denied),
        "a topic it may not read is answered TOPIC_AUTHORIZATION_FAILED in its row",
    ),
    ApiKey.SHARE_GROUP_HEARTBEAT: Rule((Need(GROUP, Op.READ, R),), _typed_group(Op.READ)),
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: Rule(
        (Need(GROUP, Op.DESCRIBE, E), Need(TOPIC, Op.DESCRIBE, E)),
        _share_group_offsets,
        "topics it may not describe are left out",
    ),
    ApiKey.SHARE_GROUP_DESCRIBE: Rule((Need(GROUP, Op.DESCRIBE, E),), _share_group_describe),
    ApiKey.SHARE_FETCH: Rule(
        (Need(GROUP, Op.READ, R), Need(TOPIC, Op.READ, E)), _share_topics(_share_fetch_denied), "topics by id"
    ),
    ApiKey.SHARE_ACKNOWLEDGE: Rule(
        (Need(GROUP, Op.READ, R), Need(TOPIC, Op.READ, E)), _share_topics(_share_ack_denied), "topics by id"
    ),
    ApiKey.HEARTBEAT: Rule((Need(GROUP, Op.READ, R),), _typed_group(Op.READ)),
    ApiKey.LEAVE_GROUP: Rule((Need(GROUP, Op.READ, R),), _typed_group(Op.READ)),
    ApiKey.SYNC_GROUP: Rule((Need(GROUP, Op.READ, R),), _typed_group(Op.READ)),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: Rule((Need(GROUP, Op.READ, R),), _typed_group(Op.READ)),
    ApiKey.CONSUMER_GROUP_DESCRIBE: Rule(
        (Need(GROUP, Op.DESCRIBE, E),), _consumer_group_describe, "those not allowed answered in their rows"
    ),
    ApiKey.DESCRIBE_GROUPS: Rule((Need(GROUP, Op.DESCRIBE, E),), _describe_groups),
    ApiKey.LIST_GROUPS: Rule(
        (Need(CLUSTER, Op.DESCRIBE, R, "else the groups it may DESCRIBE"),),
        _list_groups,
        "never refused: without DESCRIBE on the cluster, only the groups it may describe are listed",
    ),
    ApiKey.DELETE_GROUPS: Rule(
        (Need(GROUP, Op.DELETE, E),),
        _typed_groups_each(
            Op.DELETE,
            "groups_names",
            "results",
            lambda g, msg: DeletableGroupResult(group_id=g, error_code=GROUP_DENIED),
        ),
    ),
    ApiKey.OFFSET_DELETE: Rule(
        (Need(GROUP, Op.DELETE, R), Need(TOPIC, Op.READ, E)),
        _typed_topics_of_group(Op.DELETE, Op.READ, _denied_rows(OffsetDeleteResponseTopic)),
    ),
    ApiKey.SASL_HANDSHAKE: Rule((), _open, "the login itself, answered by the connection before any handler"),
    ApiKey.SASL_AUTHENTICATE: Rule((), _open, "the login itself, answered by the connection before any handler"),
    ApiKey.API_VERSIONS: Rule((), _open, "open to every logged-in client"),
    ApiKey.CREATE_TOPICS: Rule(
        (Need(TOPIC, Op.CREATE, E, "or CREATE on the cluster"),),
        _typed_items(("topics",), "topics", _topic_op(Op.CREATE), _topic_row(CreatableTopicResult), first=True),
    ),
    ApiKey.DELETE_TOPICS: Rule(
        (Need(TOPIC, Op.DELETE, E),),
        _typed_items(
            ("topics", "topic_names"), "responses", _topic_op(Op.DELETE), _topic_row(DeletableTopicResult), first=True
        ),
    ),
    ApiKey.CREATE_PARTITIONS: Rule(
        (Need(TOPIC, Op.ALTER, E),),
        _typed_items(("topics",), "results", _topic_op(Op.ALTER), _topic_row(CreatePartitionsTopicResult), first=True),
    ),
    ApiKey.DESCRIBE_CONFIGS: Rule(
        (
            Need(TOPIC, Op.DESCRIBE_CONFIGS, E),
            Need(CLUSTER, Op.DESCRIBE_CONFIGS, R),
            Need(GROUP, Op.DESCRIBE_CONFIGS, E),
        ),
        _typed_items(("resources",), "results", _config_op(Op.DESCRIBE_CONFIGS), _config_row),
        "the cluster for a broker's own configs, refused in their rows",
    ),
    ApiKey.ALTER_CONFIGS: Rule(
        (Need(TOPIC, Op.ALTER_CONFIGS, E), Need(CLUSTER, Op.ALTER_CONFIGS, R), Need(GROUP, Op.ALTER_CONFIGS, E)),
        _typed_items(("resources",), "responses", _config_op(Op.ALTER_CONFIGS), _config_row),
        "the cluster for brokers' dynamic configs, refused in their rows",
    ),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: Rule(
        (Need(TOPIC, Op.ALTER_CONFIGS, E), Need(CLUSTER, Op.ALTER_CONFIGS, R), Need(GROUP, Op.ALTER_CONFIGS, E)),
        _typed_items(("resources",), "responses", _config_op(Op.ALTER_CONFIGS), _config_row),
        "the cluster for brokers' dynamic configs, refused in their rows",
    ),
    ApiKey.INIT_PRODUCER_ID: Rule(
        (Need(CLUSTER, Op.IDEMPOTENT_WRITE, R, "or WRITE on any topic (KIP-679)"), Need(TXN, Op.WRITE, R)),
        _init_producer_id,
        "WRITE on the transactional id instead, for a transactional producer",
    ),
    ApiKey.ADD_PARTITIONS_TO_TXN: Rule(
        (Need(TXN, Op.WRITE, R), Need(TOPIC, Op.WRITE, R), Need(CLUSTER, Op.CLUSTER_ACTION, R)),
        _add_partitions_to_txn,
        "CLUSTER_ACTION for the brokers' batched form (v4+)",
    ),
    ApiKey.ADD_OFFSETS_TO_TXN: Rule((Need(TXN, Op.WRITE, R), Need(GROUP, Op.READ, R)), _txn_write(group_op=Op.READ)),
    ApiKey.END_TXN: Rule((Need(TXN, Op.WRITE, R),), _txn_write()),
    ApiKey.TXN_OFFSET_COMMIT: Rule(
        (Need(TXN, Op.WRITE, R), Need(GROUP, Op.READ, R), Need(TOPIC, Op.READ, E)), _txn_offset_commit
    ),
    ApiKey.DESCRIBE_TRANSACTIONS: Rule((Need(TXN, Op.DESCRIBE, E),), _describe_transactions),
    ApiKey.LIST_TRANSACTIONS: Rule((Need(TXN, Op.DESCRIBE, E),), _list_transactions, "those not allowed are left out"),
    ApiKey.WRITE_TXN_MARKERS: Rule(
        (Need(CLUSTER, Op.CLUSTER_ACTION, R),),
        _write_txn_markers,
        "coordinator to leaders; an admin's kl-transactions abort",
    ),
    ApiKey.DESCRIBE_ACLS: Rule((Need(CLUSTER, Op.DESCRIBE, R),), _cluster(Op.DESCRIBE, "DescribeAcls")),
    ApiKey.CREATE_ACLS: Rule((Need(CLUSTER, Op.ALTER, R),), _cluster(Op.ALTER, "CreateAcls")),
    ApiKey.DELETE_ACLS: Rule((Need(CLUSTER, Op.ALTER, R),), _cluster(Op.ALTER, "DeleteAcls")),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: Rule(
        (Need(CLUSTER, Op.DESCRIBE, R),), _cluster(Op.DESCRIBE, "DescribeUserScramCredentials")
    ),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: Rule(
        (Need(CLUSTER, Op.ALTER, R),), _cluster(Op.ALTER, "AlterUserScramCredentials")
    ),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: Rule(
        (Need(CLUSTER, Op.DESCRIBE_CONFIGS, R),), _cluster(Op.DESCRIBE_CONFIGS, "DescribeClientQuotas")
    ),
    ApiKey.ALTER_CLIENT_QUOTAS: Rule(
        (Need(CLUSTER, Op.ALTER_CONFIGS, R),), _cluster(Op.ALTER_CONFIGS, "AlterClientQuotas")
    ),
    ApiKey.ELECT_LEADERS: Rule((Need(CLUSTER, Op.ALTER, R),), _elect_leaders),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: Rule((Need(CLUSTER, Op.ALTER, R),), _alter_reassignments),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: Rule(
        (Need(CLUSTER, Op.DESCRIBE, R),), _cluster(Op.DESCRIBE, "ListPartitionReassignments")
    ),
    ApiKey.ENVELOPE: Rule(
        (Need(CLUSTER, Op.CLUSTER_ACTION, R),), _broker_only_api(ApiKey.ENVELOPE), "broker to controller"
    ),
    ApiKey.QUORUM: Rule((Need(CLUSTER, Op.CLUSTER_ACTION, R),), _broker_only_api(ApiKey.QUORUM), "broker to broker"),
    ApiKey.ALTER_PARTITION: Rule(
        (Need(CLUSTER, Op.CLUSTER_ACTION, R),), _broker_only_api(ApiKey.ALTER_PARTITION), "broker to controller"
    ),
    ApiKey.BROKER_REGISTRATION: Rule(
        (Need(CLUSTER, Op.CLUSTER_ACTION, R),), _broker_only_api(ApiKey.BROKER_REGISTRATION), "broker to controller"
    ),
    ApiKey.UPDATE_METADATA: Rule(
        (Need(CLUSTER, Op.CLUSTER_ACTION, R),), _broker_only_api(ApiKey.UPDATE_METADATA), "controller to broker"
    ),
    ApiKey.BROKER_HEARTBEAT: Rule(
        (Need(CLUSTER, Op.CLUSTER_ACTION, R),),
        _broker_only_api(ApiKey.BROKER_HEARTBEAT),
        "broker to broker, also on the heartbeat listener",
    ),
}


def authorization_table_markdown() -> str:
    """docs/SECURITY.md's table, from RULES (tests/unit/test_authorization.py keeps the two the same)."""
    lines = ["| Api (key) | Needs |", "|---|---|"]
    for api in sorted(RULES):
        rule = RULES[api]
        needs = "; ".join(
            f"{n.op.name} on {'each' if n.scope == 'each' else 'the'} {n.resource.name.lower().replace('_', ' ')}"
            + (f" {n.alt}" if n.alt else "")
            for n in rule.needs
        )
        text = needs or "nothing"
        if rule.note:
            text += f" ({rule.note})"
        lines.append(f"| {api.name} ({int(api)}) | {text} |")
    return "\n".join(lines) + "\n"
