"""A member of a consumer-protocol group (KIP-848, `group_protocol="consumer"`), from the client's side.

There is no join and no sync: the member heartbeats (ConsumerGroupHeartbeat) its subscription and the partitions
it owns; the coordinator answers its member epoch and, when it changed, the partitions it should own. The
application's turn (poll(), client/subscription.py ConsumerProtocolSubscription) gives up what is no longer
assigned and takes up what is new, and the next heartbeat, sent at once, tells the coordinator: that is the
member's part of the coordinator's incremental reconciliation (broker/group/consumer_logic.py).

Commits carry the member epoch (OffsetCommit's generation), as Kafka's consumer sends it with OffsetCommit v9.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
import uuid

from client.cluster import KafkaLiteClient
from client.group import COORDINATOR_ERRORS, FATAL_INSTANCE_CODES, GroupClient
from net.errors import ErrorCode, KafkaLiteError, group_error
from net.schema.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse
from net.schema.consumer_group_heartbeat import TopicPartitions as HeartbeatTopicPartitions

log = logging.getLogger("kafkalite.consumer")
TP = tuple[str, int]
# -2: a static member (group.instance.id) leaving for a while: the coordinator keeps its partitions until its
# session times out, so that its restart takes them back without a reassignment (KIP-848).
JOIN_EPOCH, LEAVE_EPOCH, LEAVE_STATIC_EPOCH = 0, -1, -2
# Errors after which the member starts over (epoch 0): what it owned may already be another member's.
FENCED = frozenset({ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID})


class ConsumerGroupMember(GroupClient):
    def __init__(
        self,
        client: KafkaLiteClient,
        group_id: str,
        rebalance_timeout_ms: int,
        remote_assignor: str | None,
        group_instance_id: str | None = None,
    ) -> None:
        super().__init__(client, group_id)
        self.group_instance_id = group_instance_id
        self.member_id = uuid.uuid4().hex  # the client's own id for its whole life (KIP-1082)
        self.generation = JOIN_EPOCH  # the member epoch: OffsetCommit's generation for this protocol
        self.rejoin_needed = False
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.remote_assignor = remote_assignor
        self.topics: list[str] = []
        self.regex: str | None = None
        self.owned: frozenset[TP] = frozenset()  # what the application holds (the subscription sets it)
        self.assigned: frozenset[TP] | None = None  # the coordinator's latest answer, None until the first
        self.assignment_changed = asyncio.Event()
        self.partitions_lost = False
        self.error: KafkaLiteError | None = None  # one a retry cannot fix: raised from poll()
        self.interval = 1.0  # the coordinator's heartbeat interval, from its first answer on
        self.answered = False
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._loop())

    def heartbeat_now(self) -> None:
        """The next heartbeat goes at once (the application took up or gave up partitions)."""
        self._wake.set()

    async def _loop(self) -> None:
        backoff = self.client.backoff()
        while True:
            self._wake.clear()
            wait = self.interval
            try:
                if await self._heartbeat():
                    backoff.reset()
                else:
                    wait = backoff.next()
            except KafkaLiteError as e:
                self._fenced(e)
                # Tried again soon (retry.backoff.ms, growing), on a fresh connection: the session goes on.
                log.warning("group %s: heartbeat failed: %s", self.group_id, e)
                self.heartbeat_failed(e)
                wait = backoff.next()
            if self.fatal is not None:
                return  # poll() raises it
            try:
                await asyncio.wait_for(self._wake.wait(), wait)
            except TimeoutError:
                pass

    def _request(self, epoch: int) -> ConsumerGroupHeartbeatRequest:
        """A full heartbeat (every field): the coordinator takes what changed, and answers the assignment."""
        ids = {name: tm.topic_id for name, tm in self.client.metadata.topics.items() if tm.topic_id}
        by_topic: dict[str, list[int]] = {}
        for t, p in sorted(self.owned):
            by_topic.setdefault(t, []).append(p)
        owned = tuple(
            HeartbeatTopicPartitions(topic_id=uuid.UUID(ids[t]), partitions=tuple(ps))
            for t, ps in by_topic.items()
            if t in ids
        )
        return ConsumerGroupHeartbeatRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=epoch,
            instance_id=self.group_instance_id,
            rebalance_timeout=datetime.timedelta(milliseconds=self.rebalance_timeout_ms),
            subscribed_topic_names=tuple(self.topics) if self.regex is None else None,
            subscribed_topic_regex=self.regex,
            server_assignor=self.remote_assignor,
            topic_partitions=owned if epoch != JOIN_EPOCH else (),
        )

    async def _heartbeat(self) -> bool:
        """One heartbeat; whether the coordinator answered it. Until its first answer (the member's join, which
        may wait on the coordinator's writes) it has request.timeout.ms; then the heartbeat interval (see
        GroupClient.heartbeat_timeout)."""
        bound = self.heartbeat_timeout(self.interval) if self.answered else self.client.request_timeout
        answer: ConsumerGroupHeartbeatResponse = await self.call(
            self._request(self.generation), lambda a: (a.error_code, a.error_message), bound
        )
        code = answer.error_code
        if code in FENCED:
            log.warning("group %s: heartbeat says %s; our partitions are lost", self.group_id, ErrorCode(code).name)
            self.generation, self.assigned, self.partitions_lost = JOIN_EPOCH, None, True
            self.assignment_changed.set()
            self._wake.set()  # rejoin at once
            return True
        if code in COORDINATOR_ERRORS:
            return False  # GroupClient.call found no coordinator before its deadline: tried again soon
        if code in FATAL_INSTANCE_CODES:  # another consumer has our group.instance.id: no more heartbeats
            self._fenced(group_error(code, self.group_id, "read", answer.error_message or ""))
            self.assignment_changed.set()
            return True
        if code:
            self.error = group_error(code, self.group_id, "read", answer.error_message or "")
            self.assignment_changed.set()
            return True
        self.answered = True
        self.generation = answer.member_epoch
        self.interval = max(answer.heartbeat_interval.total_seconds(), 0.05)
        if answer.assignment is not None:
            got = await self._names(answer.assignment.topic_partitions)
            if got != self.assigned:
                log.info("group %s: epoch %d, assigned %s", self.group_id, self.generation, sorted(got))
                self.assigned = got
                self.assignment_changed.set()
        return True

    async def _names(self, rows: tuple) -> frozenset[TP]:  # type: ignore[type-arg]
        """The assignment by topic name; a topic id this client does not know yet refreshes its metadata."""

        def known() -> dict[str, str]:
            return {tm.topic_id: name for name, tm in self.client.metadata.topics.items() if tm.topic_id}

        names = known()
        if any(r.topic_id.hex not in names for r in rows):
            await self.client.refresh_metadata(None)
            names = known()
        return frozenset((names[r.topic_id.hex], p) for r in rows if r.topic_id.hex in names for p in r.partitions)

    async def leave(self) -> None:
        """Member epoch -1: the coordinator hands our partitions to the others at once; a static member's -2
        leaves them with it until its session times out."""
        if self._task is not None:
            self._task.cancel()
        if self.coordinator_id is None or self.fatal is not None:
            return
        if self.generation == JOIN_EPOCH and self.assigned is None:
            return
        try:
            conn = await self.client.coordinator_connection(self.coordinator_id)
            epoch = LEAVE_EPOCH if self.group_instance_id is None else LEAVE_STATIC_EPOCH
            await conn.call(self._request(epoch), 5)
            log.info("group %s: member %s left", self.group_id, self.member_id)
        except KafkaLiteError as e:
            log.info("group %s: leave failed (%s); the session timeout will remove us", self.group_id, e)
        self.generation = JOIN_EPOCH

    async def wait_assignment(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining > 0:
            try:
                await asyncio.wait_for(self.assignment_changed.wait(), remaining)
            except TimeoutError:
                pass
