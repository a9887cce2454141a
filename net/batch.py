"""Record batch format: Kafka's record batch v2 (magic 2), shared by clients (encode/decode) and the
broker (validate header and CRC, stamp offsets and leader epoch).

One log for both protocols: a batch a Kafka client produces is stored and served as it came, and our
own clients write the same bytes. The records section (Kafka's varint records) is encoded and decoded
by aiokafka's C record codec (`aiokafka.record`, Cython), never by the broker on the produce path.
Kafka Lite 0.1 wrote magic 1 with a msgpack records section: such batches are still validated,
replicated and read (`LEGACY_MAGIC`), never written. See docs/FORMAT.md.
"""

from __future__ import annotations

import functools
import struct
from typing import Any, Iterable, Iterator, NamedTuple, Sequence

import msgpack
from crc32c import crc32c

from net.compression import CODEC_MASK, CODEC_NONE, compress, decompress

_codec: Any = None


def _records_codec() -> Any:
    """aiokafka's C record codec (`aiokafka.record.default_records`), imported on first use: `import aiokafka`
    loads its whole client too (0.1-0.4 s of CPU), and a restarting broker must listen before it needs it."""
    global _codec
    if _codec is None:
        from aiokafka.record import default_records

        _codec = default_records
    return _codec


MAGIC = 2  # Kafka's record batch v2
LEGACY_MAGIC = 1  # Kafka Lite 0.1: the v2 header with msgpack records (read, never written)
MAGICS = (LEGACY_MAGIC, MAGIC)
# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes,
# lastOffsetDelta, firstTimestamp, maxTimestamp, producerId, producerEpoch,
# baseSequence, recordCount
HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
# batchLength counts the bytes after itself, as in Kafka.
LOG_OVERHEAD = 12  # baseOffset + batchLength
CRC_OFFSET = 17  # where the CRC field starts
CRC_START = 21  # the CRC covers attributes .. end, so stamping the offset/epoch keeps it valid
_LEN = struct.Struct(">i")
_EPOCH = struct.Struct(">i")
_OFFSET = struct.Struct(">q")
TIMESTAMP_LOG_APPEND = 0x08
# Kafka's batch attributes for transactions (KIP-98): a transactional producer's batches carry TRANSACTIONAL;
# a commit or abort marker is a batch of one control record with both bits set (docs/FORMAT.md).
TRANSACTIONAL = 0x10
CONTROL = 0x20
# Kafka's attribute bit 6 (KIP-534): the log cleaner set it when it first kept a tombstone or a lone transaction
# marker of this batch, and firstTimestamp (Kafka's baseTimestamp) then holds the delete horizon: the time from
# which a cleaning may remove them. The records' timestamp deltas count from it, so their timestamps stay.
DELETE_HORIZON = 0x40

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1


class InvalidBatch(ValueError):
    """A batch whose framing, magic or CRC is wrong."""


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL)

    @property
    def delete_horizon_ms(self) -> int | None:
        """Kafka's RecordBatch.deleteHorizonMs: the base timestamp of a batch with the delete-horizon flag, else
        None (magic 2 only, as in Kafka; the cleaner never flags Kafka Lite 0.1's batches, it rewrites them)."""
        if self.attributes & DELETE_HORIZON and self.magic == MAGIC:
            return self.first_timestamp
        return None


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    return BatchHeader._make(HEADER.unpack_from(buf, pos))


