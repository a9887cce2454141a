"""AdminApis: the topic and config requests (Kafka's CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs,
AlterConfigs, IncrementalAlterConfigs), typed end to end (net/schema/): the same handler for both listeners, whose
field ranges were checked when the request was decoded, and whose authorization (per topic, per resource) was
decided before it runs (broker/server/authorization.py).

The changes are the active controller's to make: forwarded there in an ENVELOPE (KIP-590), so an admin client may
send them to any broker; the controller answers once every live broker has applied them. Topic creations,
deletions and new partitions are metered by the controller mutation quota (KIP-599): strict (the partitions over
the quota answered THROTTLING_QUOTA_EXCEEDED) for every native client and for Kafka clients from CreateTopics v6,
DeleteTopics v5 and CreatePartitions v3; an older Kafka client is throttled instead (permissive), as Kafka does.

Config resources: topics (type 2), brokers (type 4: a broker describes its own configs, those of its
server.properties; a broker's or the cluster default's dynamic configs may be altered) and groups (type 32: the
share group configs); any other type is answered INVALID_REQUEST in its row.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import time
import uuid
from functools import partial
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from broker.group.group_configs import altered as altered_group_configs
from broker.network.server import ConnectionContext
from broker.quota.mutation_quota import ControllerMutationQuota, MutationMeter
from broker.server import broker_loggers
from broker.server.config_describe import (
    LIST_KEYS,
    ConfigEntry,
    ConfigType,
    broker_entries,
    default_broker_entries,
    group_entries,
    topic_entries,
)
from broker.server.dynamic_config import DEFAULT_BROKER, altered, broker_resource
from net.config_def import ConfigSource
from net.errors import (
    ErrorCode,
    InvalidConfigError,
    InvalidRequestError,
    UnknownTopicOrPartitionError,
    error_code_of,
    error_for,
)
from net.protocol import ApiKey
from net.schema.alter_configs import AlterConfigsRequest, AlterConfigsResourceResponse, AlterConfigsResponse
from net.schema.create_partitions import CreatePartitionsRequest, CreatePartitionsResponse, CreatePartitionsTopicResult
from net.schema.create_topics import CreatableTopicResult, CreateTopicsRequest, CreateTopicsResponse
from net.schema.delete_topics import DeletableTopicResult, DeleteTopicsRequest, DeleteTopicsResponse
from net.schema.describe_configs import (
    DescribeConfigsRequest,
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    DescribeConfigsSynonym,
)
from net.schema.incremental_alter_configs import AlterConfigsResource as IncrementalAlterableResource
from net.schema.incremental_alter_configs import AlterConfigsResourceResponse as IncrementalAlterConfigsResourceResponse
from net.schema.incremental_alter_configs import IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse

if TYPE_CHECKING:
    from broker.controller.channel import ControllerChannel
    from broker.controller.service import ControllerService
    from broker.log.config import LogConfig
    from broker.metadata.image import MetadataImage
    from broker.server.config import BrokerConfig

log = logging.getLogger("kafkalite.api")
TOPIC, BROKER, BROKER_LOGGER, GROUP = 2, 4, 8, 32  # Kafka's ConfigResource.Type
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3  # IncrementalAlterConfigs' config_operation
# KIP-599: the first Kafka version of each api whose client knows THROTTLING_QUOTA_EXCEEDED (strict quota); an
# older client is throttled instead. Native clients are strict.
STRICT_QUOTA_SINCE = {ApiKey.CREATE_TOPICS: 6, ApiKey.DELETE_TOPICS: 5, ApiKey.CREATE_PARTITIONS: 3}
# A config change as the alter functions take it: a value sets the key, None deletes the override, ("append" |
# "subtract", items) adds to / removes from a list-valued key.
Change = str | None | tuple[str, str | None]
AlterRequest = AlterConfigsRequest | IncrementalAlterConfigsRequest
# A handler's answer: the api's typed response, or a whole-request error body ({"error_code", "error_message"}).
Answer = Any


def strict_quota(api: ApiKey, ctx: ConnectionContext) -> bool:
    """Whether a metadata change over the mutation quota is refused (THROTTLING_QUOTA_EXCEEDED) rather than
    throttled: every native request, and a Kafka client's from the version that knows the error (KIP-599)."""
    return ctx.kafka_version is None or ctx.kafka_version >= STRICT_QUOTA_SINCE[api]


