"""ConsumerCoordinator: a consumer's side of the group protocol (Kafka's AbstractCoordinator and
ConsumerCoordinator): find the coordinator, join and sync (the leader member runs the assignor),
heartbeat in the background, commit and fetch offsets, leave.

The AsyncConsumer owns the assignment and the rebalance callbacks; this class only talks to the
coordinator, so every network step of a rebalance can run while the consumer keeps fetching.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from client.assignors import Assignor
from client.cluster import KafkaLiteClient
from client.transactions import find_coordinator_within
from net.connection import BrokerConnection
from net.consumer_protocol import PROTOCOL_TYPE, Assignment, Subscription
from net.errors import ErrorCode, KafkaLiteError, NetworkError, error_for, group_error
from net.retry import retry_until
from net.schema.heartbeat import HeartbeatRequest
from net.schema.join_group import JoinGroupRequest, JoinGroupRequestProtocol, JoinGroupResponse
from net.schema.leave_group import LeaveGroupRequest, MemberIdentity
from net.schema.offset_commit import OffsetCommitRequest, OffsetCommitRequestPartition, OffsetCommitRequestTopic
from net.schema.offset_fetch import OffsetFetchRequest, OffsetFetchRequestTopic
from net.schema.sync_group import SyncGroupRequest, SyncGroupRequestAssignment

log = logging.getLogger("kafkalite.group")

TP = tuple[str, int]
COORDINATOR_ERRORS = {
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.REQUEST_TIMED_OUT,
}
# The least time a heartbeat is given before its connection is taken for hung (a heartbeat interval below it
# would abort connections that are merely slow).
MIN_HEARTBEAT_TIMEOUT_S = 1.0
LOOKUP_SLACK_S = 0.1
# Another consumer has this member's group.instance.id: the member is done for (GroupClient.fatal).
FATAL_INSTANCE_CODES = frozenset({ErrorCode.FENCED_INSTANCE_ID, ErrorCode.UNRELEASED_INSTANCE_ID})
# A heartbeat's answers that end this member's generation (ConsumerCoordinator._on_heartbeat).
REJOIN_CODES = frozenset({ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID})


class CommitFailedError(KafkaLiteError):
    """The commit cannot succeed: this member's generation ended (Kafka's CommitFailedException)."""

    code = ErrorCode.ILLEGAL_GENERATION


@dataclass(frozen=True)
class JoinResult:
    generation: int
    member_id: str
    protocol: str
    assignment: frozenset[TP]


class GroupClient:
    """Requests to one group's coordinator, rediscovering it through moves: the one mechanism shared by
    consumers and the admin client."""

    def __init__(self, client: KafkaLiteClient, group_id: str) -> None:
        if not isinstance(group_id, str) or not group_id:
            raise ValueError("group.id must be a non-empty string")
        self.client = client
        self.group_id = group_id
        self.coordinator_id: int | None = None
        self.member_id = ""
        self.generation = -1
        self.rejoin_needed = True
        # group.instance.id (KIP-345): a static member, known to the coordinator by this id across restarts
        self.group_instance_id: str | None = None
        # An answer no retry can fix (FENCED_INSTANCE_ID: another consumer took this instance id): raised from
        # every poll() from then on, as Kafka's consumer raises FencedInstanceIdException; close the consumer.
        self.fatal: KafkaLiteError | None = None
        # KIP-447: a read_committed consumer asks for stable offsets only, waiting out a transaction that is
        # about to replace one (UNSTABLE_OFFSET_COMMIT), so it never resumes from an offset about to move.
        self.require_stable = False

    # --- coordinator discovery ---------------------------------------------------------------

    async def ensure_coordinator(self, deadline: float, timeout: float | None = None) -> int:
        """The coordinator's id, looked up until `deadline`; each FindCoordinator waits at most `timeout` (default
        request.timeout.ms), and one that runs out of it closes its connection, so the next asks another broker."""
        if self.coordinator_id is not None:
            return self.coordinator_id
        return await retry_until(
            lambda: self._find_coordinator(timeout), self.client.backoff(), KafkaLiteError, _retriable, deadline
        )

    async def _find_coordinator(self, timeout: float | None = None) -> int:
        if self.coordinator_id is not None:  # another request found it while this one waited to retry
            return self.coordinator_id
        try:
            self.coordinator_id = await find_coordinator_within(self.client, self.group_id, 0, timeout)
        except KafkaLiteError as e:
            if e.code in COORDINATOR_ERRORS:
                raise
            raise group_error(e.code, self.group_id, "describe", str(e)) from None
        return self.coordinator_id

    def heartbeat_timeout(self, interval_s: float) -> float:
        """How long one heartbeat may wait for its answer: the heartbeat interval (at least
        MIN_HEARTBEAT_TIMEOUT_S), never more than request.timeout.ms. A heartbeat stuck in a connection a fault
        hung (a coordinator paused or cut off) would otherwise wait past the session, and the coordinator would
        remove the member; timed out, the connection is closed and the coordinator looked up again, and the next
        heartbeat goes on a fresh connection well within the session, as Kafka's clients do."""
        return min(self.client.request_timeout, max(interval_s, MIN_HEARTBEAT_TIMEOUT_S))

    async def coordinator_conn(self, deadline: float, bound: float) -> BrokerConnection:
        """The coordinator's own connection, found (and connected) within `bound` s: a coordinator that hangs
        new connections (cut off from the network) fails this attempt rather than the caller's whole deadline.
        A lookup sent on a connection that hangs (to a broker paused, say: any broker answers FindCoordinator)
        times out within `bound` too, closing that connection, so the next lookup goes to another broker."""
        lookup_until = time.monotonic() + bound
        try:
            # A moment's slack over the lookup's own timeout, so that the lookup's times out first and closes
            # the connection it hung on; this one only bounds connecting.
            async with asyncio.timeout(bound + LOOKUP_SLACK_S):
                coordinator = await self.ensure_coordinator(min(deadline, lookup_until), bound)
                return await self.client.coordinator_connection(coordinator)
        except TimeoutError:
            raise NetworkError(f"group {self.group_id}: no connection to its coordinator within {bound:.1f}s") from None

    def heartbeat_failed(self, e: KafkaLiteError) -> None:
        """A heartbeat that got no answer in time: the next one looks the coordinator up again (it may have
        moved while this one hung), on a fresh connection."""
        if e.code in COORDINATOR_ERRORS:
            self.coordinator_dead(str(e))

    def coordinator_dead(self, reason: str) -> None:
        if self.coordinator_id is not None:
            log.info(
                "group %s: coordinator %s unavailable (%s); rediscovering", self.group_id, self.coordinator_id, reason
            )
        self.coordinator_id = None

    async def call(
        self,
        request: Any,
        row_error: Callable[[Any], tuple[int, str | None]] | None = None,
        timeout: float | None = None,
        action: str = "use",
    ) -> Any:
        """A typed request (net/schema/) to the coordinator, found again through moves and load-in-progress; the
        answer's group row error (`row_error`) that names a coordinator problem is retried too. `timeout`
        (default request.timeout.ms) bounds the whole call, each attempt's lookup, connection and answer within
        it: a connection that runs out of it is closed. A request that failed as a whole is raised, naming the
        group and what it was for (`action`)."""
        deadline = time.monotonic() + (timeout or self.client.request_timeout)

        async def attempt() -> Any:
            conn = await self.coordinator_conn(deadline, max(deadline - time.monotonic(), 0.001))
            answer = await conn.call(request, max(deadline - time.monotonic(), 0.001))
            code, message = row_error(answer) if row_error is not None else (0, None)
            if code in COORDINATOR_ERRORS:
                raise error_for(code, message or "")
            return answer

        try:
            return await self._at_coordinator(attempt, deadline)
        except KafkaLiteError as e:
            if e.code in COORDINATOR_ERRORS or isinstance(e, CommitFailedError):
                raise
            raise group_error(e.code, self.group_id, action, str(e)) from None

    async def _at_coordinator(self, attempt: Callable[[], Any], deadline: float) -> Any:
        """`attempt()` until it answers or the deadline passes; a coordinator error looks the coordinator up again."""

        def moved(e: KafkaLiteError) -> None:
            if e.code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:  # loading: the same coordinator, soon ready
                self.coordinator_dead(str(e))

        # ensure_coordinator retries its lookup until the deadline itself: a coordinator error it raises comes
        # at the deadline, and is raised from here too.
        return await retry_until(
            attempt, self.client.backoff(), KafkaLiteError, _coordinator_error, deadline, before_retry=moved
        )

    # --- offsets --------------------------------------------------------------------------------

    async def commit(self, offsets: dict[TP, tuple[int, str]], use_generation: bool = True) -> None:
        if not offsets:
            return
        by_topic: dict[str, list[OffsetCommitRequestPartition]] = {}
        for (t, p), (off, meta) in offsets.items():
            by_topic.setdefault(t, []).append(
                OffsetCommitRequestPartition(partition_index=p, committed_offset=off, committed_metadata=meta)
            )
        topics = tuple(OffsetCommitRequestTopic(name=t, partitions=tuple(ps)) for t, ps in by_topic.items())
        deadline = time.monotonic() + self.client.request_timeout

        async def attempt() -> None:
            request = OffsetCommitRequest(  # the generation (a consumer-protocol member's epoch) as it is now
                group_id=self.group_id,
                generation_id_or_member_epoch=self.generation if use_generation else -1,
                member_id=self.member_id if use_generation else "",
                group_instance_id=self.group_instance_id if use_generation else None,
                topics=topics,
            )
            try:
                resp = await self.call(request, timeout=max(deadline - time.monotonic(), 0.001), action="read")
            except KafkaLiteError as e:  # refused as a whole (the generation, the member, a group with members)
                self._fenced(e)
                self._commit_failed(e.code, "commit", str(e))
                raise
            errors = [
                (t.name, p.partition_index, p.error_code) for t in resp.topics for p in t.partitions if p.error_code
            ]
            if errors:
                t, p, code = errors[0]
                what = f"commit of {t}-{p}"
                self._commit_failed(code, what, _code_name(code))
                raise error_for(code, f"{what} failed: {_code_name(code)}")

        # A row's coordinator error: find the coordinator again and commit again, until the deadline. (`request`
        # retries its own coordinator errors until the same deadline, so one it raises ends here too.) A stale
        # member epoch (KIP-848) is retried with the epoch the member's heartbeat has learned meanwhile.
        def moved(e: KafkaLiteError) -> None:
            if e.code != ErrorCode.STALE_MEMBER_EPOCH:
                self.coordinator_dead(e.code.name)

        await retry_until(
            attempt,
            self.client.backoff(),
            KafkaLiteError,
            lambda e: _coordinator_error(e) or e.code == ErrorCode.STALE_MEMBER_EPOCH,
            deadline,
            before_retry=moved,
        )

    def _fenced(self, e: KafkaLiteError) -> None:
        """FENCED_INSTANCE_ID (or, in the consumer protocol, UNRELEASED_INSTANCE_ID): another consumer holds this
        member's group.instance.id. Fatal, as in Kafka: kept, and raised from every poll()."""
        if e.code in FATAL_INSTANCE_CODES and self.fatal is None:
            log.error("group %s: %s", self.group_id, e)
            self.fatal = e

    def _commit_failed(self, code: int, what: str, why: str) -> None:
        """Raises CommitFailedError where the member's generation ended under the commit (Kafka's
        CommitFailedException): it must rejoin, and its partitions may have moved to another member."""
        if code in (ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.REBALANCE_IN_PROGRESS):
            self.rejoin_needed = True
            raise CommitFailedError(
                f"{what} failed: {why}; the group rebalanced, so these partitions may have moved to another member"
            )

    async def fetch_committed(self, tps: list[TP] | None) -> dict[TP, int]:
        """Committed offsets; -1 where none. tps None: everything the group committed."""
        topics = None
        if tps is not None:
            by_topic: dict[str, list[int]] = {}
            for t, p in tps:
                by_topic.setdefault(t, []).append(p)
            topics = tuple(OffsetFetchRequestTopic(name=t, partition_indexes=tuple(ps)) for t, ps in by_topic.items())
        deadline = time.monotonic() + self.client.request_timeout
        request = OffsetFetchRequest(group_id=self.group_id, topics=topics, require_stable=self.require_stable)

        async def attempt() -> dict[TP, int]:
            resp = await self.call(
                request, lambda a: (a.error_code, None), max(deadline - time.monotonic(), 0.001), action="read"
            )
            if resp.error_code:
                raise group_error(resp.error_code, self.group_id, "read")
            for t in resp.topics:
                for p in t.partitions:
                    if p.error_code:
                        msg = f"committed offset of {t.name}-{p.partition_index} refused (error {p.error_code})"
                        raise error_for(p.error_code, msg)
            return {(t.name, p.partition_index): p.committed_offset for t in resp.topics for p in t.partitions}

        return await retry_until(
            attempt,
            self.client.backoff(),
            KafkaLiteError,
            lambda e: e.code == ErrorCode.UNSTABLE_OFFSET_COMMIT,
            deadline,
        )


