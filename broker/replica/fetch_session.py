"""Incremental fetch sessions (KIP-227) between a follower's fetcher and its leader: both sides, sans-IO.

Without a session every follower fetch names every partition the fetcher follows from that leader, and every
answer carries a row for each of them, though a replication round moves a few: after a flood of partitions,
each acks=all round of one busy partition cost a pass of encoding, range-checking and decoding over thousands
of idle ones on both sides (docs/BENCHMARKS.md, partition floods). With a session, the leader keeps what the
fetch asks for (its `FetchSpec`s) and what it last answered for each partition; a fetch then carries only the
partitions whose fetch position changed (and the ones to forget), and an answer only the partitions with
records, an error, or a high watermark, log start or log end that moved since the last answer.

Kafka's rules (FetchSession.scala, FetchSessionHandler.java): a request's session epoch is 0 (INITIAL: a full
fetch that opens a session, closing the one it names) or -1 (FINAL: a full fetch with no session) or the
session's next epoch (an incremental fetch); an unknown session is FETCH_SESSION_ID_NOT_FOUND, a wrong epoch
INVALID_FETCH_SESSION_EPOCH, and the follower then starts over with a full fetch. The leader holds at most
`max.incremental.fetch.session.cache.slots` sessions, evicting the least recently used one idle for
`min.incremental.fetch.session.eviction.ms`; with no slot it answers a full fetch with session id 0 and the
follower keeps sending full fetches. Only followers (replica_id >= 0, the broker-only listener) get sessions:
a consumer's fetch is sessionless, as the Kafka listener declines sessions (session id 0).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field

from broker.replica.partition import FetchResult, FetchSpec
from net.errors import ErrorCode, KafkaLiteError
from net.wire_types import INT32_MAX

INITIAL_EPOCH = 0  # a full fetch that opens a session (and closes the one it names)
FINAL_EPOCH = -1  # a full fetch without a session (and closes the one it names)
NO_SESSION = 0
TopicPartition = tuple[str, int]
# A follower's fetch row: (fetch offset, max bytes, current leader epoch, last fetched epoch, log start offset).
Row = tuple[int, int, int, int, int]


def next_epoch(epoch: int) -> int:
    """The epoch after `epoch` (Kafka's FetchMetadata.nextEpoch): wraps to 1, never to 0 or -1."""
    return 1 if epoch >= INT32_MAX else epoch + 1


class FetchSessionError(KafkaLiteError):
    """A fetch naming a session the leader does not hold, or with the wrong epoch: start over with a full fetch."""


# --- the leader's side ----------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Cached:
    spec: FetchSpec
    answered: tuple[int, int, int] | None = None  # (high watermark, log start, log end) last answered; None: never


@dataclass(slots=True)
class FetchSession:
    id: int
    replica_id: int
    epoch: int  # the epoch the next fetch must carry
    last_used: float
    partitions: dict[TopicPartition, _Cached] = field(default_factory=dict)

    def answer(self, results: dict[TopicPartition, FetchResult], full: bool) -> dict[TopicPartition, FetchResult]:
        """The rows of an answer: all of them for a full fetch, otherwise only those the follower does not know
        yet. Partitions that brought records go to the back of the session, so that a fetch's byte budget does
        not serve the same ones first every round (Kafka's session reordering)."""
        out: dict[TopicPartition, FetchResult] = {}
        busy = []
        for tp, r in results.items():
            c = self.partitions.get(tp)
            if c is None:
                continue  # forgotten by a later fetch while this one waited
            state = (r.high_watermark, r.log_start_offset, r.log_end_offset)
            if full or r.records or r.error or r.diverging_epoch >= 0 or c.answered != state:
                out[tp] = r
                # After an error row the next answer repeats the partition's state, whatever it is.
                c.answered = None if r.error else state
                if r.records:
                    busy.append(tp)
        for tp in busy:
            self.partitions[tp] = self.partitions.pop(tp)
        return out


@dataclass(slots=True)
class FetchContext:
    """What one fetch reads (`specs`) and how its answer is cut (`answer`)."""

    specs: list[FetchSpec]
    session: FetchSession | None = None
    full: bool = True

    @property
    def session_id(self) -> int:
        return self.session.id if self.session is not None else NO_SESSION

    def answer(self, results: dict[TopicPartition, FetchResult]) -> dict[TopicPartition, FetchResult]:
        return results if self.session is None else self.session.answer(results, self.full)


class FetchSessionCache:
    """The leader's sessions (Kafka's FetchSessionCache), keyed by a random non-zero int32 id."""

    def __init__(self, max_slots: int = 1000, eviction_ms: int = 120000, rng: random.Random | None = None) -> None:
        self.max_slots = max_slots
        self.eviction_s = eviction_ms / 1000
        self._rng = rng or random.SystemRandom()  # ids a peer cannot guess
        self.sessions: dict[int, FetchSession] = {}

    def new_context(
        self,
        replica_id: int,
        session_id: int,
        epoch: int,
        specs: list[FetchSpec],
        forgotten: Iterable[TopicPartition],
        now: float,
    ) -> FetchContext:
        """The context of a follower's fetch (session id and epoch as the request carries them); raises
        FetchSessionError for a session it does not hold or an epoch out of turn."""
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != NO_SESSION:
                old = self.sessions.get(session_id)
                if old is not None and old.replica_id == replica_id:
                    del self.sessions[session_id]
            if epoch == FINAL_EPOCH:
                return FetchContext(specs)
            session = self._create(replica_id, now)
            if session is None:
                return FetchContext(specs)
            session.partitions = {s.tp: _Cached(s) for s in specs}
            return FetchContext(specs, session, full=True)
        session = self.sessions.get(session_id)
        if session is None or session.replica_id != replica_id:
            raise FetchSessionError(
                f"no fetch session {session_id} for broker {replica_id}", ErrorCode.FETCH_SESSION_ID_NOT_FOUND
            )
        if epoch != session.epoch:
            raise FetchSessionError(
                f"fetch session {session_id} expects epoch {session.epoch}, not {epoch}",
                ErrorCode.INVALID_FETCH_SESSION_EPOCH,
            )
        parts = session.partitions
        for tp in forgotten:
            parts.pop(tp, None)
        for s in specs:
            c = parts.get(s.tp)
            if c is None:
                parts[s.tp] = _Cached(s)
            else:
                c.spec = s  # what was last answered still holds
        session.epoch = next_epoch(epoch)
        session.last_used = now
        return FetchContext([c.spec for c in parts.values()], session, full=False)

    def _create(self, replica_id: int, now: float) -> FetchSession | None:
        if self.max_slots <= 0:
            return None
        if len(self.sessions) >= self.max_slots:
            idle = min(self.sessions.values(), key=lambda s: s.last_used)
            if idle.last_used > now - self.eviction_s:
                return None  # every slot in use lately: this follower fetches without a session
            del self.sessions[idle.id]
        while True:
            sid = self._rng.randint(1, INT32_MAX)
            if sid not in self.sessions:
                break
        session = self.sessions[sid] = FetchSession(sid, replica_id, 1, now)
        return session


# --- the follower's side --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionFetch:
    """One fetch as a session sends it: the rows that go on the wire, the partitions to forget, and every row the
    leader's session holds once the fetch is answered."""

    session_id: int
    epoch: int
    send: dict[TopicPartition, Row]
    forgotten: list[TopicPartition]
    rows: dict[TopicPartition, Row]


class FetchSessionHandler:
    """A fetcher's session with its leader (Kafka's FetchSessionHandler)."""

    def __init__(self) -> None:
        self.session_id = NO_SESSION
        self.epoch = INITIAL_EPOCH
        self._held: dict[TopicPartition, Row] = {}  # the rows the leader's session holds

    def build(self, rows: dict[TopicPartition, Row]) -> SessionFetch:
        if self.epoch == INITIAL_EPOCH:
            return SessionFetch(self.session_id, INITIAL_EPOCH, rows, [], rows)
        held = self._held
        send = {tp: r for tp, r in rows.items() if held.get(tp) != r}
        forgotten = [tp for tp in held if tp not in rows]
        return SessionFetch(self.session_id, self.epoch, send, forgotten, rows)

    def answered(self, fetch: SessionFetch, session_id: int) -> None:
        """`fetch` was answered without a session error; `session_id` is the answer's."""
        if fetch.epoch == INITIAL_EPOCH:
            self.session_id = session_id
            self.epoch = 1 if session_id != NO_SESSION else INITIAL_EPOCH  # no slot at the leader: full again
            self._held = fetch.rows if session_id != NO_SESSION else {}
        elif session_id != self.session_id:
            self.reset()  # not the session we asked for: trust nothing of it
        else:
            self.epoch = next_epoch(self.epoch)
            self._held = fetch.rows

    def reset(self) -> None:
        """The next fetch is a full one, which closes this session at the leader and opens another: after a
        session error, a failed or abandoned fetch (the leader may have applied it), or a leader restart."""
        self.epoch = INITIAL_EPOCH
        self._held = {}
