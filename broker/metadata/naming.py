"""Topic names: what Kafka accepts, and the internal topics' names (Kafka's `Topic`). The metadata itself is
broker/metadata/image.py."""

from __future__ import annotations

import re

from net.errors import ErrorCode, InvalidTopicError

# The internal topics (Kafka's Topic.GROUP_METADATA_TOPIC_NAME and TRANSACTION_STATE_TOPIC_NAME): named here, below
# both, because each coordinator's requests name the other's (FindCoordinator, TxnOffsetCommit).
OFFSETS_TOPIC = "__consumer_offsets"
TXN_TOPIC = "__transaction_state"

LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_LEN = 249


def validate_topic_name(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidTopicError("topic name must be a non-empty string")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_LEN:
        raise InvalidTopicError(f"topic name is longer than {MAX_TOPIC_LEN} characters")
    if not LEGAL_TOPIC.match(name):
        raise InvalidTopicError(f"topic name {name!r} has characters other than ASCII alphanumerics, '.', '_', '-'")
    return name


def missing_topic_code(name: object) -> int:
    """Kafka's answer for a topic the metadata does not have (Metadata, DescribeTopicPartitions): a consumer waiting
    for a topic retries UNKNOWN_TOPIC_OR_PARTITION, but not INVALID_TOPIC_EXCEPTION, for a name no topic could have."""
    try:
        validate_topic_name(name)
    except InvalidTopicError as e:
        return int(e.code)
    return int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
