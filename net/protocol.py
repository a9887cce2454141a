"""Wire protocol: length-prefixed msgpack frames.

A frame is a 4-byte big-endian length followed by that many bytes of msgpack.
Request:  [api_key, api_version, correlation_id, client_id, body]
Response: [correlation_id, body]
Bodies are msgpack maps whose fields are listed per api in docs/FORMAT.md.
Api keys follow Kafka's numbering so tcpdump output reads familiarly.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import Any

import msgpack

FRAME_HEADER = struct.Struct(">I")
DEFAULT_MAX_FRAME = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    # Controller to broker: answer once the metadata committed so far is applied here (Kafka's controller push of
    # metadata in ZooKeeper mode; broker/metadata/propagation.py).
    UPDATE_METADATA = 6
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DESCRIBE_CONFIGS = 32
    CREATE_PARTITIONS = 37
    INIT_PRODUCER_ID = 22
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    ALTER_CONFIGS = 33
    INCREMENTAL_ALTER_CONFIGS = 44
    SASL_AUTHENTICATE = 36
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    QUORUM = 52  # the controller quorum's one-way messages (Kafka's Vote/BeginQuorumEpoch range)
    ALTER_PARTITION = 56
    # A broker to the controller: a client's typed request, forwarded with who sent it (Kafka's Envelope, KIP-590).
    ENVELOPE = 58
    BROKER_REGISTRATION = 62  # broker to controller: its Kafka-protocol listener, for every broker's Metadata
    # Broker to broker, on the heartbeat listener (broker/controller/heartbeat.py); on the native listener it
    # answers only where that listener is.
    BROKER_HEARTBEAT = 63
    DESCRIBE_TOPIC_PARTITIONS = 75  # Kafka's DescribeTopicPartitions
    DESCRIBE_CLUSTER = 60  # Kafka's DescribeCluster (KIP-700)
    DELETE_RECORDS = 21
    OFFSET_FOR_LEADER_EPOCH = 23
    WRITE_TXN_MARKERS = 27  # transaction coordinator (or an admin with ClusterAction) to partition leaders
    DESCRIBE_LOG_DIRS = 35
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_QUORUM = 55
    LIST_CONFIG_RESOURCES = 74
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68  # the consumer group protocol (KIP-848)
    CONSUMER_GROUP_DESCRIBE = 69
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    # Share groups (KIP-932): membership at the group coordinator, records at the partitions' leaders.
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    # A share-partition's leader, or the group coordinator, to the share coordinator (the leader of the
    # share-partition's __share_group_state partition).
    INITIALIZE_SHARE_GROUP_STATE = 83
    READ_SHARE_GROUP_STATE = 84
    WRITE_SHARE_GROUP_STATE = 85
    DELETE_SHARE_GROUP_STATE = 86
    READ_SHARE_GROUP_STATE_SUMMARY = 87
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92


class OffsetSpec(IntEnum):
    """ListOffsets' special timestamps (Kafka's ListOffsetsRequest constants); any value >= 0 is a time."""

    LATEST = -1  # the high watermark
    EARLIEST = -2  # the log start offset
    MAX_TIMESTAMP = -3  # the record with the largest timestamp (KIP-734)
    EARLIEST_LOCAL = -4  # the first offset on local disk (KIP-1005): the log start, without tiered storage
    LATEST_TIERED = -5  # the last offset in tiered storage (KIP-1005): none, without it


class ElectionType(IntEnum):
    """ElectLeaders' election_type (Kafka's ElectionType): the first replica if it is alive and in the ISR, or,
    for a partition without a leader, any live replica (unclean: records only the ISR had may be lost)."""

    PREFERRED = 0
    UNCLEAN = 1


# The apis whose native body is the typed message of net/schema/ (a msgpack array, net/messages.py), and the
# first native version that carries it. The version before answers in the old map form for one more release.
TYPED_SINCE: dict[int, int] = {
    ApiKey.LIST_OFFSETS: 1,
    ApiKey.ELECT_LEADERS: 1,
    ApiKey.DELETE_RECORDS: 0,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: 0,
    ApiKey.DESCRIBE_LOG_DIRS: 0,
    ApiKey.DESCRIBE_PRODUCERS: 0,
    ApiKey.DESCRIBE_QUORUM: 0,
    ApiKey.LIST_CONFIG_RESOURCES: 0,
    # v0 was a Metadata request under this key (its map body and answer), served as before for one more release.
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: 1,
    # Transactions (KIP-98)
    ApiKey.INIT_PRODUCER_ID: 1,
    ApiKey.ADD_PARTITIONS_TO_TXN: 0,
    ApiKey.ADD_OFFSETS_TO_TXN: 0,
    ApiKey.END_TXN: 0,
    ApiKey.WRITE_TXN_MARKERS: 0,
    ApiKey.TXN_OFFSET_COMMIT: 0,
    ApiKey.DESCRIBE_TRANSACTIONS: 0,
    ApiKey.LIST_TRANSACTIONS: 0,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: 0,
    ApiKey.CONSUMER_GROUP_DESCRIBE: 0,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: 0,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: 0,
    ApiKey.SHARE_GROUP_HEARTBEAT: 0,
    ApiKey.SHARE_GROUP_DESCRIBE: 0,
    ApiKey.SHARE_FETCH: 0,
    ApiKey.SHARE_ACKNOWLEDGE: 0,
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: 0,
    ApiKey.READ_SHARE_GROUP_STATE: 0,
    ApiKey.WRITE_SHARE_GROUP_STATE: 0,
    ApiKey.DELETE_SHARE_GROUP_STATE: 0,
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: 0,
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: 0,
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: 0,
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: 0,
    # The classic group apis (issue 26 §1): v0 was the map body of docs/FORMAT.md, served one more release.
    ApiKey.FIND_COORDINATOR: 1,
    ApiKey.JOIN_GROUP: 1,
    ApiKey.SYNC_GROUP: 1,
    ApiKey.HEARTBEAT: 1,
    ApiKey.LEAVE_GROUP: 1,
    ApiKey.OFFSET_COMMIT: 1,
    ApiKey.OFFSET_FETCH: 1,
    ApiKey.LIST_GROUPS: 1,
    ApiKey.DESCRIBE_GROUPS: 1,
    ApiKey.DELETE_GROUPS: 1,
    ApiKey.OFFSET_DELETE: 1,
    # The ACL, SCRAM-credential and client-quota apis (issue 26 §1), likewise.
    ApiKey.DESCRIBE_ACLS: 1,
    ApiKey.CREATE_ACLS: 1,
    ApiKey.DELETE_ACLS: 1,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: 1,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: 1,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: 1,
    ApiKey.ALTER_CLIENT_QUOTAS: 1,
    ApiKey.DESCRIBE_CLUSTER: 0,  # typed from its first native version
    # The topic and config apis (issue 26 §1): v0 was the map body of docs/FORMAT.md, served one more release;
    # IncrementalAlterConfigs was AlterConfigs' v0 map without "replace", and is typed from its first version.
    ApiKey.CREATE_TOPICS: 1,
    ApiKey.DELETE_TOPICS: 1,
    ApiKey.CREATE_PARTITIONS: 1,
    ApiKey.DESCRIBE_CONFIGS: 1,
    ApiKey.ALTER_CONFIGS: 1,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: 0,
    # Metadata (issue 26 §1): v0's map (with its native-only "listener" and "broker_info") served one more release.
    ApiKey.METADATA: 1,
    # The data path (issue 26 §1): the record batches stay opaque bytes in the typed messages.
    ApiKey.PRODUCE: 1,
    # Fetch (issue 26 §1): v0's rows (with the native-only message and log_end_offset) answered one more release.
    ApiKey.FETCH: 1,
}
# api -> (min version, max version) this build speaks.
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {int(k): (0, TYPED_SINCE.get(k, 0)) for k in ApiKey}


class FrameError(ValueError):
    """A frame that cannot be parsed; the connection must be closed."""


class FrameTooLarge(FrameError):
    pass


def encode_frame(obj: Any) -> bytes:
    payload: bytes = msgpack.packb(obj, use_bin_type=True)
    return FRAME_HEADER.pack(len(payload)) + payload


def encode_request(
    api_key: int, version: int, correlation_id: int, client_id: str | None, body: dict[str, Any] | list[Any]
) -> bytes:
    return encode_frame([api_key, version, correlation_id, client_id, body])


def encode_response(correlation_id: int, body: dict[str, Any] | list[Any]) -> bytes:
    return encode_frame([correlation_id, body])


class FrameDecoder:
    """Incremental frame splitter: feed bytes, get whole msgpack payloads."""

    __slots__ = ("_buf", "max_frame")

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self._buf = bytearray()
        self.max_frame = max_frame

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._buf
        buf += data
        frames: list[bytes] = []
        pos, n = 0, len(buf)
        while n - pos >= 4:
            (size,) = FRAME_HEADER.unpack_from(buf, pos)
            if size > self.max_frame:
                raise FrameTooLarge(f"frame of {size} bytes exceeds the limit of {self.max_frame}")
            if n - pos - 4 < size:
                break
            frames.append(bytes(buf[pos + 4 : pos + 4 + size]))
            pos += 4 + size
        if pos:
            del buf[:pos]
        return frames

    @property
    def buffered(self) -> int:
        return len(self._buf)


def unpack(payload: bytes) -> Any:
    try:
        return msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except Exception as e:  # msgpack raises several unrelated types on garbage
        raise FrameError(f"undecodable msgpack frame: {e}") from None


def parse_request(payload: bytes) -> tuple[int, int, int, str | None, Any]:
    """The header and the body: a map, or for a typed version (TYPED_SINCE) the message's array."""
    obj = unpack(payload)
    if not isinstance(obj, list) or len(obj) != 5:
        raise FrameError("request frame is not [api_key, api_version, correlation_id, client_id, body]")
    api_key, version, corr, client_id, body = obj
    if not isinstance(api_key, int) or not isinstance(version, int) or not isinstance(corr, int):
        raise FrameError("request header fields must be integers")
    if body is None:
        body = {}
    typed = version >= TYPED_SINCE.get(api_key, 1 << 16)
    if not isinstance(body, list if typed else dict):
        raise FrameError(f"request body must be {'an array' if typed else 'a map'}")
    return api_key, version, corr, client_id if isinstance(client_id, str) else None, body


def parse_response(payload: bytes) -> tuple[int, Any]:
    """The correlation id and the body: a map, or a typed answer's array (a typed request's whole-request error
    is a map, as every native error)."""
    obj = unpack(payload)
    if not isinstance(obj, list) or len(obj) != 2 or not isinstance(obj[1], (dict, list)):
        raise FrameError("response frame is not [correlation_id, body]")
    return obj[0], obj[1]
