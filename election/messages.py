"""Messages between quorum voters, and the outputs a QuorumNode asks its driver to execute.

Messages travel as plain lists (`to_wire()` / `from_wire()`) so that net/ can msgpack them without
knowing these classes: `[tag, field, field, ...]`, fields in declaration order, tuples as lists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from election.log import Entry
from net.wire_types import (
    BROKER_ID,
    COUNT,
    DURATION_MS,
    EPOCH,
    EPOCH_OR_NONE,
    INCARNATION,
    OFFSET,
    OFFSET_OR_NONE,
    IntType,
)


def _fields(w: list[Any], types: tuple[tuple[str, IntType, bool], ...]) -> list[int | None]:
    """w[1:] checked against each field's declared wire type (name, type, nullable): a number out of its
    type's range is refused here, before a QuorumNode sees it (net/wire_types.py)."""
    out: list[int | None] = []
    for i, (name, t, nullable) in enumerate(types, start=1):
        v = w[i]
        out.append(None if v is None and nullable else t.check(v, name))
    return out


@dataclass(frozen=True, slots=True)
class ElectionState:
    """Step 1: "this is my state" (KRaft's RequestVote, minus the vote request)."""

    TAG: ClassVar[str] = "es"
    WIRE: ClassVar = (
        ("epoch", EPOCH, False),
        ("sender", BROKER_ID, False),
        ("last_log_epoch", EPOCH, False),
        ("log_end_offset", OFFSET, False),
        ("leaderships", COUNT, False),
    )
    epoch: int
    sender: int
    last_log_epoch: int
    log_end_offset: int
    leaderships: int  # partitions the sender leads now; fewer wins a tie

    def to_wire(self) -> list[Any]:
        return [self.TAG, self.epoch, self.sender, self.last_log_epoch, self.log_end_offset, self.leaderships]

    @classmethod
    def from_wire(cls, w: list[Any]) -> ElectionState:
        return cls(*_fields(w, cls.WIRE))  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Evaluation:
    """Step 2: the sender's vote for `choice`, the most up-to-date state it collected."""

    TAG: ClassVar[str] = "ev"
    WIRE: ClassVar = (("epoch", EPOCH, False), ("sender", BROKER_ID, False), ("choice", BROKER_ID, False))
    epoch: int
    sender: int
    choice: int

    def to_wire(self) -> list[Any]:
        return [self.TAG, self.epoch, self.sender, self.choice]

    @classmethod
    def from_wire(cls, w: list[Any]) -> Evaluation:
        return cls(*_fields(w, cls.WIRE))  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class BeginEpoch:
    """Step 3: `leader` is the controller of `epoch` (may be relayed by a follower that knows it)."""

    TAG: ClassVar[str] = "be"
    WIRE: ClassVar = (("epoch", EPOCH, False), ("leader", BROKER_ID, False))
    epoch: int
    leader: int

    def to_wire(self) -> list[Any]:
        return [self.TAG, self.epoch, self.leader]

    @classmethod
    def from_wire(cls, w: list[Any]) -> BeginEpoch:
        return cls(*_fields(w, cls.WIRE))  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """A follower pulls the metadata log; doubles as its heartbeat to the controller."""

    TAG: ClassVar[str] = "fq"
    WIRE: ClassVar = (
        ("epoch", EPOCH, False),
        ("sender", BROKER_ID, False),
        ("fetch_offset", OFFSET, False),
        ("last_fetched_epoch", EPOCH_OR_NONE, False),
    )
    epoch: int
    sender: int
    fetch_offset: int  # the follower's log end offset
    last_fetched_epoch: int  # the epoch of the follower's record at fetch_offset - 1
    # The sending broker process (grows with every restart; 0: not sent). Not used by the quorum: the
    # broker's controller refuses AlterPartition requests from a process older than the newest one seen
    # fetching (broker/controller/logic.py check_broker_incarnation). Optional on the wire, both ways.
    incarnation: int = 0
    # How long the controller may hold this fetch when it finds nothing new for the follower (Kafka's Fetch
    # MaxWaitMs; KRaft's followers long-poll the same way): answered at once when a record is appended or the
    # high watermark moves, else after this wait, which the controller bounds by its own fetch_max_wait_ms.
    # 0 (a follower looking for its controller, or a node before long polls): answered at once. Optional on
    # the wire, both ways.
    max_wait_ms: int = 0

    def to_wire(self) -> list[Any]:
        return [
            self.TAG,
            self.epoch,
            self.sender,
            self.fetch_offset,
            self.last_fetched_epoch,
            self.incarnation,
            self.max_wait_ms,
        ]

    @classmethod
    def from_wire(cls, w: list[Any]) -> FetchRequest:
        epoch, sender, fetch_offset, last_fetched_epoch = _fields(w, cls.WIRE)
        incarnation = INCARNATION.check(w[5], "incarnation") if len(w) > 5 else 0
        max_wait_ms = DURATION_MS.check(w[6], "max_wait_ms") if len(w) > 6 else 0
        # arg-type: _fields() types every field int | None; WIRE lets none of these four be None.
        return cls(epoch, sender, fetch_offset, last_fetched_epoch, incarnation, max_wait_ms)  # type: ignore[arg-type]


# FetchResponse.error values
FENCED_EPOCH = "FENCED_EPOCH"  # the request's epoch is older than the responder's
NOT_CONTROLLER = "NOT_CONTROLLER"  # the responder is not the controller of that epoch


