"""AsyncShareConsumer: Kafka Lite's own share consumer (KIP-932), the counterpart of Kafka's KafkaShareConsumer.

A member of a share group: it heartbeats to the group's coordinator (ShareGroupHeartbeat: member epoch, the
partitions assigned, which every member of the group shares), keeps one share session per partition leader and
fetches with ShareFetch, each answer's records being the ones acquired for this member (AcquiredRecords) for
the group's lock duration. Acknowledgements (ACCEPT, RELEASE, REJECT) go out with the next ShareFetch to that
leader, or with commit() (ShareAcknowledge). With `acknowledgement_mode="implicit"` (Kafka's default) every
record a poll returned is accepted by the next poll or commit; "explicit" leaves it to acknowledge(). close()
acknowledges what is pending, ends the share sessions (what the member still holds is released) and leaves.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
import uuid
from collections import defaultdict
from typing import Any, Callable, Iterable, TypeVar

from client.cluster import KafkaLiteClient
from client.config import ConsumerConfig
from client.fetcher import ConsumerRecord, decode_records
from client.transactions import KEY_TYPE_GROUP, find_coordinator
from net.errors import ErrorCode, KafkaLiteError, error_for
from net.schema.share_acknowledge import AcknowledgementBatch as AckBatch
from net.schema.share_acknowledge import AcknowledgePartition, AcknowledgeTopic, ShareAcknowledgeRequest
from net.schema.share_fetch import AcknowledgementBatch, FetchPartition, FetchTopic, ForgottenTopic, ShareFetchRequest
from net.schema.share_group_heartbeat import ShareGroupHeartbeatRequest

log = logging.getLogger("kafkalite.share_consumer")
T = TypeVar("T")

ACCEPT, RELEASE, REJECT = 1, 2, 3  # Kafka's AcknowledgeType
FETCH_WAIT_MS = 500
FINAL_EPOCH = -1
SESSION_ERRORS = (ErrorCode.SHARE_SESSION_NOT_FOUND, ErrorCode.INVALID_SHARE_SESSION_EPOCH)
REJOIN_ERRORS = (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_MEMBER_EPOCH)


class AsyncShareConsumer:
    def __init__(
        self,
        bootstrap_servers: str,
        group_id: str,
        acknowledgement_mode: str = "implicit",
        max_poll_records: int = 500,
        **config: Any,
    ) -> None:
        if acknowledgement_mode not in ("implicit", "explicit"):
            raise ValueError("acknowledgement_mode must be 'implicit' or 'explicit'")
        cfg = ConsumerConfig.from_kwargs({**config, "group_id": group_id})
        self.client = KafkaLiteClient.from_config(bootstrap_servers, cfg)
        self.group_id = group_id
        self.implicit = acknowledgement_mode == "implicit"
        self.max_poll_records = max_poll_records
        self.member_id = uuid.uuid4().hex  # chosen by the member (KIP-1082)
        self.member_epoch = 0
        self.topics: tuple[str, ...] = ()
        self.assignment: set[tuple[str, int]] = set()
        self._coordinator: int | None = None
        self._heartbeat_interval_s = 5.0
        self._heartbeats: asyncio.Task[None] | None = None
        # per leader: the next session epoch and the partitions in its session
        self._sessions: dict[int, tuple[int, set[tuple[str, int]]]] = {}
        self._pending: dict[tuple[str, int], dict[int, int]] = defaultdict(dict)  # offset -> acknowledge type
        self._delivered: list[ConsumerRecord] = []  # the last poll's records (implicit mode)
        # Acquired records beyond max_poll_records of the last fetch round (several leaders answer at once): the
        # next polls hand them out before fetching again. Dropping them would leave them locked, unacknowledged,
        # until their acquisition locks ran out (group.share.record.lock.duration.ms), then deliver them again.
        self._buffered: list[ConsumerRecord] = []
        self._fetches: dict[int, asyncio.Future[list[ConsumerRecord]]] = {}  # per leader: the ShareFetch under way
        self._in_flight: set[tuple[str, int, int]] = set()

    async def start(self) -> None:
        await self.client.refresh_metadata([])

    # --- membership -------------------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str]) -> None:
        self.topics = tuple(sorted(set(topics)))
        self.member_epoch = 0  # the next heartbeat (re)joins with the new subscription
        if self._heartbeats is None:
            self._heartbeats = asyncio.ensure_future(self._heartbeat_loop())

    async def _heartbeat_loop(self) -> None:
        while True:
            try:
                await self._heartbeat()
                wait = self._heartbeat_interval_s
            except (TimeoutError, KafkaLiteError, OSError) as e:
                log.debug("share group %s heartbeat failed: %s", self.group_id, e)
                self._coordinator = None
                wait = self.client.retry_backoff
            await asyncio.sleep(wait)

    async def _heartbeat(self, leaving: bool = False) -> None:
        if self._coordinator is None:
            self._coordinator = await find_coordinator(self.client, self.group_id, KEY_TYPE_GROUP)
        epoch = FINAL_EPOCH if leaving else self.member_epoch
        request = ShareGroupHeartbeatRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=epoch,
            subscribed_topic_names=self.topics if epoch == 0 else None,
        )
        conn = await self.client.coordinator_connection(self._coordinator)
        answer = await conn.call(request, self.client.request_timeout)
        if answer.error_code in REJOIN_ERRORS:
            self.member_epoch = 0  # the coordinator moved or dropped us: join again, keeping our member id
            raise error_for(answer.error_code, answer.error_message or "")
        if answer.error_code:
            raise error_for(answer.error_code, answer.error_message or "")
        if leaving:
            return
        self.member_epoch = answer.member_epoch
        self._heartbeat_interval_s = max(0.1, answer.heartbeat_interval.total_seconds())
        if answer.assignment is not None:
            await self.client.refresh_metadata(self.topics)
            names = {tm.topic_id: name for name, tm in self.client.metadata.topics.items()}
            self.assignment = {
                (names[t.topic_id.hex], p)
                for t in answer.assignment.topic_partitions
                if t.topic_id is not None and t.topic_id.hex in names
                for p in t.partitions
            }

    # --- fetching ---------------------------------------------------------------------------------

    async def poll(self, timeout_ms: int = 1000) -> list[ConsumerRecord]:
        """Records acquired for this member, at most max_poll_records; [] if none came within `timeout_ms`."""
        if self.implicit:
            for r in self._delivered:
                self.acknowledge(r, ACCEPT)
        self._delivered = []
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            if self._buffered:
                records = self._buffered
            else:
                records = await self._fetch_round(max(0, min(FETCH_WAIT_MS, int((deadline - time.monotonic()) * 1000))))
            if records or time.monotonic() >= deadline:
                records, self._buffered = records[: self.max_poll_records], records[self.max_poll_records :]
                self._delivered = records
                self._in_flight.update((r.topic, r.partition, r.offset) for r in records)
                return records
            if not self.assignment:
                await asyncio.sleep(min(0.1, max(0.0, deadline - time.monotonic())))

    def acknowledge(self, record: ConsumerRecord, kind: int = ACCEPT) -> None:
        """ACCEPT (1), RELEASE (2) or REJECT (3) a record this consumer polled; sent with the next fetch or
        commit."""
        key = (record.topic, record.partition, record.offset)
        if key not in self._in_flight:
            raise KafkaLiteError(f"record {key} is not in flight for this consumer")
        if kind not in (ACCEPT, RELEASE, REJECT):
            raise ValueError("acknowledge type must be ACCEPT (1), RELEASE (2) or REJECT (3)")
        self._in_flight.discard(key)
        self._pending[(record.topic, record.partition)][record.offset] = kind

    async def _leaders(self, tps: Iterable[tuple[str, int]]) -> dict[int, list[tuple[str, int]]]:
        by_leader: dict[int, list[tuple[str, int]]] = defaultdict(list)
        for topic, p in tps:
            try:
                by_leader[await self.client.leader_for(topic, p)].append((topic, p))
            except KafkaLiteError as e:
                log.debug("no leader for %s-%d yet: %s", topic, p, e)
        return by_leader

    async def _fetch_round(self, wait_ms: int) -> list[ConsumerRecord]:
        """A ShareFetch to every leader that has none under way, then the records of those that answered first.
        The others stay under way for the next poll: a leader with nothing to hand out holds its fetch for up to
        `wait_ms`, and waiting for it would hold up the records the other leaders have (one fetch per leader at a
        time, as Kafka's share consumer, so a session's epochs stay in order)."""
        wanted = set(self.assignment) | {tp for tp, acks in self._pending.items() if acks}
        by_leader = await self._leaders(wanted)
        for leader in list(self._sessions):  # a leader none of our partitions is on any more: forget it
            if leader not in by_leader:
                await self._settle(leader)
                await self._close_session(leader)
        for leader, tps in by_leader.items():
            if leader not in self._fetches:
                self._fetches[leader] = asyncio.ensure_future(self._fetch_from(leader, tps, wait_ms))
        if not self._fetches:
            return []
        await asyncio.wait(
            self._fetches.values(),
            timeout=wait_ms / 1000 + self.client.request_timeout,
            return_when=asyncio.FIRST_COMPLETED,
        )
        out: list[ConsumerRecord] = []
        for leader in [leader for leader, task in self._fetches.items() if task.done()]:
            out += await self._settle(leader)
        return out

    async def _settle(self, leader: int) -> list[ConsumerRecord]:
        """The records of the fetch under way to `leader`, once it has answered ([] if it failed or none)."""
        task = self._fetches.pop(leader, None)
        if task is None:
            return []
        try:
            return await task
        except Exception as e:  # as any failed fetch: logged, metadata refreshed, tried again next poll
            log.debug("share fetch from broker %d failed: %s", leader, e)
            await self.client.refresh_metadata(self.topics)
            return []

    def _topic_id(self, topic: str) -> uuid.UUID:
        tm = self.client.metadata.topics.get(topic)
        if tm is None or not tm.topic_id:
            raise error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic id for {topic}")
        return uuid.UUID(tm.topic_id)

    def _take_acks(
        self, tps: Iterable[tuple[str, int]], batch: Callable[..., T]
    ) -> dict[tuple[str, int], tuple[T, ...]]:
        """The pending acknowledgements of `tps`, taken, as ShareFetch's or ShareAcknowledge's batches."""
        acks = {}
        for tp in tps:
            pending = self._pending.pop(tp, None)
            if pending:
                acks[tp] = tuple(
                    batch(first_offset=first, last_offset=last, acknowledge_types=(kind,))
                    for first, last, kind in _ack_runs(pending)
                )
        return acks

    async def _fetch_from(self, leader: int, tps: list[tuple[str, int]], wait_ms: int) -> list[ConsumerRecord]:
        epoch, in_session = self._sessions.get(leader, (0, set()))
        fetching = {tp for tp in tps if tp in self.assignment}
        acks = self._take_acks(tps, AcknowledgementBatch) if epoch > 0 else {}
        added = fetching - in_session if epoch > 0 else fetching
        named = sorted(added | set(acks))
        by_topic: dict[str, list[FetchPartition]] = defaultdict(list)
        for topic, p in named:
            by_topic[topic].append(FetchPartition(partition_index=p, acknowledgement_batches=acks.get((topic, p), ())))
        forgotten: dict[str, list[int]] = defaultdict(list)
        for topic, p in in_session - fetching if epoch > 0 else ():
            forgotten[topic].append(p)
        request = ShareFetchRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            share_session_epoch=epoch,
            max_wait=datetime.timedelta(milliseconds=wait_ms),
            min_bytes=1,
            max_records=self.max_poll_records,
            batch_size=self.max_poll_records,
            topics=tuple(FetchTopic(topic_id=self._topic_id(t), partitions=tuple(ps)) for t, ps in by_topic.items()),
            forgotten_topics_data=tuple(
                ForgottenTopic(topic_id=self._topic_id(t), partitions=tuple(ps)) for t, ps in forgotten.items()
            ),
        )
        conn = await self.client.connection(leader)
        answer = await conn.call(request, wait_ms / 1000 + self.client.request_timeout)
        if answer.error_code in SESSION_ERRORS:
            self._sessions.pop(leader, None)  # open a new one next time; these acknowledgements are lost
            return []
        if answer.error_code:
            raise error_for(answer.error_code, answer.error_message or "")
        self._sessions[leader] = (epoch + 1, fetching)
        names = {tm.topic_id: name for name, tm in self.client.metadata.topics.items()}
        out: list[ConsumerRecord] = []
        for t in answer.responses:
            fetched = names.get(t.topic_id.hex if t.topic_id else "")
            if fetched is None:
                continue
            for p in t.partitions:
                if p.error_code:
                    log.debug("share fetch of %s-%d: %s", fetched, p.partition_index, ErrorCode(p.error_code).name)
                    continue
                acquired = {o for a in p.acquired_records for o in range(a.first_offset, a.last_offset + 1)}
                if not acquired:
                    continue
                records, _ = decode_records(fetched, p.partition_index, p.records, min(acquired))
                out += [r for r in records if r.offset in acquired]
        return out

    # --- acknowledging ------------------------------------------------------------------------------

    async def commit(self) -> None:
        """Send the pending acknowledgements now (ShareAcknowledge to each leader) and wait for them."""
        if self.implicit:
            for r in self._delivered:
                self.acknowledge(r, ACCEPT)
            self._delivered = []
        by_leader = await self._leaders([tp for tp, acks in self._pending.items() if acks])
        for leader, tps in by_leader.items():
            self._buffered += await self._settle(leader)  # its session's next epoch is the fetch's answer's
            await self._acknowledge(leader, tps, final=False)

    async def _acknowledge(self, leader: int, tps: list[tuple[str, int]], final: bool) -> None:
        epoch, in_session = self._sessions.get(leader, (0, set()))
        if epoch == 0:
            return  # no session there: nothing acquired there either
        acks = self._take_acks(tps, AckBatch)
        by_topic: dict[str, list[AcknowledgePartition]] = defaultdict(list)
        for (topic, p), batches in acks.items():
            by_topic[topic].append(AcknowledgePartition(partition_index=p, acknowledgement_batches=batches))
        request = ShareAcknowledgeRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            share_session_epoch=FINAL_EPOCH if final else epoch,
            topics=tuple(
                AcknowledgeTopic(topic_id=self._topic_id(t), partitions=tuple(ps)) for t, ps in by_topic.items()
            ),
        )
        conn = await self.client.connection(leader)
        answer = await conn.call(request, self.client.request_timeout)
        if final:
            self._sessions.pop(leader, None)
        else:
            self._sessions[leader] = (epoch + 1, in_session)
        if answer.error_code:
            raise error_for(answer.error_code, answer.error_message or "")
        for t in answer.responses:
            for p in t.partitions:
                if p.error_code:
                    raise error_for(p.error_code, p.error_message or "acknowledgement failed")

    async def _close_session(self, leader: int) -> None:
        tps = [tp for tp in self._pending if tp in self._sessions.get(leader, (0, set()))[1]]
        try:
            await self._acknowledge(leader, tps, final=True)
        except (KafkaLiteError, OSError) as e:
            log.debug("closing the share session with broker %d: %s", leader, e)
        self._sessions.pop(leader, None)

    async def close(self) -> None:
        """Acknowledge what is pending, end every share session (the rest is released) and leave the group."""
        try:
            if self.implicit:
                for r in self._delivered:
                    self.acknowledge(r, ACCEPT)
                self._delivered = []
            for leader in list(self._fetches):  # what they acquired is released with the session's end
                await self._settle(leader)
            for leader in list(self._sessions):
                await self._close_session(leader)
            if self._heartbeats is not None:
                self._heartbeats.cancel()
                try:
                    await self._heartbeat(leaving=True)
                except (KafkaLiteError, OSError) as e:
                    log.debug("leaving share group %s: %s", self.group_id, e)
        finally:
            await self.client.close()


def _ack_runs(pending: dict[int, int]) -> list[tuple[int, int, int]]:
    """(first offset, last offset, type) per run of consecutive offsets acknowledged alike: one batch each, as
    Kafka's consumer sends them, rather than one per record (a poll's 500 accepted records are one batch)."""
    runs: list[list[int]] = []
    for o, kind in sorted(pending.items()):
        if runs and runs[-1][1] == o - 1 and runs[-1][2] == kind:
            runs[-1][1] = o
        else:
            runs.append([o, o, kind])
    return [(a, b, k) for a, b, k in runs]
