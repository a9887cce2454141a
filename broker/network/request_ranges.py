"""The wire types of every number a request carries, checked once before any handler runs.

One table, `TOP_LEVEL`, names each api's integer fields with their Kafka type (net/wire_types.py); the
topic / partition rows (`[topic, [[partition, ...], ...]]`) have their columns typed in `ROWS`, and the maps
in a `topics` list (CreateTopics, CreatePartitions) in `TOPIC_MAPS`. Every other integer anywhere in a body
must at least fit int64. A request that breaks any rule is refused (INVALID_REQUEST) and nothing of it is
used. Handlers may add rules of their own (a positive max_bytes), never loosen these. The election's
messages are typed where they are decoded (election/messages.py), the heartbeat listener's in
broker/controller/heartbeat.py, and so are the apis typed end to end (net/schema/, net/messages.py: their fields'
Kafka types are checked as the request is decoded, on both listeners), which have no entry here.
"""

from __future__ import annotations

from typing import Any

from net.protocol import ApiKey
from net.wire_types import (
    BROKER_ID,
    COUNT,
    EPOCH,
    EPOCH_OR_NONE,
    INCARNATION,
    INT16,
    INT32,
    INT64,
    OFFSET,
    PARTITION,
    PORT,
    IntType,
    check_all_int64,
)

TOP_LEVEL: dict[int, dict[str, IntType]] = {
    ApiKey.ENVELOPE: {"api_key": INT16},
    ApiKey.ALTER_PARTITION: {
        "partition": PARTITION,
        "leader": BROKER_ID,
        "leader_epoch": EPOCH,
        "partition_epoch": EPOCH,
        "incarnation": INCARNATION,
        "seq": INT64,
    },
    ApiKey.BROKER_REGISTRATION: {"broker_id": BROKER_ID, "kafka_port": PORT},
    ApiKey.UPDATE_METADATA: {"applied": OFFSET, "timeout_ms": COUNT},
    ApiKey.BROKER_HEARTBEAT: {"broker_id": BROKER_ID, "epoch": EPOCH, "leader": BROKER_ID, "incarnation": INCARNATION},
}
# Lists of broker ids.
ID_LISTS: dict[int, tuple[str, ...]] = {ApiKey.ALTER_PARTITION: ("isr", "silent")}
# Columns of the partition rows under "topics": [[topic, [[col0, col1, ...], ...]], ...].
# A partition number is Kafka's int32: a negative one is answered per partition (UNKNOWN_TOPIC_OR_PARTITION) by
# the handler, as Kafka does, not refused whole.
ROWS: dict[int, tuple[IntType | None, ...]] = {
    ApiKey.LIST_OFFSETS: (INT32, INT64, EPOCH_OR_NONE),
}
TOPIC_MAPS: dict[int, dict[str, IntType]] = {
    ApiKey.CREATE_TOPICS: {"num_partitions": INT32, "replication_factor": INT16},
    ApiKey.CREATE_PARTITIONS: {"count": INT32},  # a count below the current one: INVALID_PARTITIONS per topic
}


def check_request(api_key: int, body: dict[str, Any]) -> None:
    """Raise WireRangeError if a number in `body` does not fit its field's Kafka type."""
    check_all_int64(body, "request")
    for name, t in TOP_LEVEL.get(api_key, {}).items():
        t.check_optional(body.get(name), name)
    for name in ID_LISTS.get(api_key, ()):
        ids = body.get(name)
        if isinstance(ids, list):
            for i in ids:
                BROKER_ID.check(i, f"{name} entry")
    topics = body.get("topics")
    if not isinstance(topics, list):
        return  # absent, or a shape error the handler reports
    columns = ROWS.get(api_key)
    maps = TOPIC_MAPS.get(api_key)
    for entry in topics:
        if maps is not None and isinstance(entry, dict):
            for name, field_type in maps.items():
                v = entry.get(name)
                if v is not None and v != -1:  # -1: the broker's default (Kafka's CreateTopics)
                    field_type.check(v, name)
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], list)):
            continue
        for row in entry[1]:
            if columns is not None and isinstance(row, list):
                for column, v in zip(columns, row):
                    # The common case inline (a follower's fetch has thousands of rows); check() says why not.
                    if column is not None and (type(v) is not int or not column.lo <= v <= column.hi):
                        column.check(v, "partition row field")
