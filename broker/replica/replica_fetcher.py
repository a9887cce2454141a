"""ReplicaFetcher: followers pull from partition leaders (Kafka's design), one
fetcher task per leader broker covering every partition followed from it.
Divergence after a leader change is resolved with the leader's epoch history
(KIP-101/KIP-320), not by high watermark.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from typing import Any, Awaitable, Callable

from broker.quota.replication_quota import ReplicationQuota
from broker.replica.fetch_session import FetchSessionHandler
from broker.replica.partition import Partition
from net.errors import ErrorCode, KafkaLiteError, error_for
from net.protocol import OffsetSpec
from net.retry import Backoff
from net.schema.fetch import FetchPartition, FetchRequest, FetchResponse, FetchTopic, ForgottenTopic, PartitionData
from net.schema.list_offsets import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsResponse, ListOffsetsTopic

# The most a follower waits for a fetch's answer once earlier ones were slow (Kafka's replica.socket.timeout.ms
# default): a leader that slow is starved, not gone, and its connection is kept.
FETCH_TIMEOUT_MAX_S = 30.0

log = logging.getLogger("kafkalite.fetcher")


class FollowedPartitions:
    """The partitions one fetcher follows from its leader: what the next fetch asks for, and which parts of
    an answer still apply when it comes back. Sans-IO: ReplicaFetcher sends the fetch, the replication
    simulator (tests/sim/replication_sim.py) delivers it in its simulated network, both with these rules."""

    def __init__(self) -> None:
        self.partitions: dict[tuple[str, int], Partition] = {}
        # Partitions the leader answered with an error (one it does not host yet, say), left out of the fetches
        # until this time, as Kafka's fetcher delays them by replica.fetch.backoff.ms: a leader answers a fetch
        # at once when any partition fails, so one such partition turned the long poll into a busy loop over
        # every partition of the lane while a flood was being created (issue 25).
        self.delayed: dict[tuple[str, int], float] = {}

    def add(self, p: Partition) -> None:
        self.partitions[(p.topic, p.partition)] = p
        self.delayed.pop((p.topic, p.partition), None)  # a new leader or epoch: fetch it at once

    def remove(self, p: Partition) -> None:
        self.partitions.pop((p.topic, p.partition), None)
        self.delayed.pop((p.topic, p.partition), None)

    def delay(self, tp: tuple[str, int], until: float) -> None:
        self.delayed[tp] = until

    def next_fetch(
        self, now: float = 0.0
    ) -> tuple[list[tuple[tuple[str, int], int, int, int]], dict[tuple[str, int], tuple[Partition, int]]]:
        """Per followed partition (topic-partition, fetch offset, last fetched epoch, current leader epoch), and
        what was asked for whom (for `answered`). A partition without a FollowerState, or delayed past `now`
        after an error, is skipped."""
        specs = []
        sent: dict[tuple[str, int], tuple[Partition, int]] = {}
        if self.delayed:
            self.delayed = {tp: until for tp, until in self.delayed.items() if until > now}
        delayed = self.delayed
        for tp, p in list(self.partitions.items()):
            fs = p.follower_state
            if fs is None or (delayed and tp in delayed):
                continue
            offset, last_epoch, leader_epoch = fs.next_fetch()
            specs.append((tp, offset, last_epoch, leader_epoch))
            sent[tp] = (p, leader_epoch)
        return specs, sent

    def answered(self, sent: dict[tuple[str, int], tuple[Partition, int]], tp: tuple[str, int]) -> Partition | None:
        """The partition an answer row for `tp` applies to, or None: not asked for, reassigned while the
        fetch was in flight (removed, or followed again as a new Partition), or in another leader epoch now
        (an answer about the old epoch's log must not be appended to a log following the new one)."""
        entry = sent.get(tp)
        if entry is None:
            return None
        p, epoch = entry
        if self.partitions.get(tp) is not p or p.follower_state is None or p.follower_state.leader_epoch != epoch:
            return None
        return p


class ReplicaFetcher:
    def __init__(
        self,
        broker_id: int,
        leader_id: int,
        call: Callable[[int, Any, float], Awaitable[Any]],
        max_wait_ms: int = 500,
        max_partition_bytes: int = 1048576,
        backoff_s: float = 0.1,
        quota: ReplicationQuota | None = None,
        timeout_ms: int = 3000,
    ) -> None:
        self.broker_id = broker_id
        self.leader_id = leader_id
        self._call = call  # async (leader_id, typed request, timeout) -> typed answer (BrokerPeers.call)
        self.max_wait_ms = max_wait_ms
        self.max_partition_bytes = max_partition_bytes
        # replica.socket.timeout.ms: a fetch unanswered this long closes its connection (net/connection.py aborts
        # on a request timeout) and the next goes on a new one, rather than waiting on TCP's retransmissions to a
        # leader that was cut off. Never below the long poll itself.
        self.base_timeout_s = max(timeout_ms, max_wait_ms) / 1000
        # The timeout of the next fetch, adaptive as TCP's retransmission timeout: twice the last round trip
        # (never below replica.socket.timeout.ms), doubled after a fetch timed out, at most FETCH_TIMEOUT_MAX_S.
        # A fixed 3 s closed the connection of every fetch a starved leader answered in 4 s (a busy machine),
        # and each new connection's login failed in turn: replication stopped for good though both were alive.
        self.timeout_s = self.base_timeout_s
        self.backoff_s = backoff_s  # the idle wait when no partition is followed yet
        # After a failed fetch: a constant wait as Kafka's replica.fetch.backoff.ms (net/retry.py at base =
        # maximum), spread ±20% so that the followers of a leader that failed do not all come back at once.
        self._retry = Backoff(backoff_s * 1000, backoff_s * 1000)
        self.followed = FollowedPartitions()
        self.session = FetchSessionHandler()  # with this leader (KIP-227)
        # The follower's replication throttle (broker/quota/replication_quota.py), shared by the broker's fetchers.
        self.quota = quota
        self._task: asyncio.Task[None] | None = None
        self._changed = False  # a partition moved or joined: the fetch under way is cut short
        self._polling = False  # the fetch loop is in _fetch_once, where cutting it short may cancel it
        self._stopped = False

    def add(self, p: Partition) -> None:
        self.followed.add(p)
        # A partition that just moved (or has data) cuts the long poll short: acks=all may be waiting on it. A
        # brand-new empty one (epoch 0) joins at the next fetch, within replica.fetch.wait.max.ms: a topic of
        # thousands of partitions, applied in slices, would otherwise restart the fetch after every slice.
        if p.leader_epoch > 0 or p.log.log_end_offset > 0:
            self._cut_short()
        if self._task is None or self._task.done():
            self._stopped = False
            self._task = asyncio.create_task(self._run())

    def remove(self, p: Partition) -> None:
        self.followed.remove(p)

    def stop(self) -> None:
        self._stopped = True
        if self._task is not None:
            self._task.cancel()

    def _cut_short(self) -> None:
        """A partition was added while the long poll waits on the others' (idle) data: its first fetch must not
        wait out replica.fetch.wait.max.ms, since acks=all waits on it after a leader change. The fetch under way
        is cancelled (its response, if one came, is dropped; its offsets are fetched again)."""
        self._changed = True
        task = self._task
        if self._polling and task is not None and task is not asyncio.current_task():
            self._polling = False  # one cancel per fetch: each is taken back once (uncancel)
            task.cancel()

    async def _run(self) -> None:
        """Fetch after fetch, in this one task: the next fetch goes out in the turn its predecessor's answer was
        handled. (A task per fetch, awaited with the wake-up event through asyncio.wait, put three loop turns
        between a follower's append and its acknowledging fetch, a wait in every acks=all round.)"""
        while self.followed.partitions:
            self._changed = False
            self._polling = True
            try:
                await self._fetch_once()
                self._retry.reset()
            except asyncio.CancelledError:
                if self._stopped or not self._changed:
                    raise  # we were cancelled (stop), not the fetch
                task = asyncio.current_task()
                if task is not None:
                    task.uncancel()  # cut short (_cut_short): the loop goes on
            except KafkaLiteError as e:
                self._polling = False
                log.debug("fetch from leader %d failed: %s", self.leader_id, e)
                await asyncio.sleep(self._retry.next())
            except Exception:
                self._polling = False
                log.exception("replica fetcher for leader %d failed", self.leader_id)
                await asyncio.sleep(self._retry.next())
            finally:
                self._polling = False

    def _unthrottled(
        self, specs: list[tuple[tuple[str, int], int, int, int]], sent: dict[tuple[str, int], tuple[Partition, int]]
    ) -> list[tuple[tuple[str, int], int, int, int]]:
        """While the follower quota is exceeded, its throttled partitions that are not in the ISR are left out of
        the fetch (Kafka's shouldFollowerThrottle); an in-sync one is always fetched, so acks=all never waits on
        a throttle."""
        q = self.quota
        if q is None or not q.exceeded(time.monotonic()):
            return specs
        kept = [s for s in specs if not (q.is_throttled(*s[0]) and self.broker_id not in sent[s[0]][0].isr)]
        for s in specs:
            if s not in kept:
                del sent[s[0]]
        return kept

    async def _fetch_once(self) -> None:
        specs, sent = self.followed.next_fetch(asyncio.get_running_loop().time())
        specs = self._unthrottled(specs, sent)
        if not sent:
            await asyncio.sleep(self.backoff_s)
            return
        # The follower's log start rides along (Kafka's FetchPartition.log_start_offset): the leader's
        # DeleteRecords waits for it (the low watermark).
        rows = {
            tp: (offset, self.max_partition_bytes, leader_epoch, last_epoch, sent[tp][0].log.log_start_offset)
            for tp, offset, last_epoch, leader_epoch in specs
        }
        fetch = self.session.build(rows)  # in a fetch session, only what moved goes on the wire (KIP-227)
        topics: dict[str, list[FetchPartition]] = {}
        for (topic, partition), (offset, max_bytes, leader_epoch, last_epoch, start) in fetch.send.items():
            topics.setdefault(topic, []).append(
                FetchPartition(
                    partition=partition,
                    current_leader_epoch=leader_epoch,
                    fetch_offset=offset,
                    last_fetched_epoch=last_epoch,
                    log_start_offset=start,
                    partition_max_bytes=max_bytes,
                )
            )
        forgotten: dict[str, list[int]] = {}
        for topic, partition in fetch.forgotten:
            forgotten.setdefault(topic, []).append(partition)
        request = FetchRequest(
            replica_id=self.broker_id,
            max_wait=datetime.timedelta(milliseconds=self.max_wait_ms),
            min_bytes=1,
            max_bytes=16 * 1024 * 1024,
            session_id=fetch.session_id,
            session_epoch=fetch.epoch,
            topics=tuple(FetchTopic(topic=t, partitions=tuple(parts)) for t, parts in topics.items()),
            forgotten_topics_data=tuple(ForgottenTopic(topic=t, partitions=tuple(qs)) for t, qs in forgotten.items()),
        )
        sent_at = asyncio.get_running_loop().time()
        try:
            resp: FetchResponse = await self._call(self.leader_id, request, self.timeout_s)
        except BaseException as e:
            self.session.reset()  # failed or abandoned: the leader may have applied it, so start over
            if isinstance(e, KafkaLiteError):  # timed out, or the connection to the leader is not there (yet)
                self.timeout_s = min(self.timeout_s * 2, max(FETCH_TIMEOUT_MAX_S, self.base_timeout_s))
            raise
        took = asyncio.get_running_loop().time() - sent_at
        self.timeout_s = min(max(self.base_timeout_s, 2 * took), max(FETCH_TIMEOUT_MAX_S, self.base_timeout_s))
        code = resp.error_code
        if code:
            self.session.reset()
            if code in (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH):
                log.debug("fetch session with leader %d: %s; fetching in full", self.leader_id, _name(code))
                return  # a leader that restarted or evicted the session: the next fetch, at once, is a full one
            raise error_for(code, _name(code))
        self.session.answered(fetch, resp.session_id)
        answered = asyncio.get_running_loop().time()
        ahead: list[tuple[Partition, PartitionData]] = []
        for t in resp.responses:
            topic = t.topic
            for row in t.partitions:
                partition, err = row.partition_index, row.error_code
                p = self.followed.answered(sent, (topic, partition))
                records = row.records
                if records and self.quota is not None and self.quota.is_throttled(topic, partition):
                    self.quota.record(len(records), time.monotonic())
                if p is None:
                    continue
                if err == ErrorCode.OFFSET_OUT_OF_RANGE and p.log.log_end_offset >= row.log_start_offset:
                    ahead.append((p, row))  # past the leader's log end, it seems: ask it where that is
                    continue
                handle_fetch_row(p, self.leader_id, row)
                if err and err != ErrorCode.OFFSET_OUT_OF_RANGE:
                    self.followed.delay((topic, partition), answered + self.backoff_s)
        if ahead:
            await self._truncate_ahead(ahead, sent)

    async def _truncate_ahead(
        self, ahead: list[tuple[Partition, PartitionData]], sent: dict[tuple[str, int], tuple[Partition, int]]
    ) -> None:
        """Partitions the leader answered OFFSET_OUT_OF_RANGE at or above its log start: as Kafka's
        fetchOffsetAndTruncate, ask the leader for its log end offset (ListOffsets latest with this broker's id as
        replica_id, which a leader answers with its log end, not its high watermark) and truncate to it if this
        log is ahead. A partition the ListOffsets does not answer is fetched again, and asked about again."""
        by_topic: dict[str, list[ListOffsetsPartition]] = {}
        for p, _ in ahead:
            fs = p.follower_state
            by_topic.setdefault(p.topic, []).append(
                ListOffsetsPartition(
                    partition_index=p.partition,
                    current_leader_epoch=fs.leader_epoch if fs is not None else -1,
                    timestamp=int(OffsetSpec.LATEST),
                )
            )
        request = ListOffsetsRequest(
            replica_id=self.broker_id,
            topics=tuple(ListOffsetsTopic(name=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
        )
        answer: ListOffsetsResponse = await self._call(self.leader_id, request, self.timeout_s)
        ends = {(t.name, r.partition_index): r.offset for t in answer.topics for r in t.partitions if r.error_code == 0}
        for p, row in ahead:
            tp = (p.topic, p.partition)
            if self.followed.answered(sent, tp) is p and tp in ends:  # still followed in the epoch it was asked in
                handle_fetch_row(p, self.leader_id, row, ends[tp])


def handle_fetch_row(p: Partition, leader_id: int, row: PartitionData, leader_end_offset: int = -1) -> bool:
    """What a follower does with its leader's answer for one partition (Kafka's
    AbstractFetcherThread.processFetchRequest): truncate when out of range or diverging, otherwise
    append the records and take the leader's high watermark. True if the log changed (fetch again at
    once). Out of range at or above the leader's log start, this log is ahead of the leader's end: the caller asks
    the leader for `leader_end_offset` (ListOffsets, ReplicaFetcher._truncate_ahead) and this truncates to it
    (-1: not known, nothing done). The replication simulator (tests/sim/replication_sim.py) drives this same
    function."""
    fs = p.follower_state
    assert fs is not None
    err = row.error_code
    if err == ErrorCode.OFFSET_OUT_OF_RANGE:
        if p.log.log_end_offset < row.log_start_offset:
            # The leader deleted what we still need (retention while we were away): start at its log start.
            log.warning("%s: behind the leader's log start %d; truncating fully", p, row.log_start_offset)
            p.log.truncate_fully_and_start_at(row.log_start_offset)
            p.truncate_to(row.log_start_offset)
            return True
        if 0 <= leader_end_offset < p.log.log_end_offset:
            log.warning("%s: ahead of the leader's log end %d; truncating", p, leader_end_offset)
            p.truncate_to(leader_end_offset)
            return True
        return False
    if err:
        log.debug("%s: leader %d answered %s", p, leader_id, _name(err))
        return False
    diverging = row.diverging_epoch
    if diverging.epoch >= 0:
        t = fs.on_diverging(diverging.epoch, diverging.end_offset, p.log.end_offset_for_epoch)
        log.info(
            "%s: log diverges from leader %d at epoch %d; truncating to %d", p, leader_id, diverging.epoch, t.offset
        )
        p.truncate_to(t.offset)
        return True
    moved = False
    records = row.records or b""
    if records or row.high_watermark > min(p.high_watermark, fs.high_watermark):
        p.append_as_follower(records, row.high_watermark)
        moved = bool(records)
    # The leader's log start (DeleteRecords, retention): records below it are gone from the partition, so not
    # served here either, should this replica lead (Kafka's follower maybeIncrementLogStartOffset). Never past
    # what this log holds; the next answers carry it again as the log grows.
    start = min(row.log_start_offset, p.log.log_end_offset)
    if start > p.log.log_start_offset:
        p.advance_log_start_offset(start)
    return moved


_CODES = frozenset(int(c) for c in ErrorCode)


def _name(code: int) -> str:
    return ErrorCode(code).name if code in _CODES else str(code)
