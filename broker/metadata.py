"""Topic names: what Kafka accepts (the metadata itself is in broker/controller.py)."""

from __future__ import annotations

import re
from typing import Any

from net.errors import ErrorCode, InvalidTopicError

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


def resolve_topic_ids(body: dict[str, Any], topic_ids: dict[str, str]) -> dict[str, Any]:
    """A Metadata request naming topics by id (`topic_ids`, hex): the names of the known ones join `topics`, so the
    request is authorized and answered by name; an unknown id is answered UNKNOWN_TOPIC_ID by the Kafka listener."""
    ids = body.get("topic_ids")
    if not isinstance(ids, list):
        return body
    names = [topic_ids[i] for i in ids if isinstance(i, str) and i in topic_ids]
    rest = {k: v for k, v in body.items() if k != "topic_ids"}
    return dict(rest, topics=[*(body.get("topics") or []), *names])