def validate(buf: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None) -> BatchHeader:
    """Check framing, magic and CRC of the batch at buf[pos:]. Raises InvalidBatch."""
    end = len(buf) if end is None else end
    if end - pos < HEADER_SIZE:
        raise InvalidBatch(f"batch truncated: {end - pos} bytes, header needs {HEADER_SIZE}")
    h = parse_header(buf, pos)
    size = h.batch_length + LOG_OVERHEAD
    if h.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise InvalidBatch(f"batch length {h.batch_length} shorter than the header")
    if pos + size > end:
        raise InvalidBatch(f"batch truncated: length says {size} bytes, {end - pos} present")
    if h.magic not in MAGICS:
        raise InvalidBatch(f"unsupported magic {h.magic} (record batch v2, magic 2, expected)")
    if h.record_count < 0 or h.last_offset_delta < 0:
        raise InvalidBatch("negative record count or offset delta")
    with memoryview(buf)[pos + CRC_START : pos + size] as body:
        actual = crc32c(body)
    if actual != h.crc:
        raise InvalidBatch(f"CRC mismatch: header {h.crc:#010x}, computed {actual:#010x}")
    return h


def stamp(batch: bytearray, base_offset: int, leader_epoch: int, pos: int = 0) -> None:
    """Assign the base offset and leader epoch in place; the CRC stays valid."""
    _OFFSET.pack_into(batch, pos, base_offset)
    _EPOCH.pack_into(batch, pos + LOG_OVERHEAD, leader_epoch)


