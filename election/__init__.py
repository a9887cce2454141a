"""The controller quorum: the proposal's three-step election, made safe, with a KRaft-style metadata log.

Everything here is sans-IO; see docs/ELECTION.md and election/quorum.py.
"""

from election.config import QuorumConfig
from election.log import Entry, InMemoryLog, MetadataLog, Record
from election.messages import (
    FENCED_EPOCH,
    NOT_CONTROLLER,
    BecameController,
    BecameFollower,
    BeginEpoch,
    Committed,
    ElectionState,
    Evaluation,
    FetchRequest,
    FetchResponse,
    Heartbeat,
    Input,
    Message,
    Output,
    PeerClosed,
    Persist,
    Send,
    Truncated,
    from_wire,
)
from election.quorum import InvariantError, NotControllerError, QuorumNode, Role, leader_change_record

__all__ = [
    "FENCED_EPOCH",
    "NOT_CONTROLLER",
    "BecameController",
    "BecameFollower",
    "BeginEpoch",
    "Committed",
    "ElectionState",
    "Entry",
    "Evaluation",
    "FetchRequest",
    "FetchResponse",
    "Heartbeat",
    "InMemoryLog",
    "Input",
    "InvariantError",
    "Message",
    "MetadataLog",
    "NotControllerError",
    "Output",
    "PeerClosed",
    "Persist",
    "QuorumConfig",
    "QuorumNode",
    "Record",
    "Role",
    "Send",
    "Truncated",
    "from_wire",
    "leader_change_record",
]
