"""Blocking faces of the async clients: each runs its async twin on a private
event loop thread. Producer.send appends to the shared accumulator directly,
so the per-message path never crosses threads.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Callable, Coroutine, Generic, Iterable, Protocol, TypeVar

from client.admin import AsyncAdmin, GroupDescription, NewTopic, TopicDescription
from client.consumer import AsyncConsumer, ConsumerRecord, TopicPartition
from client.producer import AsyncProducer
from client.share_consumer import AsyncShareConsumer
from net.acl import AclBinding, AclBindingFilter
from net.errors import KafkaLiteError
from net.protocol import ElectionType
from net.schema.describe_log_dirs import DescribeLogDirsResult
from net.schema.describe_quorum import DescribeQuorumResponsePartitionData
from net.schema.share_group_describe import DescribedGroup as DescribedShareGroup

T = TypeVar("T")


class _AsyncClient(Protocol):
    async def start(self) -> None: ...
    async def close(self) -> None: ...


Impl = TypeVar("Impl", bound=_AsyncClient)


class LoopThread:
    """An event loop (uvloop when available) on a daemon thread."""

    def __init__(self, name: str) -> None:
        self.loop: asyncio.AbstractEventLoop
        try:
            import uvloop

            self.loop = uvloop.new_event_loop()
        except ImportError:  # pragma: no cover - uvloop is a dependency
            self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout)
        except TimeoutError:
            fut.cancel()
            raise KafkaLiteError(f"operation did not complete within {timeout}s") from None

    def stop(self) -> None:
        try:
            asyncio.run_coroutine_threadsafe(_cancel_all(), self.loop).result(5)
        except Exception:  # stopping must not fail; leftover tasks die with the loop
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        if not self.loop.is_running():
            self.loop.close()


async def _cancel_all() -> None:
    me = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not me]
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


class _Blocking(Generic[Impl]):
    _impl: Impl

    def __init__(self, impl_factory: Callable[[], Impl], name: str) -> None:
        self._lt = LoopThread(name)
        try:
            self._impl = self._lt.run(_construct(impl_factory))
            self._lt.run(self._impl.start())
        except BaseException:
            self._lt.stop()
            raise

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self, timeout: float | None = None) -> None:
        if self._lt is None:
            return
        try:
            self._lt.run(self._impl.close(), timeout)
        finally:
            self._lt.stop()
            self._lt = None  # type: ignore[assignment]


async def _construct(factory: Callable[[], T]) -> T:
    # The async clients create loop-bound objects in __init__: build them on their loop.
    return factory()


class Producer(_Blocking[AsyncProducer]):
    """Blocking producer. `send` queues and returns at once; `flush` waits for delivery."""

    def __init__(self, bootstrap_servers: str, **config: Any) -> None:
        super().__init__(lambda: AsyncProducer(bootstrap_servers, **config), "kl-producer")
        self.send = self._send_with_backpressure

    def _send_with_backpressure(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        headers: list[Any] | None = None,
        on_delivery: Any = None,
        timestamp_ms: int | None = None,
    ) -> None:
        impl = self._impl
        acc = impl.accumulator
        if acc.buffered >= acc.buffer_memory and not acc.wait_for_space(impl.max_block):
            raise KafkaLiteError(f"buffer.memory full for max.block.ms={int(impl.max_block * 1000)}")
        impl.send(topic, value, key, partition, headers, on_delivery, timestamp_ms)

    @property
    def idempotent(self) -> bool:
        return self._impl.idempotent

    def flush(self, timeout: float | None = None) -> None:
        self._lt.run(self._impl.flush(timeout))

    def partitions_for(self, topic: str) -> list[int]:
        return self._lt.run(self._impl.partitions_for(topic))

    # Transactions (client/transactions.py): Kafka's producer calls.
    def init_transactions(self) -> None:
        self._lt.run(self._impl.init_transactions())

    def begin_transaction(self) -> None:
        self._impl.begin_transaction()

    def send_offsets_to_transaction(self, offsets: Any, group_metadata: Any) -> None:
        self._lt.run(self._impl.send_offsets_to_transaction(offsets, group_metadata))

    def commit_transaction(self, timeout: float | None = None) -> None:
        self._lt.run(self._impl.commit_transaction(timeout))

    def abort_transaction(self, timeout: float | None = None) -> None:
        self._lt.run(self._impl.abort_transaction(timeout))

    @property
    def transactional_id(self) -> str | None:
        return self._impl.transactional_id

    @property
    def producer_id_and_epoch(self) -> tuple[int, int]:
        return self._impl.producer_id_and_epoch


class Consumer(_Blocking[AsyncConsumer]):
    """Blocking consumer: manual assignment, or a consumer group with subscribe()."""

    def __init__(self, bootstrap_servers: str, **config: Any) -> None:
        super().__init__(lambda: AsyncConsumer(bootstrap_servers, **config), "kl-consumer")

    def subscribe(self, topics: Iterable[str] | None = None, pattern: str | None = None, listener: Any = None) -> None:
        """The listener's callbacks run on a worker thread while poll() waits, so they may call this
        consumer's blocking methods (commit() in on_partitions_revoked, as Kafka users do)."""
        self._lt.run(_call(self._impl.subscribe, topics, pattern, _ThreadedListener(listener) if listener else None))

    def subscription(self) -> list[str]:
        return self._impl.subscription()

    def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        self._lt.run(self._impl.commit(offsets))

    def commit_async(self, offsets: dict[TopicPartition, int] | None = None, callback: Any = None) -> None:
        self._lt.run(_call(self._impl.commit_async, offsets, callback))

    def committed(self, tp: TopicPartition | tuple[str, int]) -> int | None:
        return self._lt.run(self._impl.committed(tp))

    @property
    def member_id(self) -> str:
        return self._impl.member_id

    @property
    def generation(self) -> int:
        return self._impl.generation

    def group_metadata(self) -> Any:
        return self._impl.group_metadata()

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        self._lt.run(self._impl.assign(list(partitions)))

    def assignment(self) -> set[TopicPartition]:
        return self._impl.assignment()

    def seek(self, tp: TopicPartition | tuple[str, int], offset: int) -> None:
        self._lt.run(_call(self._impl.seek, tp, offset))

    def seek_to_beginning(self, *tps: TopicPartition) -> None:
        self._lt.run(self._impl.seek_to_beginning(*tps))

    def seek_to_end(self, *tps: TopicPartition) -> None:
        self._lt.run(self._impl.seek_to_end(*tps))

    def position(self, tp: TopicPartition | tuple[str, int]) -> int:
        return self._lt.run(self._impl.position(tp))

    def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[ConsumerRecord]:
        return self._lt.run(self._impl.poll(timeout_ms, max_records))

    def list_topics(self) -> dict[str, list[int]]:
        return self._lt.run(self._impl.list_topics())

    def poll_raw(self, timeout_ms: int = 1000) -> list[tuple[TopicPartition, bytes, int]]:
        return self._lt.run(self._impl.poll_raw(timeout_ms))

    def list_offsets(self, tps: Iterable[TopicPartition], timestamp: int) -> dict[TopicPartition, int]:
        return self._lt.run(self._impl.list_offsets(list(tps), timestamp))

    def partitions_for(self, topic: str) -> list[int]:
        async def get() -> list[int]:
            await self._impl.client.refresh_metadata([topic])
            return self._impl.client.metadata.partitions(topic, "read")

        return self._lt.run(get())