def iter_batches(buf: bytes | memoryview, validate_crc: bool = False) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) of each whole batch in `buf`; stops at a partial tail."""
    pos, end = 0, len(buf)
    while end - pos >= HEADER_SIZE:
        h = parse_header(buf, pos)
        if h.batch_length < HEADER_SIZE - LOG_OVERHEAD:
            # A length that cannot even cover the header would never advance `pos`.
            raise InvalidBatch(f"batch length {h.batch_length} at position {pos} is shorter than the header")
        if pos + h.size > end:
            return
        if validate_crc:
            validate(buf, pos, end)
        yield pos, h
        pos += h.size


# --- client side: build and read records -------------------------------------

_TAIL = struct.Struct(">hiqqqhii")  # attributes .. recordCount: the part after the CRC
_PREFIX = struct.Struct(">qiibI")  # baseOffset, batchLength, partitionLeaderEpoch, magic, crc
_NO_HEADERS: list[tuple[str, bytes]] = []
_NO_LIMIT = 1 << 62


def build(
    records: Sequence[Sequence[Any]],
    first_timestamp: int,
    max_timestamp: int,
    codec: int = CODEC_NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    base_offset: int = 0,
    last_offset_delta: int | None = None,
    transactional: bool = False,
    control: bool = False,
    delete_horizon: int | None = None,
    more: Sequence[tuple[int, Sequence[Sequence[Any]]]] = (),
) -> bytes:
    """Encode a batch. Each record is (offset_delta, timestamp_delta, key, value, headers), headers a
    list of (str, bytes) or None; timestamps are first_timestamp + timestamp_delta.

    `more`: further runs of records after `records`, each (its first timestamp, its records) with offset
    deltas from 0 as `records`' (a producer's queued batches sent as one, client/accumulator.py), so no record
    tuple is built again: each run's offsets follow the previous run's, its timestamps from its own first.

    `last_offset_delta` defaults to len(records) - 1; the log cleaner passes the original batch's, so a
    batch that lost its last records to compaction still ends where it did. With `delete_horizon` (the log
    cleaner's, KIP-534) the batch carries DELETE_HORIZON and that time as its base timestamp; the records'
    deltas are written from it, so every record keeps its timestamp."""
    # aiokafka's builder writes the varint records in C; the header is ours (the cleaner's offsets and
    # timestamps, our compression level), so only its records section is kept.
    base = first_timestamp if delete_horizon is None else delete_horizon
    builder = _records_codec().DefaultRecordBatchBuilder(2, CODEC_NONE, 0, -1, -1, -1, _NO_LIMIT)
    append = builder.append
    # The builder counts deltas from its first record's timestamp. When the base is not that (a delete
    # horizon), an anchor record at the base goes first and is cut from the section afterwards.
    anchored = bool(records) and first_timestamp + records[0][1] != base
    if anchored:
        append(0, base, None, None, _NO_HEADERS)
    n = 0
    for run_ts, run in ((first_timestamp, records), *more):
        for d_off, d_ts, key, value, headers in run:
            if not headers:
                headers = _NO_HEADERS
            elif type(headers[0]) is not tuple:  # the codec takes (key, value) tuples only
                headers = [(k, v) for k, v in headers]
            append(n + d_off, run_ts + d_ts, key, value, headers)
        n += len(run)
    payload: bytes | memoryview = memoryview(builder.build())[HEADER_SIZE + (_anchor_size() if anchored else 0) :]
    attributes = (TRANSACTIONAL if transactional else 0) | (CONTROL if control else 0)
    if delete_horizon is not None:
        attributes |= DELETE_HORIZON
    if codec != CODEC_NONE:
        payload = compress(codec, payload)
        attributes |= codec
    if last_offset_delta is None:
        last_offset_delta = n - 1 if n else 0
    tail = _TAIL.pack(
        attributes,
        last_offset_delta,
        base,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        n,
    )
    crc = crc32c(payload, crc32c(tail))
    length = HEADER_SIZE - LOG_OVERHEAD + len(payload)
    return b"".join((_PREFIX.pack(base_offset, length, -1, MAGIC, crc), tail, payload))


@functools.cache
def _anchor_size() -> int:
    """The encoded size of build()'s anchor record (offset delta 0, timestamp delta 0, no key, value or
    headers): 7 bytes, measured rather than assumed."""
    builder = _records_codec().DefaultRecordBatchBuilder(2, CODEC_NONE, 0, -1, -1, -1, _NO_LIMIT)
    builder.append(0, 0, None, None, _NO_HEADERS)
    return len(builder.build()) - HEADER_SIZE


def recompress(buf: bytes | bytearray | memoryview, pos: int, h: BatchHeader, codec: int, level: int | None) -> bytes:
    """The batch at buf[pos:] with its records section in `codec` (Kafka's broker-side recompression for a
    topic's compression.type): the varint records are not decoded, only decompressed and compressed again;
    every header field but the codec bits, the length and the CRC stays."""
    with memoryview(buf)[pos + HEADER_SIZE : pos + h.size] as section:
        raw = decompress(h.codec, section) if h.codec != CODEC_NONE else bytes(section)
    payload = compress(codec, raw, level) if codec != CODEC_NONE else raw
    tail = _TAIL.pack(
        (h.attributes & ~CODEC_MASK) | codec,
        h.last_offset_delta,
        h.first_timestamp,
        h.max_timestamp,
        h.producer_id,
        h.producer_epoch,
        h.base_sequence,
        h.record_count,
    )
    crc = crc32c(payload, crc32c(tail))
    length = HEADER_SIZE - LOG_OVERHEAD + len(payload)
    return b"".join((_PREFIX.pack(h.base_offset, length, h.leader_epoch, h.magic, crc), tail, payload))


def iter_records(buf: bytes | bytearray | memoryview, pos: int, h: BatchHeader) -> Iterator[Any]:
    """The records of one magic-2 batch as aiokafka records (.offset, .timestamp absolute; .key, .value,
    .headers: a list of (str, bytes)), decompressed and decoded in C."""
    return iter(_records_codec().DefaultRecordBatch(bytes(buf[pos : pos + h.size])))


def records_of(buf: bytes | bytearray | memoryview, pos: int, h: BatchHeader) -> Sequence[Any]:
    """The decoded records of one batch: [(offset_delta, timestamp_delta, key, value, headers), ...],
    headers None or a list of (str, bytes); a LogAppendTime batch's records carry their create times."""
    if h.magic == LEGACY_MAGIC:
        body = bytes(buf[pos + HEADER_SIZE : pos + h.size])
        if h.codec != CODEC_NONE:
            body = decompress(h.codec, body)
        return msgpack.unpackb(body, raw=False, use_list=False) if body else ()
    base, first = h.base_offset, h.first_timestamp
    if h.attributes & TIMESTAMP_LOG_APPEND:
        # aiokafka answers the append time for every record; the deltas are the producer's.
        return [
            (r.offset - base, r.timestamp - first, r.key, r.value, tuple(r.headers) if r.headers else None)
            for r in _create_time_records(buf, pos, h)
        ]
    return [
        (r.offset - base, r.timestamp - first, r.key, r.value, tuple(r.headers) if r.headers else None)
        for r in iter_records(buf, pos, h)
    ]


def _create_time_records(buf: bytes | bytearray | memoryview, pos: int, h: BatchHeader) -> Iterator[Any]:
    raw = bytearray(buf[pos : pos + h.size])
    struct.pack_into(">h", raw, CRC_START, h.attributes & ~TIMESTAMP_LOG_APPEND)  # CRC no longer checked
    return iter(_records_codec().DefaultRecordBatch(bytes(raw)))


# --- transaction markers (Kafka's EndTransactionMarker in a control batch) ----------------------------

CONTROL_ABORT = 0  # Kafka's ControlRecordType.ABORT
CONTROL_COMMIT = 1  # Kafka's ControlRecordType.COMMIT
_CONTROL_KEY = struct.Struct(">hh")  # version 0, type
_MARKER_VALUE = struct.Struct(">hi")  # version 0, coordinator epoch


class ControlRecord(NamedTuple):
    """A control batch's record: a transaction's commit or abort marker and the coordinator epoch that wrote it."""

    commit: bool
    coordinator_epoch: int


def build_marker(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, timestamp: int) -> bytes:
    """A control batch ending `producer_id`'s transaction on one partition, as Kafka's leader writes it:
    one record, key (version 0, COMMIT or ABORT), value (version 0, coordinator epoch), no sequence."""
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = _MARKER_VALUE.pack(0, coordinator_epoch)
    return build(
        [(0, 0, key, value, None)],
        timestamp,
        timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        control=True,
    )


def control_record(buf: bytes | bytearray | memoryview, pos: int, h: BatchHeader) -> ControlRecord | None:
    """The marker of the control batch at buf[pos:], or None for a control record of another type (Kafka
    reserves types beyond COMMIT and ABORT, e.g. KRaft's, and skips them) or a malformed one."""
    if not h.is_control or h.magic != MAGIC:
        return None
    for r in iter_records(buf, pos, h):
        key = r.key or b""
        if len(key) < _CONTROL_KEY.size:
            return None
        _, kind = _CONTROL_KEY.unpack_from(key)
        if kind not in (CONTROL_ABORT, CONTROL_COMMIT):
            return None
        value = r.value or b""
        epoch = _MARKER_VALUE.unpack_from(value)[1] if len(value) >= _MARKER_VALUE.size else -1
        return ControlRecord(kind == CONTROL_COMMIT, epoch)
    return None


def committed_batches(buf: bytes | memoryview, aborted: Iterable[tuple[int, int]]) -> Iterator[tuple[int, BatchHeader]]:
    """The data batches of a read_committed read that a reader may see (Kafka's consumer Fetcher, and the share
    partition's read_committed acquisition): a batch of an aborted transaction is left out, from the aborted
    transaction's first offset (the leader's `aborted_transactions`, (producer id, first offset)) to its producer's
    abort marker, and so is every control batch."""
    pending = sorted((int(first), int(pid)) for pid, first in aborted)
    i = 0
    aborting: set[int] = set()
    for pos, h in iter_batches(buf):
        while i < len(pending) and pending[i][0] <= h.last_offset:
            aborting.add(pending[i][1])
            i += 1
        if h.attributes & CONTROL:
            marker = control_record(buf, pos, h)
            if marker is not None and not marker.commit:
                aborting.discard(h.producer_id)
            continue
        if h.attributes & TRANSACTIONAL and h.producer_id in aborting:
            continue
        yield pos, h
