"""GroupSubscription: what subscribe() adds to an AsyncConsumer.

Runs inside poll(), on the application's turn, as Kafka's consumer does: it starts rebalances in the
background, applies their outcome (revoke, then assign, with the listener's callbacks), positions
newly assigned partitions at their committed offsets, and auto-commits. With an eager protocol
(range, roundrobin) every partition is revoked before rejoining; with cooperative-sticky only the
partitions that move are, and the others keep being fetched while the group rebalances.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol

from client.group import CommitFailedError, ConsumerCoordinator, JoinResult
from client.group_member import ConsumerGroupMember
from client.topic_partition import TopicPartition
from net.errors import ErrorCode, KafkaLiteError

if TYPE_CHECKING:
    from client.cluster import KafkaLiteClient

log = logging.getLogger("kafkalite.consumer")
TP = tuple[str, int]
# Errors a retry cannot fix until an operator acts: raised from poll() (Kafka's GroupAuthorizationException,
# TopicAuthorizationException).
FATAL_TO_POLL = frozenset({ErrorCode.GROUP_AUTHORIZATION_FAILED, ErrorCode.TOPIC_AUTHORIZATION_FAILED})


class ConsumerRebalanceListener:
    """Override what you need; methods may be plain or async. on_partitions_lost defaults to revoked."""

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Any:
        pass

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Any:
        pass

    def on_partitions_lost(self, lost: set[TopicPartition]) -> Any:
        return self.on_partitions_revoked(lost)


class SubscribedConsumer(Protocol):
    """What the subscription reads and moves in the consumer it runs for (its public face, plus the
    assignment changes handed in as `add_partitions` / `remove_partitions`)."""

    client: "KafkaLiteClient"

    def assignment(self) -> set[TopicPartition]: ...

    def tp(self, topic: str, partition: int) -> TopicPartition: ...

    def seek(self, tp: TopicPartition, offset: int) -> None: ...

    def positions(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]: ...


class GroupSubscription:
    def __init__(
        self,
        consumer: SubscribedConsumer,
        add_partitions: Callable[[Iterable[TopicPartition]], None],
        remove_partitions: Callable[[Iterable[TopicPartition]], None],
        coordinator: ConsumerCoordinator,
        topics: list[str] | None,
        pattern: str | None,
        listener: ConsumerRebalanceListener | None,
        enable_auto_commit: bool,
        auto_commit_interval_ms: int,
        metadata_max_age_ms: int,
    ) -> None:
        self.consumer = consumer
        self._add_partitions = add_partitions
        self._remove_partitions = remove_partitions
        self.coordinator = coordinator
        self.explicit = sorted(set(topics or []))
        self.pattern = re.compile(pattern) if pattern is not None else None
        self.listener = listener or ConsumerRebalanceListener()
        self.enable_auto_commit = enable_auto_commit
        self.auto_commit_interval = auto_commit_interval_ms / 1000
        self.metadata_max_age = metadata_max_age_ms / 1000
        self.topics: list[str] = list(self.explicit)
        self._partition_counts: dict[str, int] = {}
        self._join: asyncio.Task[JoinResult] | None = None
        self._next_auto_commit = time.monotonic() + self.auto_commit_interval
        self._metadata_checked = 0.0

    # --- called by poll() --------------------------------------------------------------------------

    async def on_poll(self, deadline: float) -> None:
        c = self.coordinator
        if c.fatal is not None:
            raise c.fatal
        c.last_poll = time.monotonic()
        if c.partitions_lost and self.consumer.assignment():
            await self._lose(set(self.consumer.assignment()))
        await self._check_metadata()
        if self._join is not None and self._join.done():
            join, self._join = self._join, None
            try:
                await self._apply(join.result())
            except KafkaLiteError as e:
                if c.fatal is not None:
                    raise c.fatal from None
                if e.code in FATAL_TO_POLL:
                    c.rejoin_needed = True
                    raise  # Kafka's consumer raises authorization failures from poll(), it does not retry them
                log.warning("group %s: rebalance failed: %s; retrying", c.group_id, e)
                c.rejoin_needed = True
                await asyncio.sleep(self.consumer.client.retry_backoff)
        if c.rejoin_needed and self._join is None:
            if not c.cooperative and self.consumer.assignment():
                await self._revoke(set(self.consumer.assignment()))
            self._join = asyncio.ensure_future(c.join_group(self.topics, frozenset(self.consumer.assignment())))
        if self._join is not None and not self.consumer.assignment():
            # Nothing to fetch meanwhile: wait for the rebalance (within this poll's time).
            remaining = deadline - time.monotonic()
            if remaining > 0:
                await asyncio.wait([self._join], timeout=remaining)
                if self._join.done():
                    await self.on_poll(deadline)
                    return
        await self._maybe_auto_commit()

    async def _apply(self, result: JoinResult) -> None:
        current = set(self.consumer.assignment())
        new = {self.consumer.tp(*tp) for tp in result.assignment}
        revoked, added = current - new, new - current
        if revoked:
            # Only a cooperative member still holds partitions here; they move to someone else.
            await self._revoke(revoked)
            self.coordinator.rejoin_needed = True  # the follow-up rebalance hands them over
        if added:
            await self._take(added)

    async def _take(self, added: set[TopicPartition]) -> None:
        """Newly assigned partitions: fetched from the group's committed offsets, then the listener is told."""
        self._add_partitions(added)
        committed = await self.coordinator.fetch_committed(sorted(added))
        for tp in added:
            off = committed.get(tp, -1)
            if off >= 0:
                self.consumer.seek(tp, off)
        await _call(self.listener.on_partitions_assigned, set(added))

    async def _revoke(self, tps: set[TopicPartition]) -> None:
        if self.enable_auto_commit:
            try:
                await self.commit(self.consumer.positions(tps))
            except KafkaLiteError as e:
                log.warning("group %s: commit before revocation failed: %s", self.coordinator.group_id, e)
        await _call(self.listener.on_partitions_revoked, set(tps))
        self._remove_partitions(tps)

    async def _lose(self, tps: set[TopicPartition]) -> None:
        """Our generation ended without us: no commit (it would be rejected), just let go."""
        await _call(self.listener.on_partitions_lost, set(tps))
        self._remove_partitions(tps)

    async def _maybe_auto_commit(self) -> None:
        if not self.enable_auto_commit or time.monotonic() < self._next_auto_commit:
            return
        self._next_auto_commit = time.monotonic() + self.auto_commit_interval
        if self.coordinator.rejoin_needed or not self.consumer.assignment():
            return
        self.commit_async(self.consumer.positions(self.consumer.assignment()), None)

    async def _check_metadata(self) -> None:
        """Patterns pick up new topics, and partition counts are watched, on each metadata refresh."""
        now = time.monotonic()
        if now - self._metadata_checked < self.metadata_max_age and self._partition_counts:
            return
        self._metadata_checked = now
        client = self.consumer.client
        try:
            if self.pattern is not None:
                topics = await client.list_topics()
                names = sorted(
                    t for t, tm in topics.items() if not tm.is_internal and not tm.error and self.pattern.fullmatch(t)
                )
                await client.refresh_metadata(names)
            else:
                names = self.explicit
                await client.refresh_metadata(names)
        except KafkaLiteError as e:
            log.warning("group %s: metadata refresh failed: %s", self.coordinator.group_id, e)
            return
        counts = {t: client.metadata.partition_count(t) or 0 for t in names}
        if names != self.topics or counts != self._partition_counts:
            if self._partition_counts or names != self.topics:
                log.info("group %s: subscription now %s; rejoining", self.coordinator.group_id, names)
                self.coordinator.rejoin_needed = True
            self.topics, self._partition_counts = names, counts

    # --- commits ----------------------------------------------------------------------------------

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        owned = set(self.consumer.assignment())
        foreign = sorted(tp for tp in offsets if tp not in owned)
        if foreign:
            raise KafkaLiteError(
                f"cannot commit {', '.join(f'{t}-{p}' for t, p in foreign)}: not assigned to this consumer"
            )
        await self.coordinator.commit({tp: (off, "") for tp, off in offsets.items()})

    def commit_async(
        self,
        offsets: dict[TopicPartition, int],
        callback: Callable[[dict[TopicPartition, int], Exception | None], Any] | None,
    ) -> asyncio.Task[None]:
        async def run() -> None:
            err: Exception | None = None
            try:
                await self.commit(offsets)
            except (KafkaLiteError, CommitFailedError) as e:
                err = e
                if callback is None:
                    log.warning("group %s: async commit failed: %s", self.coordinator.group_id, e)
            if callback is not None:
                await _call(callback, offsets, err)

        return asyncio.ensure_future(run())

    async def close(self) -> None:
        if self._join is not None:
            self._join.cancel()
        await self._give_up_all()
        self.coordinator.stop()
        await self.coordinator.leave_group()

    async def _give_up_all(self) -> None:
        """Before leaving: the last commit (with auto-commit), then the listener hears of the revocation."""
        if self.enable_auto_commit and self.consumer.assignment() and not self.coordinator.rejoin_needed:
            try:
                await self.commit(self.consumer.positions(self.consumer.assignment()))
            except KafkaLiteError as e:
                log.warning("group %s: final commit failed: %s", self.coordinator.group_id, e)
        if self.consumer.assignment():
            await _call(self.listener.on_partitions_revoked, set(self.consumer.assignment()))


