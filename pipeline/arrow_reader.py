"""Turn a slice's records into Arrow record batches in the Kafka source schema.

Spark's Python data sources hand rows to the JVM through Arrow; yielding whole
`pyarrow.RecordBatch`es (rather than one Python tuple per row) skips Spark's per-row
conversion, which is most of the cost of a scan. The per-record work left is the batch decoding
(`net/batch.py` `records_of`: aiokafka's C reader, one tuple per record); the columns are gathered
with C-level `zip`, `extend` and one join per column.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator
from itertools import repeat

import numpy as np
import pyarrow as pa

from net import batch as fmt
from pipeline.columnar import columnar_batches
from pipeline.segments import Slice, read_slice_raw, records_in

# Rows per Arrow batch: big enough to amortize per-batch costs, small enough to stream.
ROWS_PER_BATCH = 32768

_ARROW_TYPES = {
    "key": pa.binary(),
    "value": pa.binary(),
    "topic": pa.string(),
    "partition": pa.int32(),
    "offset": pa.int64(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestampType": pa.int32(),
    "headers": pa.list_(pa.field("element", pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))),
}


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow form of the Kafka source schema, as Spark's `to_arrow_schema` produces it."""
    names = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    if include_headers:
        names.append("headers")
    return pa.schema([pa.field(n, _ARROW_TYPES[n]) for n in names])


def record_batches(
    sl: Slice, include_headers: bool, schema: pa.Schema | None = None, rows: int = ROWS_PER_BATCH
) -> Iterator[pa.RecordBatch]:
    """The slice's records as Arrow batches of about `rows` rows: decoded a buffer at a time in compiled code
    (pipeline/columnar.py), or with headers, record by record."""
    return raw_arrow_batches(
        sl.topic, sl.partition, read_slice_raw(sl), sl.start_offset, sl.end_offset, include_headers, schema, rows
    )


def raw_arrow_batches(
    topic: str,
    partition: int,
    chunks: Iterable[tuple[bytes, list[tuple[fmt.BatchHeader, int]]]],
    start: int,
    end: int,
    include_headers: bool,
    schema: pa.Schema | None = None,
    rows: int = ROWS_PER_BATCH,
) -> Iterator[pa.RecordBatch]:
    """Records with offsets in [start, end) of raw (buffer, [(header, position), ...]) chunks, from segment
    files or fetched, as Arrow batches: decoded a buffer at a time in compiled code (pipeline/columnar.py),
    or with headers, record by record."""
    schema = schema or arrow_schema(include_headers)
    if not include_headers:
        return columnar_batches(topic, partition, chunks, start, end, schema, rows)
    return arrow_batches(topic, partition, records_in(chunks, start, end), include_headers, schema, rows)


def arrow_batches(
    topic: str,
    partition: int,
    batches: Iterable[tuple[fmt.BatchHeader, tuple]],
    include_headers: bool,
    schema: pa.Schema | None = None,
    rows: int = ROWS_PER_BATCH,
) -> Iterator[pa.RecordBatch]:
    """(header, records) pairs of one partition, as segments.read_slice and pipeline/remote.py's fetch_range
    yield them, as Arrow batches of up to `rows` rows."""
    schema = schema or arrow_schema(include_headers)
    cols = _Columns(include_headers)
    # The cyclic GC would rescan the young record tuples over and over (they hold no cycles), as in
    # client/fetcher.py's decode_records: pause it while a batch is gathered, not while Spark has it.
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        for h, recs in batches:
            cols.add(h, recs)
            if cols.n >= rows:
                built = cols.build(topic, partition, schema)
                cols = _Columns(include_headers)
                gc.enable() if gc_was_on else None
                yield built
                gc.disable()
        if cols.n:
            yield cols.build(topic, partition, schema)
    finally:
        if gc_was_on:
            gc.enable()


class _Columns:
    """Columns being gathered from each batch's decoded record tuples (list.extend, in C); what is per
    batch (base offset, first timestamp, timestamp type) is expanded by numpy at build time."""

    __slots__ = ("keys", "values", "headers", "offset_deltas", "ts_deltas", "bases", "first_ts", "types", "counts", "n")

    def __init__(self, include_headers: bool) -> None:
        self.keys: list = []
        self.values: list = []
        self.headers: list | None = [] if include_headers else None
        self.offset_deltas: list[int] = []
        self.ts_deltas: list[int] = []
        self.bases: list[int] = []
        self.first_ts: list[int] = []
        self.types: list[int] = []
        self.counts: list[int] = []
        self.n = 0

    def add(self, h: fmt.BatchHeader, recs: tuple) -> None:
        d_off, d_ts, k, v, hd = zip(*recs)
        self.keys += k
        self.values += v
        self.offset_deltas += d_off
        if h.attributes & fmt.TIMESTAMP_LOG_APPEND:
            # Kafka's rule: every record of a LogAppendTime batch has the broker's time (maxTimestamp).
            self.ts_deltas += repeat(0, len(d_off))
            self.first_ts.append(h.max_timestamp)
            self.types.append(1)
        else:
            self.ts_deltas += d_ts
            self.first_ts.append(h.first_timestamp)
            self.types.append(0)
        if self.headers is not None:
            self.headers += map(_headers, hd)
        self.bases.append(h.base_offset)
        self.counts.append(len(d_off))
        self.n += len(d_off)

    def build(self, topic: str, partition: int, schema: pa.Schema) -> pa.RecordBatch:
        counts = np.array(self.counts, dtype=np.int64)
        offsets = np.repeat(np.array(self.bases, dtype=np.int64), counts) + np.array(self.offset_deltas, np.int64)
        ms = np.repeat(np.array(self.first_ts, dtype=np.int64), counts) + np.array(self.ts_deltas, np.int64)
        types = np.repeat(np.array(self.types, dtype=np.int32), counts)
        cols = [
            _binary(self.keys),
            _binary(self.values),
            pa.repeat(pa.scalar(topic, pa.string()), self.n),
            pa.repeat(pa.scalar(partition, pa.int32()), self.n),
            pa.array(offsets),
            pa.array(ms * 1000, _ARROW_TYPES["timestamp"]),  # Spark's timestamps are microseconds
            pa.array(types),
        ]
        if self.headers is not None:
            cols.append(pa.array(self.headers, _ARROW_TYPES["headers"]))
        return pa.RecordBatch.from_arrays(cols, schema=schema)


def _binary(items: list) -> pa.Array:
    """A binary column from bytes objects: one join and one length pass instead of Arrow's per-object
    conversion (twice as fast); nulls (no key, tombstones) take the general path."""
    if None in items:
        return pa.array(items, pa.binary())
    lengths = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
    offsets = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > 2**31 - 1:  # Arrow's binary offsets are int32: leave giant batches to pa.array
        return pa.array(items, pa.large_binary()).cast(pa.binary())
    offsets = offsets.astype(np.int32)
    data = b"".join(items)
    return pa.Array.from_buffers(pa.binary(), len(items), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _headers(hd: object) -> list:
    return [{"key": k, "value": v} for k, v in hd] if hd else []