def _throttle(meter: MutationMeter) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=meter.throttle_ms)


class AdminApis:
    def __init__(
        self,
        config: "BrokerConfig",
        image: "MetadataImage",
        controller: "ControllerService",
        channel: "ControllerChannel",
        mutation_quota: ControllerMutationQuota,
        topic_config: Callable[[str], "LogConfig"],
    ) -> None:
        self.config = config
        self.image = image
        self.controller = controller
        self.channel = channel
        self.mutation_quota = mutation_quota
        self.topic_config = topic_config
        self.handlers = {
            ApiKey.CREATE_TOPICS: self.create_topics,
            ApiKey.DELETE_TOPICS: self.delete_topics,
            ApiKey.CREATE_PARTITIONS: self.create_partitions,
            ApiKey.DESCRIBE_CONFIGS: self.describe_configs,
            ApiKey.ALTER_CONFIGS: self.alter_configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self.alter_configs,
        }

    # --- topics ------------------------------------------------------------------------------------------------

    def _meter(self, api: ApiKey, ctx: ConnectionContext) -> MutationMeter:
        """Whom a metadata change is metered against (KIP-599): the requester, or in a request another broker
        forwarded (ForwardedContext), the client named in its envelope. Read before the handler's first await:
        the connection's `kafka_version` is the request's only until then."""
        user, client = ctx.principal.partition(":")[2], ctx.client_id or ""
        return MutationMeter(self.mutation_quota, user, client, strict_quota(api, ctx), time.monotonic)

    def _metered(
        self, api: ApiKey, req: Any, ctx: ConnectionContext, change: Callable[[Any, MutationMeter], Awaitable[Answer]]
    ) -> Awaitable[Answer]:
        """A metered metadata change, at the active controller (forwarded there from any broker)."""
        meter = self._meter(api, ctx)
        answer = self.channel.serve_or_forward_typed(req, ctx, lambda: change(req, meter))
        return self._muted_while_throttled(answer, ctx)

    @staticmethod
    async def _muted_while_throttled(answer: Awaitable[Answer], ctx: ConnectionContext) -> Answer:
        """A controller mutation quota's throttle (here, or at the controller the request was forwarded to)
        mutes the connection as long, as every quota's does (KIP-219)."""
        body = await answer
        throttle = getattr(body, "throttle_time", None)
        if isinstance(throttle, datetime.timedelta) and throttle > datetime.timedelta(0):
            ctx.throttle(int(throttle.total_seconds() * 1000))
        return body

    def create_topics(self, req: CreateTopicsRequest, ctx: ConnectionContext) -> Awaitable[Answer]:
        return self._metered(ApiKey.CREATE_TOPICS, req, ctx, self._create_topics)

    async def _create_topics(self, req: CreateTopicsRequest, meter: MutationMeter) -> CreateTopicsResponse:
        results = []
        for t in req.topics:
            n: Any = t.num_partitions
            rf: Any = t.replication_factor
            try:
                # A manual assignment (Kafka's: num_partitions and replication_factor -1) places the replicas.
                assignments = [[a.partition_index, list(a.broker_ids)] for a in t.assignments] or None
                if assignments is None:
                    n = self.config.num_partitions if n == -1 else n
                    rf = self.config.default_replication_factor if rf == -1 else rf
                configs = self.validate_configs({c.name: c.value for c in t.configs if c.value is not None})
                if req.validate_only:
                    meter.check()
                    self.controller.check_active()
                    self.controller.logic.create_topic(t.name, n, rf, configs, assignments)
                else:
                    count: int = len(assignments) if assignments is not None else n
                    create = partial(self.controller.create_topic, t.name, n, rf, configs, assignments)
                    await meter.mutate(count, create)
                info = self.image.topics.get(t.name)
                results.append(
                    CreatableTopicResult(
                        name=t.name,
                        num_partitions=len(info.partitions) if info is not None else n,
                        replication_factor=info.replication_factor if info is not None else rf,
                    )
                )
            except Exception as e:
                code, message = error_code_of(e)
                results.append(CreatableTopicResult(name=t.name, error_code=code, error_message=message))
        return CreateTopicsResponse(throttle_time=_throttle(meter), topics=tuple(results))

    def validate_configs(self, configs: dict[str, str]) -> dict[str, str]:
        """A topic's overrides, checked against the topic config schema (InvalidConfigError naming the key)."""
        overrides = {str(k): str(v) for k, v in configs.items()}
        self.config.topic_config_defaults().merged(overrides)
        return overrides

    def delete_topics(self, req: DeleteTopicsRequest, ctx: ConnectionContext) -> Awaitable[Answer]:
        return self._metered(ApiKey.DELETE_TOPICS, req, ctx, self._delete_topics)

    async def _delete_topics(self, req: DeleteTopicsRequest, meter: MutationMeter) -> DeleteTopicsResponse:
        """By name (topic_names, or v6's topics), or by id (v6: a topic without a name)."""
        by_id = {info.topic_id: name for name, info in self.image.topics.items()} if req.topics else {}
        asked = [(t.name, t.topic_id) for t in req.topics] or [(n, None) for n in req.topic_names]
        results = []
        for name, topic_id in asked:
            try:
                if name is None:
                    name = by_id.get(topic_id.hex) if topic_id is not None else None
                    if name is None:
                        raise error_for(ErrorCode.UNKNOWN_TOPIC_ID, f"no topic has id {topic_id}")
                info = self.image.topics.get(name)
                if info is not None and topic_id is None:  # v6 answers the id of a topic deleted by name
                    topic_id = uuid.UUID(hex=info.topic_id)
                n = len(info.partitions) if info is not None else 0
                await meter.mutate(n, partial(self.controller.delete_topic, name))
                results.append(DeletableTopicResult(name=name, topic_id=topic_id))
            except Exception as e:
                code, message = error_code_of(e)
                row = DeletableTopicResult(name=name, topic_id=topic_id, error_code=code, error_message=message)
                results.append(row)
        return DeleteTopicsResponse(throttle_time=_throttle(meter), responses=tuple(results))

    def create_partitions(self, req: CreatePartitionsRequest, ctx: ConnectionContext) -> Awaitable[Answer]:
        return self._metered(ApiKey.CREATE_PARTITIONS, req, ctx, self._create_partitions)

    async def _create_partitions(self, req: CreatePartitionsRequest, meter: MutationMeter) -> CreatePartitionsResponse:
        results = []
        for t in req.topics:
            try:
                # one replica list per new partition, or placed by the controller
                assignments = [list(a.broker_ids) for a in t.assignments or ()] or None
                if req.validate_only:
                    meter.check()
                    self.controller.check_active()
                    self.controller.logic.create_partitions(t.name, t.count, assignments)
                else:
                    info = self.image.topics.get(t.name)
                    added = t.count - len(info.partitions) if info is not None else 0
                    grow = partial(self.controller.create_partitions, t.name, t.count, assignments)
                    await meter.mutate(max(0, added), grow)
                results.append(CreatePartitionsTopicResult(name=t.name))
            except Exception as e:
                code, message = error_code_of(e)
                results.append(CreatePartitionsTopicResult(name=t.name, error_code=code, error_message=message))
        return CreatePartitionsResponse(throttle_time=_throttle(meter), results=tuple(results))

    # --- configs -----------------------------------------------------------------------------------------------

    def describe_configs(self, req: DescribeConfigsRequest, ctx: ConnectionContext) -> DescribeConfigsResponse:
        """Each resource's configs as Kafka's ConfigHelper builds them (broker/server/config_describe.py): value,
        type, source, synonyms and documentation when asked, only the `configuration_keys` asked (none: all)."""
        results = []
        for r in req.resources:
            configs: tuple[DescribeConfigsResourceResult, ...] = ()
            try:
                keys = r.configuration_keys
                configs = tuple(
                    _described(e, req.include_synonyms, req.include_documentation)
                    for e in self._config_entries(r.resource_type, r.resource_name)
                    if not keys or e.name in keys
                )
                code, message = 0, None
            except Exception as e:
                code, message = error_code_of(e)
            results.append(_resource_row(DescribeConfigsResult, r, code, message, configs=configs))
        return DescribeConfigsResponse(results=tuple(results))

    def _config_entries(self, kind: int, name: str) -> list[ConfigEntry]:
        if kind == TOPIC:
            info = self.image.topics.get(name)
            if info is None:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            return topic_entries(self.config, info.configs, self.topic_config(name))
        if kind == BROKER:
            if name == DEFAULT_BROKER:  # the cluster default: its dynamic configs, as Kafka describes it
                return default_broker_entries(self.image.broker_configs.get(DEFAULT_BROKER, {}))
            if name != str(self.config.broker_id):
                raise InvalidRequestError(
                    f"broker {self.config.broker_id} describes its own configs only (asked for {name})"
                )
            return broker_entries(self.config, self.image.broker_configs)
        if kind == GROUP:
            return group_entries(self.config, self.image.group_configs.get(name, {}))
        if kind == BROKER_LOGGER:
            broker_loggers.check_broker_id(name, self.config.broker_id)
            return [
                ConfigEntry(
                    n, level, ConfigSource.DYNAMIC_BROKER_LOGGER_CONFIG, ConfigType.UNKNOWN, False, False, "", ()
                )
                for n, level in broker_loggers.describe()
            ]
        raise InvalidRequestError(f"resource type {kind} is not supported")

    def alter_configs(self, req: AlterRequest, ctx: ConnectionContext) -> Awaitable[Answer]:
        """AlterConfigs: the given keys become the resource's whole set of overrides (the others return to their
        defaults); IncrementalAlterConfigs: SET, DELETE, APPEND and SUBTRACT each key. `validate_only` checks
        without changing anything."""
        if not any(r.resource_type == BROKER_LOGGER for r in req.resources):
            return self.channel.serve_or_forward_typed(req, ctx, lambda: self._alter_configs(req))
        return self._alter_with_loggers(req, ctx)

    async def _alter_with_loggers(self, req: AlterRequest, ctx: ConnectionContext) -> Answer:
        """A request naming BROKER_LOGGER resources: those are this broker's own log levels, changed here (Kafka's
        ConfigAdminManager serves them on the broker, never on the controller); the rest goes the usual way. The
        answer keeps the request's order."""
        answer_cls, row_cls = _ALTER_ANSWERS[type(req)]
        rest: tuple[Any, ...] = tuple(r for r in req.resources if r.resource_type != BROKER_LOGGER)
        forwarded: list[Any] = []
        if rest:
            sub: AlterRequest = dataclasses.replace(req, resources=rest)  # type: ignore[arg-type]
            sub_answer = await self.channel.serve_or_forward_typed(sub, ctx, lambda: self._alter_configs(sub))
            forwarded = list(sub_answer.responses)
        rows = []
        for r in req.resources:
            if r.resource_type != BROKER_LOGGER:
                rows.append(forwarded.pop(0))
                continue
            try:
                if not isinstance(r, IncrementalAlterableResource):
                    raise InvalidRequestError(
                        "AlterConfigs is only supported for topics and brokers, but resource type is BROKER_LOGGER"
                    )
                broker_loggers.check_broker_id(r.resource_name, self.config.broker_id)
                ops = [(c.name, c.config_operation, c.value) for c in r.configs]
                broker_loggers.validate(ops)
                if not req.validate_only:
                    broker_loggers.apply(ops)
                    log.info("log levels of %s changed by %s", [n for n, _, _ in ops], ctx.principal)
                code, message = 0, None
            except Exception as e:
                code, message = error_code_of(e)
            rows.append(_resource_row(row_cls, r, code, message))
        return answer_cls(responses=tuple(rows))

    async def _alter_configs(self, req: AlterRequest) -> Answer:
        replace = isinstance(req, AlterConfigsRequest)
        answer_cls, row_cls = _ALTER_ANSWERS[type(req)]
        rows = []
        for r in req.resources:
            try:
                changes = config_changes(r.configs)
                if r.resource_type == TOPIC:
                    await self._alter_topic(r.resource_name, changes, req.validate_only, replace)
                elif r.resource_type == BROKER:
                    await self._alter_broker(r.resource_name, changes, req.validate_only, replace)
                elif r.resource_type == GROUP:
                    await self._alter_group(r.resource_name, changes, req.validate_only, replace)
                else:
                    raise InvalidRequestError(f"resource type {r.resource_type} is not supported")
                code, message = 0, None
            except Exception as e:
                code, message = error_code_of(e)
            rows.append(_resource_row(row_cls, r, code, message))
        return answer_cls(responses=tuple(rows))

    async def _alter_topic(self, name: str, changes: dict[str, Change], validate_only: bool, replace: bool) -> None:
        info = self.image.topics.get(name)
        if info is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        merged = {} if replace else dict(info.configs)
        effective = self.topic_config(name).to_props()
        for k, v in changes.items():
            if v is None:
                merged.pop(k, None)
            elif isinstance(v, tuple):
                op, value = v
                if k in effective and k not in LIST_KEYS:
                    raise InvalidConfigError(f"config {op} is not allowed for {k!r}: not a list config")
                # Kafka's order: the current items, then the appended ones not already there.
                items = [x for x in str(merged.get(k, effective.get(k, ""))).split(",") if x]
                given = [x for x in (value or "").split(",") if x]
                if op == "append":
                    items += [x for x in given if x not in items]
                else:
                    items = [x for x in items if x not in given]
                merged[k] = ",".join(items)
            else:
                merged[k] = v
        overrides = self.validate_configs(merged)
        self.controller.check_active()
        if not validate_only:
            await self.controller.set_configs(name, overrides)

    async def _alter_broker(self, name: str, changes: dict[str, Change], validate_only: bool, replace: bool) -> None:
        """A broker's dynamic configs (or the cluster default's, name ""), written to the metadata log for every
        broker to apply (broker/server/dynamic_config.py)."""
        broker = broker_resource(name)
        static = frozenset(d.name for d in self.config.describe_keys())
        current = {} if replace else self.image.broker_configs.get(broker, {})
        configs = altered(current, _as_native(changes), static)
        self.controller.check_active()
        if not validate_only:
            await self.controller.set_broker_configs(broker, configs)

    async def _alter_group(self, name: str, changes: dict[str, Change], validate_only: bool, replace: bool) -> None:
        """A group's own configs (the share group configs, broker/group/group_configs.py); any group id,
        existing or not, as Kafka."""
        if not name:
            raise InvalidConfigError("a group config needs a group id")
        current = {} if replace else self.image.group_configs.get(name, {})
        configs = altered_group_configs(current, _as_native(changes), self.config.to_props())
        self.controller.check_active()
        if not validate_only and configs != self.image.group_configs.get(name, {}):
            await self.controller.set_group_configs(name, configs)