@dataclass(frozen=True, slots=True)
class FetchResponse:
    TAG: ClassVar[str] = "fr"
    epoch: int
    leader: int | None  # the controller of `epoch` as the responder knows it
    sender: int  # the responder
    records: tuple[Entry, ...]
    high_watermark: int
    diverging_epoch: int | None
    diverging_end_offset: int | None
    error: str | None
    # Echo of the request. The network may duplicate and reorder, so a follower must be able to tell
    # which of its log states a response answers; it applies a response only to that same state.
    fetch_offset: int = -1
    last_fetched_epoch: int = -1

    def to_wire(self) -> list[Any]:
        return [
            self.TAG,
            self.epoch,
            self.leader,
            self.sender,
            [[o, e, r] for o, e, r in self.records],
            self.high_watermark,
            self.diverging_epoch,
            self.diverging_end_offset,
            self.error,
            self.fetch_offset,
            self.last_fetched_epoch,
        ]

    WIRE: ClassVar = (
        ("epoch", EPOCH, False),
        ("leader", BROKER_ID, True),
        ("sender", BROKER_ID, False),
    )
    WIRE_TAIL: ClassVar = (
        ("high_watermark", OFFSET, False),
        ("diverging_epoch", EPOCH_OR_NONE, True),
        ("diverging_end_offset", OFFSET_OR_NONE, True),
    )

    @classmethod
    def from_wire(cls, w: list[Any]) -> FetchResponse:
        epoch, leader, sender = _fields(w, cls.WIRE)
        records = tuple((OFFSET.check(o, "record offset"), EPOCH.check(e, "record epoch"), r) for o, e, r in w[4])
        hw, div_epoch, div_end = _fields([None, *w[5:8]], cls.WIRE_TAIL)
        if w[8] is not None and not isinstance(w[8], str):
            raise ValueError("error must be a string or nil")
        return cls(
            epoch,  # type: ignore[arg-type]
            leader,
            sender,  # type: ignore[arg-type]
            records,
            hw,  # type: ignore[arg-type]
            div_epoch,
            div_end,
            w[8],
            OFFSET_OR_NONE.check(w[9], "fetch_offset"),
            EPOCH_OR_NONE.check(w[10], "last_fetched_epoch"),
        )


Message = ElectionState | Evaluation | BeginEpoch | FetchRequest | FetchResponse


@dataclass(frozen=True, slots=True)
class PeerClosed:
    """Driver input, never sent and never decoded from the wire: `sender`'s process looks gone (its
    connection was closed and a new one was refused, i.e. nothing listens at its address any more; a
    paused process or a cut link gives neither). A hint that lets a node act before its timeout: it only
    ever triggers what a timeout could have triggered at that moment (docs/ELECTION.md section 4)."""

    sender: int


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Driver input, never sent and never decoded from the wire: the driver's heartbeat path (a thread of
    its own, with its own authenticated connections: broker/controller/heartbeat.py) exchanged a heartbeat with
    `sender` at `at_ms` (the driver's clock, possibly earlier than the `now_ms` it is fed with: it was
    recorded while the node's own loop was busy), and `sender` then followed controller `leader` in
    `epoch` (`leader == sender`: it was that controller itself). A hint that only ever moves timers: a
    follower's election timer while its controller answers, a controller's check-quorum while its
    followers speak; it never changes an epoch, a role or the log (docs/ELECTION.md section 3)."""

    sender: int
    epoch: int
    leader: int | None
    at_ms: int


# What QuorumNode.receive takes: the network's messages and the driver's own hints.
Input = Message | PeerClosed | Heartbeat

_BY_TAG: dict[str, type[Message]] = {
    c.TAG: c for c in (ElectionState, Evaluation, BeginEpoch, FetchRequest, FetchResponse)
}


def from_wire(w: list[Any] | tuple[Any, ...]) -> Message:
    """Decode any message from its list form; raises ValueError on an unknown or malformed one."""
    if not w:
        raise ValueError("empty quorum message")
    tag = w[0]
    if isinstance(tag, bytes):
        tag = tag.decode()
    cls = _BY_TAG.get(tag)
    if cls is None:
        raise ValueError(f"unknown quorum message tag {tag!r}")
    try:
        return cls.from_wire(list(w))
    except (IndexError, TypeError, ValueError) as e:
        raise ValueError(f"malformed {cls.__name__}: {e}") from None


# --- outputs ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Send:
    to: int
    msg: Message


@dataclass(frozen=True, slots=True)
class Persist:
    """Durably save (epoch, voted_for) before executing any later output of the same list."""

    epoch: int
    voted_for: int | None


@dataclass(frozen=True, slots=True)
class BecameController:
    epoch: int


@dataclass(frozen=True, slots=True)
class BecameFollower:
    epoch: int
    leader: int | None  # None while an election runs or after a controller stepped down


@dataclass(frozen=True, slots=True)
class Committed:
    """Records below `high_watermark` are committed; apply the ones not applied yet."""

    high_watermark: int


@dataclass(frozen=True, slots=True)
class Truncated:
    """The log was truncated to `offset` (always >= the high watermark): drop state derived from records >= it."""

    offset: int


Output = Send | Persist | BecameController | BecameFollower | Committed | Truncated
