"""Typed error codes. Numbers and names follow Kafka's protocol error codes."""

from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    INVALID_PRODUCER_EPOCH = 47
    # Transactions (KIP-98, KIP-890)
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    UNKNOWN_PRODUCER_ID = 59
    INVALID_RECORD = 87
    PRODUCER_FENCED = 90
    TRANSACTIONAL_ID_NOT_FOUND = 105
    TRANSACTION_ABORTABLE = 120
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    SASL_AUTHENTICATION_FAILED = 58
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    STALE_BROKER_EPOCH = 77
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    RESOURCE_NOT_FOUND = 91
    NON_EMPTY_GROUP = 68
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    OFFSET_NOT_AVAILABLE = 78
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    INVALID_UPDATE_VERSION = 95
    INELIGIBLE_REPLICA = 107
    UNKNOWN_TOPIC_ID = 100
    # The consumer group protocol (KIP-848)
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    UNSUPPORTED_ENDPOINT_TYPE = 115  # DescribeCluster of the controllers' endpoints (KIP-919) from a broker
    INVALID_REGULAR_EXPRESSION = 128
    # Share groups (KIP-932)
    INVALID_RECORD_STATE = 121
    SHARE_SESSION_NOT_FOUND = 122
    INVALID_SHARE_SESSION_EPOCH = 123
    FENCED_STATE_EPOCH = 124
    SHARE_SESSION_LIMIT_REACHED = 133
    # Kafka Lite's own, outside Kafka's range: an offset commit for a partition the member does not own.
    PARTITION_NOT_ASSIGNED = 1001


RETRIABLE = frozenset(
    {
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.NOT_CONTROLLER,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.OFFSET_NOT_AVAILABLE,
        ErrorCode.CONCURRENT_TRANSACTIONS,
    }
)


class KafkaLiteError(Exception):
    """An error that carries a protocol error code."""

    code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR
    # Set on the errors a producer reports per record (client/outcome.py): "not_written" or "unknown".
    outcome: str | None = None
    unknown_cause: BaseException | None = None

    def __init__(self, message: str = "", code: ErrorCode | None = None) -> None:
        if code is not None:
            self.code = code
        super().__init__(message or self.code.name)

    @property
    def retriable(self) -> bool:
        return self.code in RETRIABLE


def _error(name: str) -> type[KafkaLiteError]:
    code = ErrorCode[name]
    cls_name = "".join(p.capitalize() for p in name.split("_")) + "Error"
    return type(cls_name, (KafkaLiteError,), {"code": code})


OffsetOutOfRangeError = _error("OFFSET_OUT_OF_RANGE")
CorruptMessageError = _error("CORRUPT_MESSAGE")
UnknownTopicOrPartitionError = _error("UNKNOWN_TOPIC_OR_PARTITION")
MessageTooLargeError = _error("MESSAGE_TOO_LARGE")
InvalidTimestampError = _error("INVALID_TIMESTAMP")


class KafkaStorageError(KafkaLiteError):  # a class statement, not _error(): others subclass it
    code = ErrorCode.KAFKA_STORAGE_ERROR


class InvalidConfigError(KafkaLiteError):  # a class statement, not _error(): others subclass it
    code = ErrorCode.INVALID_CONFIG


InvalidRequestError = _error("INVALID_REQUEST")
TopicAlreadyExistsError = _error("TOPIC_ALREADY_EXISTS")
InvalidTopicError = _error("INVALID_TOPIC_EXCEPTION")
InvalidPartitionsError = _error("INVALID_PARTITIONS")
InvalidReplicationFactorError = _error("INVALID_REPLICATION_FACTOR")
InvalidReplicaAssignmentError = _error("INVALID_REPLICA_ASSIGNMENT")
NoReassignmentInProgressError = _error("NO_REASSIGNMENT_IN_PROGRESS")
NotLeaderOrFollowerError = _error("NOT_LEADER_OR_FOLLOWER")
FencedLeaderEpochError = _error("FENCED_LEADER_EPOCH")
UnknownLeaderEpochError = _error("UNKNOWN_LEADER_EPOCH")
# KIP-207: a new leader's high watermark has not reached its epoch's start offset yet (retriable).
OffsetNotAvailableError = _error("OFFSET_NOT_AVAILABLE")
RequestTimedOutError = _error("REQUEST_TIMED_OUT")


class NetworkError(KafkaLiteError):  # a class statement, not _error(): others subclass it
    code = ErrorCode.NETWORK_EXCEPTION


UnsupportedVersionError = _error("UNSUPPORTED_VERSION")
InvalidRequiredAcksError = _error("INVALID_REQUIRED_ACKS")
NotEnoughReplicasError = _error("NOT_ENOUGH_REPLICAS")


# What a transactional client hears until transactions land (issue 28): TRANSACTIONAL_ID_AUTHORIZATION_FAILED
# (53), the answer Kafka gives a transactional id it will not serve, which clients treat as fatal (librdkafka's
# init_transactions fails at once instead of retrying the coordinator lookup until its timeout).
TRANSACTIONS_UNSUPPORTED = "transactions are not supported by Kafka Lite"


# An idempotent batch whose sequence is neither the next one nor a retained duplicate
# (broker/replica/producer_state.py).
class OutOfOrderSequenceError(KafkaLiteError):
    code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


# An idempotent batch from an older epoch of its producer than the partition has seen (Kafka since 2.7).
InvalidProducerEpochError = _error("INVALID_PRODUCER_EPOCH")