async def _call(fn: Callable[..., Any], *args: Any) -> None:
    result = fn(*args)
    if inspect.isawaitable(result):
        await result


class ConsumerProtocolSubscription(GroupSubscription):
    """subscribe() with `group_protocol="consumer"` (KIP-848): the coordinator assigns; on the application's turn
    the member gives up what is no longer assigned (committing first, with auto-commit), takes up what is new,
    and heartbeats at once so that the coordinator moves on. A pattern is sent as the subscription's regex and
    matched by the coordinator."""

    coordinator: ConsumerGroupMember  # type: ignore[assignment]

    async def on_poll(self, deadline: float) -> None:
        m = self.coordinator
        await self._check_metadata()
        m.topics, m.regex = list(self.topics), self.pattern.pattern if self.pattern is not None else None
        m.rejoin_needed = False  # no rejoins in this protocol: a failed commit does not stop the auto-commits
        if m.fatal is not None:
            raise m.fatal
        m.start()
        if m.error is not None:
            err, m.error = m.error, None
            raise err
        if m.partitions_lost:
            m.partitions_lost = False
            if self.consumer.assignment():
                await self._lose(set(self.consumer.assignment()))
            m.owned = frozenset()
        if m.assigned is None and not self.consumer.assignment():
            await m.wait_assignment(deadline)  # nothing to fetch before the first assignment: wait for it
        await self._reconcile()
        await self._maybe_auto_commit()

    async def _reconcile(self) -> None:
        m = self.coordinator
        m.assignment_changed.clear()
        if m.assigned is None:
            return
        current = {(tp.topic, tp.partition) for tp in self.consumer.assignment()}
        revoked, added = current - m.assigned, m.assigned - current
        if revoked:
            await self._revoke({self.consumer.tp(*tp) for tp in revoked})
        if added:
            await self._take({self.consumer.tp(*tp) for tp in added})
        if revoked or added:
            m.owned = frozenset(m.assigned)
            m.heartbeat_now()

    async def close(self) -> None:
        self.coordinator.rejoin_needed = False
        await self._give_up_all()
        await self.coordinator.leave()