class ConsumerCoordinator(GroupClient):
    def __init__(
        self,
        client: KafkaLiteClient,
        group_id: str,
        assignors: list[Assignor],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        heartbeat_interval_ms: int,
        group_instance_id: str | None = None,
    ) -> None:
        super().__init__(client, group_id)
        self.group_instance_id = group_instance_id
        self.assignors = {a.name: a for a in assignors}
        self.preference = [a.name for a in assignors]
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.protocol: str | None = None
        # Set when the coordinator says our generation is over: what we own may already be someone else's.
        self.partitions_lost = False
        self._heartbeat: asyncio.Task[None] | None = None
        self.last_poll = time.monotonic()

    @property
    def cooperative(self) -> bool:
        """Whether the protocol in use (or, before the first join, our first choice) is incremental."""
        name = self.protocol or self.preference[0]
        return self.assignors[name].cooperative

    # --- join and sync -----------------------------------------------------------------------

    async def join_group(self, topics: list[str], owned: frozenset[TP]) -> JoinResult:
        """One complete rebalance from this member's side: JoinGroup, then SyncGroup."""
        while True:
            join = JoinGroupRequest(
                group_id=self.group_id,
                session_timeout=datetime.timedelta(milliseconds=self.session_timeout_ms),
                rebalance_timeout=datetime.timedelta(milliseconds=self.rebalance_timeout_ms),
                member_id=self.member_id,
                group_instance_id=self.group_instance_id,
                protocol_type=PROTOCOL_TYPE,
                protocols=tuple(
                    JoinGroupRequestProtocol(name=n, metadata=Subscription(tuple(topics), owned).encode())
                    for n in self.preference
                ),
            )
            # The coordinator parks a join until every member rejoined or the rebalance timeout expires.
            wait = self.rebalance_timeout_ms / 1000 + self.client.request_timeout
            joined = await self._rejoin_on(self.call(join, timeout=wait, action="read"))
            if joined is None:
                continue
            self.member_id = joined.member_id
            self.generation = joined.generation_id
            self.protocol = joined.protocol_name
            assignments = await self._assign(joined) if joined.leader == self.member_id else {}
            sync = SyncGroupRequest(
                group_id=self.group_id,
                generation_id=self.generation,
                member_id=self.member_id,
                group_instance_id=self.group_instance_id,
                assignments=tuple(
                    SyncGroupRequestAssignment(member_id=m, assignment=Assignment(frozenset(tps)).encode())
                    for m, tps in assignments.items()
                ),
            )
            synced = await self._rejoin_on(self.call(sync, timeout=wait, action="read"))
            if synced is None:
                continue
            self.rejoin_needed = False
            self.partitions_lost = False
            self.start_heartbeat()
            got = Assignment.decode(synced.assignment or b"").partitions
            log.info(
                "group %s: joined generation %d as %s (%s), assigned %s",
                self.group_id,
                self.generation,
                self.member_id,
                self.protocol,
                sorted(got),
            )
            return JoinResult(self.generation, self.member_id, self.protocol or "", frozenset(got))

    async def _rejoin_on(self, answer: Awaitable[Any]) -> Any:
        """A JoinGroup's or SyncGroup's answer; None where the member must join again (the group rebalanced, its
        generation ended, or, UNKNOWN_MEMBER_ID, it was removed and joins as a new member)."""
        try:
            return await answer
        except KafkaLiteError as e:
            self._fenced(e)
            if e.code == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id, self.generation = "", -1
                return None
            if e.code in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION):
                return None
            raise

    async def _assign(self, join: JoinGroupResponse) -> dict[str, set[TP]]:
        subscriptions = {m.member_id: Subscription.decode(m.metadata) for m in join.members}
        topics = sorted({t for s in subscriptions.values() for t in s.topics})
        await self.client.refresh_metadata(topics)
        counts = {}
        for t in topics:
            n = self.client.metadata.partition_count(t)
            if n:
                counts[t] = n
        return self.assignors[join.protocol_name or ""].assign(counts, subscriptions)

    # --- heartbeats ----------------------------------------------------------------------------

    def start_heartbeat(self) -> None:
        if self._heartbeat is None or self._heartbeat.done():
            self._heartbeat = asyncio.ensure_future(self._heartbeat_loop())

    async def _heartbeat_loop(self) -> None:
        backoff = self.client.backoff()
        wait = self.heartbeat_interval_ms / 1000
        while True:
            await asyncio.sleep(wait)
            wait = self.heartbeat_interval_ms / 1000
            if self.generation < 0 or self.rejoin_needed:
                continue
            if time.monotonic() - self.last_poll > self.rebalance_timeout_ms / 1000:
                # The application stopped polling: give its partitions to someone who will (Kafka's rule).
                log.warning(
                    "group %s: poll() not called within max.poll.interval.ms=%d; leaving the group",
                    self.group_id,
                    self.rebalance_timeout_ms,
                )
                await self.leave_group()
                self.partitions_lost = True
                continue
            beat = HeartbeatRequest(
                group_id=self.group_id,
                generation_id=self.generation,
                member_id=self.member_id,
                group_instance_id=self.group_instance_id,
            )
            try:
                resp = await self.call(beat, timeout=self.heartbeat_timeout(self.heartbeat_interval_ms / 1000))
            except KafkaLiteError as e:
                self._fenced(e)
                if self.fatal is not None:
                    return  # no more heartbeats: poll() raises the error
                if e.code in REJOIN_CODES:  # the coordinator's answer: the group moved on without this member
                    backoff.reset()
                    self._on_heartbeat(e.code)
                    continue
                # Tried again soon (retry.backoff.ms, growing), not a whole interval later: the session goes on.
                log.warning("group %s: heartbeat failed: %s", self.group_id, e)
                self.heartbeat_failed(e)
                wait = backoff.next()
                continue
            backoff.reset()
            self._on_heartbeat(resp.error_code)

    def _on_heartbeat(self, code: int) -> None:
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            self.rejoin_needed = True
        elif code in (ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID):
            log.warning("group %s: heartbeat says %s; our partitions are lost", self.group_id, ErrorCode(code).name)
            if code == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
            self.generation = -1
            self.rejoin_needed = True
            self.partitions_lost = True

    # --- leaving ------------------------------------------------------------------------------------

    async def leave_group(self) -> None:
        """LeaveGroup, unless the member is static (group.instance.id): as in Kafka, a static member that closes
        (or stops polling) stays in the group until its session times out, so that its restart within
        session.timeout.ms takes its partitions back without a rebalance."""
        if not self.member_id or self.coordinator_id is None or self.group_instance_id is not None:
            self.member_id, self.generation, self.rejoin_needed = "", -1, True
            return
        leave = LeaveGroupRequest(group_id=self.group_id, members=(MemberIdentity(member_id=self.member_id),))
        try:
            await self.client.call(self.coordinator_id, leave, timeout=5, coordinator=True)
            log.info("group %s: member %s left", self.group_id, self.member_id)
        except KafkaLiteError as e:
            log.info("group %s: leave failed (%s); the session timeout will remove us", self.group_id, e)
        self.member_id, self.generation, self.rejoin_needed = "", -1, True

    def stop(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()


def _code_name(code: int) -> str:
    return ErrorCode(code).name if code in ErrorCode._value2member_map_ else f"error {code}"


def _retriable(e: KafkaLiteError) -> bool:
    return e.retriable or e.code in COORDINATOR_ERRORS


def _coordinator_error(e: KafkaLiteError) -> bool:
    return e.code in COORDINATOR_ERRORS


Listener = Callable[[set[TP]], object]