# Transactions (KIP-98): a control batch from a client; an id the coordinator does not know.
InvalidRecordError = _error("INVALID_RECORD")
InvalidTxnStateError = _error("INVALID_TXN_STATE")
ConcurrentTransactionsError = _error("CONCURRENT_TRANSACTIONS")
ProducerFencedError = _error("PRODUCER_FENCED")


# AlterPartition refusals (broker/controller/logic.py). Not retriable as such: what a leader does with each is
# broker/replica/replication.py's alter_partition_outcome.
OperationNotAttemptedError = _error("OPERATION_NOT_ATTEMPTED")
StaleBrokerEpochError = _error("STALE_BROKER_EPOCH")
InvalidUpdateVersionError = _error("INVALID_UPDATE_VERSION")
IneligibleReplicaError = _error("INELIGIBLE_REPLICA")


# Security (issue 14): authentication fails the connection, authorization one request or row.
class SaslAuthenticationError(KafkaLiteError):  # a class statement, not _error(): others subclass it
    code = ErrorCode.SASL_AUTHENTICATION_FAILED


UnsupportedSaslMechanismError = _error("UNSUPPORTED_SASL_MECHANISM")
IllegalSaslStateError = _error("ILLEGAL_SASL_STATE")
TopicAuthorizationError = _error("TOPIC_AUTHORIZATION_FAILED")
GroupAuthorizationError = _error("GROUP_AUTHORIZATION_FAILED")
ClusterAuthorizationError = _error("CLUSTER_AUTHORIZATION_FAILED")
SecurityDisabledError = _error("SECURITY_DISABLED")
ResourceNotFoundError = _error("RESOURCE_NOT_FOUND")
# ElectLeaders' per-partition outcomes (broker/controller/logic.py elect_leader).
PreferredLeaderNotAvailableError = _error("PREFERRED_LEADER_NOT_AVAILABLE")
EligibleLeadersNotAvailableError = _error("ELIGIBLE_LEADERS_NOT_AVAILABLE")
ElectionNotNeededError = _error("ELECTION_NOT_NEEDED")
# Partition floods (issue 25): the partition caps (broker/controller/logic.py) and KIP-599's controller mutation quota.
PolicyViolationError = _error("POLICY_VIOLATION")
ThrottlingQuotaExceededError = _error("THROTTLING_QUOTA_EXCEEDED")


class MalformedRequest(ValueError):
    """A well-framed request whose fields are wrong (a shape, a number out of its Kafka type): answered with
    INVALID_REQUEST. Not a KafkaLiteError, so that a handler answering KafkaLiteErrors per row does not make
    one row of a malformed request."""


def error_code_of(e: BaseException) -> tuple[ErrorCode, str]:
    """The error code and message a request (or one row of it) is answered with when handling it raised `e`
    (Kafka's Errors.forException): a KafkaLiteError's own code, INVALID_REQUEST for a MalformedRequest, and
    UNKNOWN_SERVER_ERROR for anything else (a bug of ours, named so that it can be reported)."""
    if isinstance(e, KafkaLiteError):
        return e.code, str(e)
    if isinstance(e, MalformedRequest):
        return ErrorCode.INVALID_REQUEST, str(e)
    return ErrorCode.UNKNOWN_SERVER_ERROR, f"{type(e).__name__}: {e}"


def error_for(code: int, message: str = "") -> KafkaLiteError:
    """The exception for a code received on the wire."""
    try:
        ec = ErrorCode(code)
    except ValueError:
        ec = ErrorCode.UNKNOWN_SERVER_ERROR
    for cls in KafkaLiteError.__subclasses__():
        if cls.__dict__.get("code") == ec:  # a class of that code (not one that only inherits the default)
            return cls(message)
    return KafkaLiteError(message, ec)


def topic_error(code: int, topic: str, action: str = "use", partition: int | None = None) -> KafkaLiteError:
    """A topic's error code as an exception whose message names the topic (and, for a refusal, what was
    refused), so a CLI's one line says what it is about: `TOPIC_AUTHORIZATION_FAILED: not authorized to read
    topic 'x'`."""
    ec = _known(code)
    if ec == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
        message = f"not authorized to {action} topic '{topic}'"
    elif ec == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        message = f"topic '{topic}' does not exist"
    elif ec == ErrorCode.INVALID_TOPIC_EXCEPTION:
        message = f"'{topic}' is not a valid topic name (ASCII letters, digits, '.', '_' and '-', at most 249)"
    else:
        message = f"topic '{topic}'" if partition is None else f"partition {partition} of topic '{topic}'"
    return error_for(ec, message)


def group_error(code: int, group: str, action: str = "use", detail: str = "") -> KafkaLiteError:
    """A group's error code as an exception whose message names the group, as topic_error does for topics;
    `detail`, the broker's own message, is kept (it is the message when it names the group already)."""
    ec = _known(code)
    if detail and group in detail:
        message = detail
    elif ec == ErrorCode.GROUP_AUTHORIZATION_FAILED:
        message = f"not authorized to {action} group '{group}'"
    else:
        message = f"group '{group}'" + (f": {detail}" if detail else "")
    return error_for(ec, message)


def _known(code: int) -> ErrorCode:
    return ErrorCode(code) if code in ErrorCode._value2member_map_ else ErrorCode.UNKNOWN_SERVER_ERROR