async def _call(fn: Any, *args: Any) -> Any:
    return fn(*args)


class _ThreadedListener:
    """Runs a blocking listener's callbacks off the loop thread, so they can call back into the consumer."""

    def __init__(self, listener: Any) -> None:
        self.listener = listener

    async def _run(self, name: str, tps: set[TopicPartition]) -> None:
        fn = getattr(self.listener, name, None)
        if fn is None:
            if name == "on_partitions_lost":
                await self._run("on_partitions_revoked", tps)
            return
        await asyncio.get_running_loop().run_in_executor(None, fn, tps)

    def on_partitions_revoked(self, tps: set[TopicPartition]) -> Any:
        return self._run("on_partitions_revoked", tps)

    def on_partitions_assigned(self, tps: set[TopicPartition]) -> Any:
        return self._run("on_partitions_assigned", tps)

    def on_partitions_lost(self, tps: set[TopicPartition]) -> Any:
        return self._run("on_partitions_lost", tps)


class ShareConsumer(_Blocking[AsyncShareConsumer]):
    """Blocking share consumer (KIP-932): a member of a share group; each record goes to one member at a time."""

    def __init__(self, bootstrap_servers: str, group_id: str, **config: Any) -> None:
        super().__init__(lambda: AsyncShareConsumer(bootstrap_servers, group_id, **config), "kl-share-consumer")

    def subscribe(self, topics: Iterable[str]) -> None:
        self._lt.run(_call(self._impl.subscribe, topics))

    def poll(self, timeout_ms: int = 1000) -> list[ConsumerRecord]:
        return self._lt.run(self._impl.poll(timeout_ms))

    def acknowledge(self, record: ConsumerRecord, kind: int = 1) -> None:
        """ACCEPT (1), RELEASE (2) or REJECT (3); sent with the next poll or commit."""
        self._lt.run(_call(self._impl.acknowledge, record, kind))

    def commit(self) -> None:
        self._lt.run(self._impl.commit())

    @property
    def member_id(self) -> str:
        return self._impl.member_id


