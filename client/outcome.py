"""What a failed produce means for the records: not written, or unknown.

Every error a producer reports for a record carries `exc.outcome`:

- ``"not_written"``: no attempt to send the record reached a broker, or every attempt that did was refused
  in a way that proves nothing was appended (NOT_ENOUGH_REPLICAS, CORRUPT_MESSAGE / INVALID_RECORD,
  MESSAGE_TOO_LARGE, INVALID_REQUIRED_ACKS, an unknown topic or partition, authorization, an idempotent
  batch's OUT_OF_ORDER_SEQUENCE_NUMBER or INVALID_PRODUCER_EPOCH; with acks=0/1
  also NOT_LEADER_OR_FOLLOWER, which the leader checks before appending). Sending it again cannot duplicate.
- ``"unknown"``: at least one attempt may have been appended: a request timed out or its connection was
  cut after the request was written, or a broker answered with an error it can give after appending
  (NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT, NOT_LEADER_OR_FOLLOWER with acks=all, whose wait for
  the replicas ends that way when leadership moves, ...). The record may be in the log, possibly
  readable later; read it back (or use an idempotent key) before re-sending.

The decision uses the whole history of the record's batch, not only the last attempt: a batch that timed
out once and was then refused as NOT_ENOUGH_REPLICAS is still "unknown", and the error names the first
reason its fate became unknown (`exc.unknown_cause`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from net.errors import ErrorCode, KafkaLiteError

NOT_WRITTEN = "not_written"
UNKNOWN = "unknown"

# Refusals a broker gives before it appends anything, whatever the acks.
_REFUSED_BEFORE_APPEND = frozenset(
    {
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.MESSAGE_TOO_LARGE,
        ErrorCode.RECORD_LIST_TOO_LARGE,
        ErrorCode.INVALID_REQUIRED_ACKS,
        ErrorCode.INVALID_TOPIC_EXCEPTION,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.INVALID_TIMESTAMP,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.UNSUPPORTED_VERSION,
        ErrorCode.POLICY_VIOLATION,
        # The broker checks an idempotent batch's sequence and epoch before appending
        # (broker/replica/producer_state.py).
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
        ErrorCode.INVALID_PRODUCER_EPOCH,
    }
)
# Only with acks=0/1: with acks=all the same codes can end the wait for replication, after the append.
_REFUSED_BEFORE_APPEND_ACKS_1 = frozenset(
    {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.KAFKA_STORAGE_ERROR}
)
# Kafka's authorization codes (the security issue adds them); refused before any append.
_AUTHORIZATION_CODES = frozenset({29, 30, 31, 53})


def proves_not_appended(err: BaseException, acks: int) -> bool:
    """True when a broker's answer `err` to a produce that reached it proves the batch was not appended."""
    code = getattr(err, "code", None)
    if code is None:
        return False
    if code in _REFUSED_BEFORE_APPEND or int(code) in _AUTHORIZATION_CODES:
        return True
    return acks != -1 and code in _REFUSED_BEFORE_APPEND_ACKS_1


def with_outcome(err: BaseException, outcome: str, unknown_cause: BaseException | None) -> KafkaLiteError:
    """A fresh exception of the same kind as `err` carrying `outcome` (one per failed batch: batches of one
    request share `err` but not their histories)."""
    code = getattr(err, "code", ErrorCode.NETWORK_EXCEPTION)
    msg = str(err)
    if outcome == UNKNOWN and unknown_cause is not None and unknown_cause is not err:
        msg = f"{msg} (outcome unknown since an earlier attempt: {unknown_cause})"
    cls = type(err) if isinstance(err, KafkaLiteError) else KafkaLiteError
    try:
        exc = cls(msg, code)
    except TypeError:  # a subclass with another constructor
        exc = KafkaLiteError(msg, code)
    exc.outcome = outcome
    exc.unknown_cause = unknown_cause
    return exc


@dataclass(frozen=True)
class FailedRecord:
    """One record a producer could not deliver, with what is known of its fate."""

    topic: str
    partition: int
    key: Any
    value: Any
    error: KafkaLiteError

    @property
    def outcome(self) -> str:
        return self.error.outcome or UNKNOWN
