"""Record batch format (magic 1), shared by clients (encode/decode) and the
broker (validate header and CRC, stamp offsets and leader epoch).

The header is Kafka's v2 layout, field for field, so a Kafka engineer can read
it; the records section is msgpack instead of varints. See docs/FORMAT.md.
"""

from __future__ import annotations

import struct
from typing import Iterator, NamedTuple

import msgpack
from crc32c import crc32c

from net.compression import CODEC_MASK, CODEC_NONE, compress, decompress

MAGIC = 1
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
_OFFSET_AND_LEN = struct.Struct(">qi")
TIMESTAMP_LOG_APPEND = 0x08

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


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    return BatchHeader._make(HEADER.unpack_from(buf, pos))


def read_offset_and_size(buf: bytes | memoryview, pos: int = 0) -> tuple[int, int]:
    """(base offset, total size) of the batch at `pos`, without checking it."""
    base, length = _OFFSET_AND_LEN.unpack_from(buf, pos)
    return base, length + LOG_OVERHEAD


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
    if h.magic != MAGIC:
        raise InvalidBatch(f"unknown magic {h.magic}")
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

_packb = msgpack.Packer(use_bin_type=True, autoreset=True).pack


def build(
    records: list,
    first_timestamp: int,
    max_timestamp: int,
    codec: int = CODEC_NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    base_offset: int = 0,
    last_offset_delta: int | None = None,
) -> bytes:
    """Encode a batch. Each record is [offset_delta, timestamp_delta, key, value, headers].

    `last_offset_delta` defaults to len(records) - 1; the log cleaner passes the original batch's, so a
    batch that lost its last records to compaction still ends where it did."""
    payload = _packb(records)
    attributes = 0
    if codec != CODEC_NONE:
        payload = compress(codec, payload)
        attributes |= codec
    n = len(records)
    if last_offset_delta is None:
        last_offset_delta = n - 1 if n else 0
    tail = struct.pack(
        ">hiqqqhii",
        attributes,
        last_offset_delta,
        first_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        n,
    )
    crc = crc32c(payload, crc32c(tail))
    length = HEADER_SIZE - LOG_OVERHEAD + len(payload)
    return struct.pack(">qiibI", base_offset, length, -1, MAGIC, crc) + tail + payload


def records_of(buf: bytes | memoryview, pos: int, h: BatchHeader) -> list:
    """The decoded records list of one batch: [[offset_delta, ts_delta, key, value, headers], ...]."""
    body = bytes(buf[pos + HEADER_SIZE : pos + h.size])
    if h.codec != CODEC_NONE:
        body = decompress(h.codec, body)
    return msgpack.unpackb(body, raw=False, use_list=False) if body else ()