class Admin(_Blocking[AsyncAdmin]):
    def __init__(self, bootstrap_servers: str, **config: Any) -> None:
        super().__init__(lambda: AsyncAdmin(bootstrap_servers, **config), "kl-admin")

    def create_topics(self, topics: list[NewTopic], validate_only: bool = False) -> None:
        self._lt.run(self._impl.create_topics(topics, validate_only))

    def create_partitions(
        self, topic: str, count: int, validate_only: bool = False, assignments: list[list[int]] | None = None
    ) -> None:
        self._lt.run(self._impl.create_partitions(topic, count, validate_only, assignments))

    def delete_topics(self, names: list[str]) -> None:
        self._lt.run(self._impl.delete_topics(names))

    def alter_configs(self, topic: str, changes: dict[str, str | None], validate_only: bool = False) -> None:
        self._lt.run(self._impl.alter_configs(topic, changes, validate_only))

    def describe_configs(self, topic: str) -> dict[str, tuple[str, bool]]:
        return self._lt.run(self._impl.describe_configs(topic))

    def broker_ids(self) -> list[int]:
        return self._lt.run(self._impl.broker_ids())

    def topic_partitions(self, include_internal: bool = False) -> dict[str, list[int]]:
        return self._lt.run(self._impl.topic_partitions(include_internal))

    def describe_metadata_quorum(self) -> tuple[str, DescribeQuorumResponsePartitionData]:
        return self._lt.run(self._impl.describe_metadata_quorum())

    def describe_log_dirs(
        self, brokers: list[int] | None = None, topics: list[str] | None = None
    ) -> dict[int, tuple[DescribeLogDirsResult, ...]]:
        return self._lt.run(self._impl.describe_log_dirs(brokers, topics))

    def alter_broker_configs(
        self, broker: int | None, changes: dict[str, str | None], validate_only: bool = False
    ) -> None:
        self._lt.run(self._impl.alter_broker_configs(broker, changes, validate_only))

    def describe_broker_configs(self, broker: int | None) -> dict[str, tuple[str | None, int]]:
        return self._lt.run(self._impl.describe_broker_configs(broker))

    def list_topics(self, include_internal: bool = False) -> list[str]:
        return self._lt.run(self._impl.list_topics(include_internal))

    def describe_group_configs(self, group: str) -> dict[str, tuple[str | None, int]]:
        return self._lt.run(self._impl.describe_group_configs(group))

    def alter_group_configs(self, group: str, changes: dict[str, str | None], validate_only: bool = False) -> None:
        self._lt.run(self._impl.alter_group_configs(group, changes, validate_only))

    def describe_broker_loggers(self, broker: int) -> dict[str, str]:
        return self._lt.run(self._impl.describe_broker_loggers(broker))

    def alter_broker_loggers(self, broker: int, changes: dict[str, str | None], validate_only: bool = False) -> None:
        self._lt.run(self._impl.alter_broker_loggers(broker, changes, validate_only))

    def elect_leaders(
        self, election_type: ElectionType | int, partitions: list[TopicPartition] | None = None
    ) -> dict[TopicPartition, KafkaLiteError | None]:
        return self._lt.run(self._impl.elect_leaders(election_type, partitions))

    def alter_partition_reassignments(
        self, targets: dict[TopicPartition, list[int] | None]
    ) -> dict[TopicPartition, KafkaLiteError | None]:
        return self._lt.run(self._impl.alter_partition_reassignments(targets))

    def list_partition_reassignments(
        self, partitions: list[TopicPartition] | None = None
    ) -> dict[TopicPartition, tuple[list[int], list[int], list[int]]]:
        return self._lt.run(self._impl.list_partition_reassignments(partitions))

    def describe_topics(self, names: list[str] | None = None) -> list[TopicDescription]:
        return self._lt.run(self._impl.describe_topics(names))

    def create_acls(self, bindings: list[AclBinding]) -> None:
        self._lt.run(self._impl.create_acls(bindings))

    def describe_acls(self, acl_filter: AclBindingFilter | None = None) -> list[AclBinding]:
        return self._lt.run(self._impl.describe_acls(acl_filter))

    def delete_acls(self, filters: list[AclBindingFilter]) -> list[AclBinding]:
        return self._lt.run(self._impl.delete_acls(filters))

    def describe_user_scram_credentials(self, users: list[str] | None = None) -> dict[str, list[tuple[str, int]]]:
        return self._lt.run(self._impl.describe_user_scram_credentials(users))

    def alter_user_scram_credentials(
        self,
        upsertions: list[tuple[str, str, str, int]] = (),  # type: ignore[assignment]
        deletions: list[tuple[str, str]] = (),  # type: ignore[assignment]
    ) -> None:
        self._lt.run(self._impl.alter_user_scram_credentials(upsertions, deletions))

    def describe_client_quotas(self) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
        return self._lt.run(self._impl.describe_client_quotas())

    def alter_client_quotas(self, entity: list[tuple[str, str | None]], changes: dict[str, float | None]) -> None:
        self._lt.run(self._impl.alter_client_quotas(entity, changes))

    def list_groups(self) -> list[tuple[str, str, str]]:
        return self._lt.run(self._impl.list_groups())

    def describe_group(self, group_id: str) -> GroupDescription:
        return self._lt.run(self._impl.describe_group(group_id))

    def list_group_offsets(self, group_id: str) -> dict[tuple[str, int], int]:
        return self._lt.run(self._impl.list_group_offsets(group_id))

    def alter_group_offsets(self, group_id: str, offsets: dict[tuple[str, int], int]) -> None:
        self._lt.run(self._impl.alter_group_offsets(group_id, offsets))

    def delete_groups(self, group_ids: list[str]) -> dict[str, KafkaLiteError | None]:
        return self._lt.run(self._impl.delete_groups(group_ids))

    def describe_share_group(self, group_id: str) -> DescribedShareGroup:
        return self._lt.run(self._impl.describe_share_group(group_id))

    def list_share_group_offsets(self, group_id: str) -> dict[tuple[str, int], int]:
        return self._lt.run(self._impl.list_share_group_offsets(group_id))

    def alter_share_group_offsets(
        self, group_id: str, offsets: dict[tuple[str, int], int]
    ) -> dict[tuple[str, int], KafkaLiteError | None]:
        return self._lt.run(self._impl.alter_share_group_offsets(group_id, offsets))

    def delete_share_group_offsets(self, group_id: str, topics: list[str]) -> dict[str, KafkaLiteError | None]:
        return self._lt.run(self._impl.delete_share_group_offsets(group_id, topics))

    def delete_share_groups(self, group_ids: list[str]) -> dict[str, KafkaLiteError | None]:
        return self._lt.run(self._impl.delete_share_groups(group_ids))

    def list_offsets(self, tps: list[tuple[str, int]], timestamp: int) -> dict[tuple[str, int], int]:
        return self._lt.run(self._impl.list_offsets(tps, timestamp))

    def list_offsets_each(
        self, tps: list[tuple[str, int]], timestamp: int
    ) -> dict[tuple[str, int], int | KafkaLiteError]:
        return self._lt.run(self._impl.list_offsets_each(tps, timestamp))

    def delete_records(
        self, offsets: dict[tuple[str, int], int], timeout_ms: int = 30000
    ) -> dict[tuple[str, int], int | KafkaLiteError]:
        return self._lt.run(self._impl.delete_records(offsets, timeout_ms))


