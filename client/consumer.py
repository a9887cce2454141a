"""AsyncConsumer: assignment and positions (seek, reset, commit) with manual assignment (assign) or a
consumer group (subscribe; see client/subscription.py and client/group.py); the fetching and record
decoding are client/fetcher.py's Fetcher. Reads only up to the high watermark (the broker enforces it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from functools import partial
from typing import Any, Callable, Iterable, TypeVar

from client.assignors import assignors_for
from client.cluster import KafkaLiteClient
from client.config import ConsumerConfig
from client.fetcher import EARLIEST, LATEST, ConsumerRecord, Fetcher, PartitionFetchState, decode_records
from client.group import ConsumerCoordinator, GroupClient
from client.group_member import ConsumerGroupMember
from client.subscription import ConsumerProtocolSubscription, ConsumerRebalanceListener, GroupSubscription
from client.topic_partition import TopicPartition
from client.transactions import ConsumerGroupMetadata
from net.errors import ErrorCode, KafkaLiteError, OffsetOutOfRangeError
from net.retry import retry_until

log = logging.getLogger("kafkalite.consumer")
Drained = TypeVar("Drained")  # what a poll hands out: decoded records, or raw batches (poll_raw)
__all__ = ["AsyncConsumer", "ConsumerRecord", "TopicPartition", "decode_records", "EARLIEST", "LATEST"]

ASSIGN_METADATA_WAIT_S = 2.0


class AsyncConsumer:
    def __init__(self, bootstrap_servers: str, **config: Any) -> None:
        """Kafka's consumer configs as keyword arguments (auto.offset.reset -> auto_offset_reset): client/config.py
        ConsumerConfig declares them, with their defaults and bounds. One is Kafka Lite's own:
        `pause_gc_while_decoding` pauses Python's cyclic garbage collector while a fetch is decoded, 2-3x faster
        for large fetches; off by default, because the collector belongs to the whole process (turn it on when
        your process can afford the pauses' absence, as our CLIs do)."""
        cfg = ConsumerConfig.from_kwargs(config)
        self.config = cfg
        self.client = KafkaLiteClient.from_config(bootstrap_servers, cfg)
        self.group_id = cfg.group_id
        self.enable_auto_commit = cfg.enable_auto_commit
        self.auto_commit_interval_ms = cfg.auto_commit_interval_ms
        self.metadata_max_age_ms = cfg.metadata_max_age_ms
        self._coordinator: ConsumerCoordinator | ConsumerGroupMember | None = None
        if cfg.group_id is not None and cfg.group_protocol == "consumer":
            # KIP-848: the coordinator assigns; session and heartbeat timing are the broker's group.consumer.*.
            self._coordinator = ConsumerGroupMember(
                self.client, cfg.group_id, cfg.max_poll_interval_ms, cfg.group_remote_assignor, cfg.group_instance_id
            )
        elif cfg.group_id is not None:
            self._coordinator = ConsumerCoordinator(
                self.client,
                cfg.group_id,
                assignors_for(cfg.partition_assignment_strategy),
                cfg.session_timeout_ms,
                cfg.max_poll_interval_ms,
                cfg.heartbeat_interval_ms,
                cfg.group_instance_id,
            )
        self._subscription: GroupSubscription | None = None
        self.auto_offset_reset = cfg.auto_offset_reset
        self.max_poll_records = cfg.max_poll_records
        self._fetcher = Fetcher(self.client, cfg, self._reset)
        if self._coordinator is not None:
            self._coordinator.require_stable = self._fetcher.read_committed
        # The assigned partitions and their positions, shared with the fetcher (Kafka's SubscriptionState).
        self._states = self._fetcher.states

    async def start(self) -> None:
        await self.client.refresh_metadata([])

    # --- group subscription -----------------------------------------------------

    def subscribe(
        self,
        topics: Iterable[str] | None = None,
        pattern: str | None = None,
        listener: ConsumerRebalanceListener | None = None,
    ) -> None:
        """Join the consumer group `group_id` for `topics`, or for every topic whose whole name matches
        the regex `pattern` (topics created later join the subscription at the next metadata refresh)."""
        if self._coordinator is None:
            raise KafkaLiteError("subscribe() needs a group_id; use assign() without one")
        if (topics is None) == (pattern is None):
            raise ValueError("subscribe to either a list of topics or a pattern")
        if self._states and self._subscription is None:
            raise KafkaLiteError("this consumer has manually assigned partitions; it cannot also subscribe")
        if isinstance(topics, str):
            topics = [topics]
        if self._subscription is not None:
            self._subscription.coordinator.rejoin_needed = True
        kind = ConsumerProtocolSubscription if isinstance(self._coordinator, ConsumerGroupMember) else GroupSubscription
        self._subscription = kind(
            self,
            self._add_partitions,
            self._remove_partitions,
            self._coordinator,  # type: ignore[arg-type]  # each kind gets its own: the isinstance above
            list(topics) if topics is not None else None,
            pattern,
            listener,
            self.enable_auto_commit,
            self.auto_commit_interval_ms,
            self.metadata_max_age_ms,
        )

    def subscription(self) -> list[str]:
        return list(self._subscription.topics) if self._subscription is not None else []

    @property
    def member_id(self) -> str:
        return self._coordinator.member_id if self._coordinator is not None else ""

    @property
    def generation(self) -> int:
        return self._coordinator.generation if self._coordinator is not None else -1

    def group_metadata(self) -> ConsumerGroupMetadata:
        """What a transactional producer's send_offsets_to_transaction needs of this consumer (Kafka's
        ConsumerGroupMetadata): the group and, inside it, this member's generation, so that a zombie member's
        transactional commit is refused."""
        if self.group_id is None:
            raise KafkaLiteError("group_metadata() needs a group.id", ErrorCode.INVALID_GROUP_ID)
        return ConsumerGroupMetadata(self.group_id, self.generation, self.member_id)

    def tp(self, topic: str, partition: int) -> TopicPartition:
        return TopicPartition(topic, partition)

    def _add_partitions(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self._states.setdefault(TopicPartition(*tp), PartitionFetchState())

    def _remove_partitions(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self._states.pop(TopicPartition(*tp), None)

    def positions(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The next offset to consume of each partition with a known position: what a commit stores."""
        out = {}
        for tp in tps:
            st = self._states.get(TopicPartition(*tp))
            if st is not None and st.position is not None:
                out[TopicPartition(*tp)] = st.position
        return out

    async def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        """Commit `offsets` (next offsets to consume), by default the positions of every assigned partition.
        Blocks until the coordinator has them replicated; raises CommitFailedError if the group moved on."""
        coordinator = self._need_group()
        offsets = (
            self.positions(self._states) if offsets is None else {TopicPartition(*k): v for k, v in offsets.items()}
        )
        if self._subscription is not None:
            await self._subscription.commit(offsets)
        else:
            await coordinator.commit({tp: (off, "") for tp, off in offsets.items()}, use_generation=False)

    def commit_async(
        self,
        offsets: dict[TopicPartition, int] | None = None,
        callback: Callable[[dict[TopicPartition, int], Exception | None], Any] | None = None,
    ) -> asyncio.Task[None]:
        """Commit in the background; `callback(offsets, error_or_None)` runs when it is done."""
        self._need_group()
        offsets = self.positions(self._states) if offsets is None else dict(offsets)
        if self._subscription is None:

            async def manual() -> None:
                err = None
                try:
                    await self.commit(offsets)
                except KafkaLiteError as e:
                    err = e
                if callback is not None:
                    callback(offsets, err)

            return asyncio.ensure_future(manual())
        return self._subscription.commit_async(offsets, callback)

    async def committed(self, tp: TopicPartition | tuple[str, int]) -> int | None:
        """The group's committed offset for `tp`, or None if it has none."""
        key = (tp[0], tp[1])
        off = (await self._need_group().fetch_committed([key])).get(key, -1)
        return off if off >= 0 else None

    def _need_group(self) -> GroupClient:
        if self._coordinator is None:
            raise KafkaLiteError("committing offsets needs a group_id")
        return self._coordinator

    # --- assignment and positions ---------------------------------------------

    async def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        if self._subscription is not None:
            raise KafkaLiteError("this consumer is subscribed to a group; it cannot also assign partitions")
        tps = [TopicPartition(*tp) for tp in partitions]
        # A broker's metadata can trail the controller's for a moment after a topic is created: retry briefly
        # before calling the topic unknown.
        deadline = time.monotonic() + ASSIGN_METADATA_WAIT_S
        for tp in tps:
            try:
                await retry_until(
                    partial(self.client.leader_for, tp.topic, tp.partition),  # refreshes the metadata
                    self.client.backoff(),
                    KafkaLiteError,
                    lambda e: e.retriable,
                    deadline,
                )
            except KafkaLiteError as e:
                if e.code != ErrorCode.LEADER_NOT_AVAILABLE:
                    raise
                # Assigned anyway without a leader: fetching starts when one appears.
        assigned = {tp: self._states.get(tp) or PartitionFetchState() for tp in tps}
        self._states.clear()  # in place: the fetcher holds the same dict
        self._states.update(assigned)

    def assignment(self) -> set[TopicPartition]:
        return set(self._states)

    def _state(self, tp: TopicPartition | tuple[str, int]) -> PartitionFetchState:
        st = self._states.get(TopicPartition(*tp))
        if st is None:
            raise KafkaLiteError(f"partition {tp[0]}-{tp[1]} is not assigned to this consumer")
        return st

    def seek(self, tp: TopicPartition | tuple[str, int], offset: int) -> None:
        if offset < 0:
            raise ValueError("offset must be >= 0")
        st = self._state(tp)
        st.position = st.fetch_position = offset
        st.clear()

    async def seek_to_beginning(self, *tps: TopicPartition) -> None:
        await self._reset(tps or tuple(self._states), EARLIEST)

    async def seek_to_end(self, *tps: TopicPartition) -> None:
        await self._reset(tps or tuple(self._states), LATEST)

    async def position(self, tp: TopicPartition | tuple[str, int]) -> int:
        st = self._state(tp)
        if st.position is None:
            await self._reset_by_policy([TopicPartition(*tp)])
        return st.position  # type: ignore[return-value]

    async def list_offsets(self, tps: Iterable[TopicPartition], timestamp: int) -> dict[TopicPartition, int]:
        """Kafka's ListOffsets: EARLIEST (-2), LATEST (-1) or the first offset at/after a timestamp (-1 if none)."""
        isolation = 1 if self._fetcher.read_committed else 0  # read_committed: LATEST is the last stable offset
        found = await self.client.list_offsets([TopicPartition(*tp) for tp in tps], timestamp, isolation)
        return {TopicPartition(*tp): off for tp, off in found.items()}

    async def list_topics(self) -> dict[str, list[int]]:
        """Every topic the cluster has (internal ones too) and its partitions, in one Metadata request
        (confluent-kafka's list_topics, kafka-python's topics())."""
        return {name: sorted(tm.partitions) for name, tm in (await self.client.list_topics()).items() if not tm.error}

    async def _reset(self, tps: Iterable[TopicPartition], which: int) -> None:
        tps = [TopicPartition(*tp) for tp in tps]
        offsets = await self.list_offsets(tps, which)
        for tp, off in offsets.items():
            self.seek(tp, off)

    async def _reset_by_policy(self, tps: list[TopicPartition]) -> None:
        if self.auto_offset_reset == "none":
            raise OffsetOutOfRangeError(f"no position for {tps} and auto.offset.reset=none")
        await self._reset(tps, EARLIEST if self.auto_offset_reset == "earliest" else LATEST)

    # --- fetching --------------------------------------------------------------

    async def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records from assigned partitions, in offset order per partition; [] on timeout."""
        max_records = max_records or self.max_poll_records
        return await self._poll(timeout_ms, lambda: self._fetcher.drain(max_records))

    async def poll_raw(self, timeout_ms: int = 1000) -> list[tuple[TopicPartition, bytes, int]]:
        """Like poll(), but the fetched record batches undecoded: (partition, batches, position), for readers that
        decode whole batches themselves (the Spark source builds Arrow columns from them). The first batch may
        begin before the position; [] on timeout."""
        return await self._poll(timeout_ms, self._fetcher.drain_raw)

    async def _poll(self, timeout_ms: int, drain: Callable[[], list[Drained]]) -> list[Drained]:
        deadline = time.monotonic() + timeout_ms / 1000
        f = self._fetcher
        if f.errors:
            raise f.errors.pop(0)
        if self._subscription is not None:
            await self._subscription.on_poll(deadline)
        need = [tp for tp, st in self._states.items() if st.position is None]
        if need:
            await self._reset_by_policy(need)
        while True:
            out = drain()
            f.send_fetches()
            if out:
                return out
            if f.errors:
                raise f.errors.pop(0)
            remaining = deadline - time.monotonic()
            if remaining <= 0 or f.closed:
                return []
            f.data_ready.clear()
            try:
                await asyncio.wait_for(f.data_ready.wait(), remaining)
            except TimeoutError:
                pass

    def high_watermark(self, tp: TopicPartition) -> int:
        return self._state(tp).high_watermark

    async def close(self) -> None:
        if self._subscription is not None:
            try:
                await self._subscription.close()
            except KafkaLiteError as e:
                log.warning("leaving group %s failed: %s", self.group_id, e)
        self._fetcher.close()
        await self.client.close()