_OPS = {APPEND: "append", SUBTRACT: "subtract"}
# Each alter request's answer and row classes (the same fields; one class per api, as in Kafka's schemas).
_ALTER_ANSWERS: dict[type, tuple[type, type]] = {
    AlterConfigsRequest: (AlterConfigsResponse, AlterConfigsResourceResponse),
    IncrementalAlterConfigsRequest: (IncrementalAlterConfigsResponse, IncrementalAlterConfigsResourceResponse),
}


def config_changes(configs: Any) -> dict[str, Change]:
    """A resource's configs as changes: AlterConfigs' values (None: the override removed), IncrementalAlter-
    Configs' operations; an unknown operation is the resource's INVALID_REQUEST."""
    out: dict[str, Change] = {}
    for c in configs:
        op = getattr(c, "config_operation", SET)
        if op == SET:
            out[c.name] = c.value
        elif op == DELETE:
            out[c.name] = None
        elif op in _OPS:
            out[c.name] = (_OPS[op], c.value)
        else:
            raise InvalidRequestError(f"unknown config operation {op} for {c.name}")
    return out


def _as_native(changes: dict[str, Change]) -> dict[str, Any]:
    """The changes as the dynamic-config functions take them (["append", v] for a list operation)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in changes.items()}


def _resource_row(cls: type, r: Any, code: int, message: str | None, **more: Any) -> Any:
    """A config request's row answering resource `r`."""
    return cls(
        error_code=code, error_message=message, resource_type=r.resource_type, resource_name=r.resource_name, **more
    )


def _described(e: ConfigEntry, synonyms: bool, docs: bool) -> DescribeConfigsResourceResult:
    return DescribeConfigsResourceResult(
        name=e.name,
        value=e.value,
        read_only=e.read_only,
        config_source=int(e.source),
        is_sensitive=e.sensitive,
        synonyms=tuple(DescribeConfigsSynonym(name=n, value=v, source=int(s)) for n, v, s in e.synonyms)
        if synonyms
        else (),
        config_type=int(e.type),
        documentation=e.doc if docs else None,
    )