def with_client(bootstrap_servers: str, config: dict[str, Any], name: str, fn: Any, timeout: float) -> Any:
    """Run `fn(client)` on a client of its own, on a loop thread of its own, and close both."""
    from client.cluster import KafkaLiteClient
    from client.config import AdminConfig

    async def run() -> Any:
        client = KafkaLiteClient.from_config(bootstrap_servers, AdminConfig.from_kwargs(config))
        try:
            return await fn(client)
        finally:
            await client.close()

    lt = LoopThread(name)
    try:
        return lt.run(run(), timeout + 10)
    finally:
        lt.stop()


def end_transaction(
    bootstrap_servers: str,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    timeout: float = 60.0,
    **config: Any,
) -> None:
    """Commit or abort, from this process, a transaction another producer left open (client/transactions.py
    end_transaction): the Spark sink's driver commits what its tasks wrote."""
    from client.transactions import end_transaction as end_async

    with_client(
        bootstrap_servers,
        config,
        "kl-end-transaction",
        lambda c: end_async(c, transactional_id, producer_id, producer_epoch, commit, timeout),
        timeout,
    )


def end_transactions(
    bootstrap_servers: str,
    open_txns: Iterable[tuple[str, int, int]],
    commit: bool,
    timeout: float = 60.0,
    **config: Any,
) -> list[Exception | None]:
    """End many transactions others left open ((transactional_id, producer_id, producer_epoch) each), all at once
    on one client: the Spark sink's driver ends a micro-batch's tasks' transactions in about one EndTxn round trip
    instead of a connection and a round trip per task. One outcome per transaction, None where it ended."""
    from client.transactions import end_transaction as end_async

    txns = list(open_txns)

    async def end_all(c: Any) -> list[Exception | None]:
        outcomes = await asyncio.gather(
            *(end_async(c, txn_id, pid, epoch, commit, timeout) for txn_id, pid, epoch in txns), return_exceptions=True
        )
        return [o if isinstance(o, Exception) else None for o in outcomes]

    if not txns:
        return []
    result: list[Exception | None] = with_client(bootstrap_servers, config, "kl-end-transactions", end_all, timeout)
    return result


def transaction_state(
    bootstrap_servers: str, transactional_id: str, timeout: float = 60.0, **config: Any
) -> str | None:
    """The coordinator's state of a transactional.id (client/transactions.py transaction_state)."""
    from client.transactions import transaction_state as state_async

    result: str | None = with_client(
        bootstrap_servers, config, "kl-transaction-state", lambda c: state_async(c, transactional_id, timeout), timeout
    )
    return result
