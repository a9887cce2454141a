"""Record batches straight into Arrow columns, with no Python object per record (issue 16 §5).

Kafka's v2 records are varints one after the other, so finding where a record's key and value lie is a
sequential walk: in Python it costs an object per field. Here the walk is compiled (numba, `_parse`),
over a whole read buffer at a time: it fills arrays of offsets, timestamps and the positions and lengths
of keys and values, and `_gather` copies the key and value bytes into the two contiguous buffers an Arrow
binary column is made of. Python's work is per batch (header, CRC, decompression: segments.py and
net/batch.py, unchanged), never per record, and the log's format and the produce path are untouched.

The columns are the Kafka source schema's without headers; with includeHeaders the reader keeps the
per-record decoder (arrow_reader.py's `_Columns`), as it does for the legacy msgpack batches.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa

# numba keeps compiled code next to this file (__pycache__); an installed package may not be writable by the
# user Spark's executors run as (the broker's service user on a deployed host), and without a writable cache
# numba refuses cache=True: use a per-user directory under /tmp then. Read by numba when it is imported.
if "NUMBA_CACHE_DIR" not in os.environ and not os.access(os.path.dirname(os.path.abspath(__file__)), os.W_OK):
    os.environ["NUMBA_CACHE_DIR"] = os.path.join(tempfile.gettempdir(), f"kafkalite-numba-{os.getuid()}")

from numba import njit  # noqa: E402

from net import batch as fmt
from net.compression import CODEC_MASK, CODEC_NONE, decompress

# Column types, as arrow_reader.arrow_schema(False) has them.
_TS = pa.timestamp("us", tz="UTC")


class RecordFormatError(ValueError):
    """A record that runs past its batch, or a varint that does not end: the batch is corrupt."""


@njit(cache=True, nogil=True)
def _varint(buf, pos, end):  # type: ignore[no-untyped-def]
    """(zigzag-decoded value, next position) of the varint at pos; next = -1 if it runs past end."""
    shift = 0
    raw = 0
    while pos < end and shift < 64:
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
    return 0, -1


@njit(cache=True, nogil=True)
def _parse(buf, starts, ends, counts, lo, hi, off_delta, ts_delta, region, key_pos, key_len, val_pos, val_len):  # type: ignore[no-untyped-def]
    """Walk the records of regions [starts[i], ends[i]) of buf (counts[i] records each), keeping those whose
    offset delta is in [lo[i], hi[i]). Fills the output arrays; returns how many were kept, or -1 - i for a
    corrupt region i."""
    n = 0
    for i in range(starts.shape[0]):
        pos = starts[i]
        end = ends[i]
        for _ in range(counts[i]):
            length, p = _varint(buf, pos, end)
            if p < 0 or length < 0 or p + length > end:
                return -1 - i
            rec_end = p + length
            p += 1  # attributes
            td, p = _varint(buf, p, rec_end)
            if p < 0:
                return -1 - i
            od, p = _varint(buf, p, rec_end)
            if p < 0:
                return -1 - i
            kl, p = _varint(buf, p, rec_end)
            if p < 0 or p + max(kl, 0) > rec_end:
                return -1 - i
            kp = p
            if kl > 0:
                p += kl
            vl, p = _varint(buf, p, rec_end)
            if p < 0 or p + max(vl, 0) > rec_end:
                return -1 - i
            if lo[i] <= od < hi[i]:
                off_delta[n] = od
                ts_delta[n] = td
                region[n] = i
                key_pos[n] = kp
                key_len[n] = kl
                val_pos[n] = p
                val_len[n] = vl
                n += 1
            pos = rec_end
    return n


@njit(cache=True, nogil=True)
def _copy(src, p, n, out, o):  # type: ignore[no-untyped-def]
    """out[o:o+n] = src[p:p+n]: a plain loop for short items (keys), a slice copy for long ones."""
    if n < 32:
        for k in range(n):
            out[o + k] = src[p + k]
    else:
        out[o : o + n] = src[p : p + n]


@njit(cache=True, nogil=True)
def _gather(kbuf, kpos, klen, kout, koffs, vbuf, vpos, vlen, vout, voffs, kbase, vbase):  # type: ignore[no-untyped-def]
    """Copy each record's key and value after those of earlier spans, from kbase / vbase, in one pass (they lie
    side by side in the read buffer); null (-1) copies nothing. koffs[j + 1] / voffs[j + 1] is where item j
    ends (Arrow's offsets). Returns the new (kbase, vbase)."""
    ko = kbase
    vo = vbase
    for j in range(kpos.shape[0]):
        n = klen[j]
        if n > 0:
            _copy(kbuf, kpos[j], n, kout, ko)
            ko += n
        koffs[j + 1] = ko
        n = vlen[j]
        if n > 0:
            _copy(vbuf, vpos[j], n, vout, vo)
            vo += n
        voffs[j + 1] = vo
    return ko, vo


class ColumnarBuilder:
    """Arrow batches of one partition from (header, buffer, position) of whole batches."""

    def __init__(self, topic: str, partition: int, schema: pa.Schema, rows: int) -> None:
        self.topic = topic
        self.partition = partition
        self.schema = schema
        self.rows = rows
        self._parts: list[tuple] = []  # per parsed buffer: columns of the records kept
        self.n = 0

    def add(self, buf: bytes, batches: list[tuple[fmt.BatchHeader, int]], start: int, end: int) -> None:
        """Whole v2 batches of `buf` at the given positions, their records with offsets in [start, end)."""
        regions: list = []  # uncompressed batches in a row: parsed in place, in one call
        data = np.frombuffer(buf, np.uint8)
        for h, pos in batches:
            codec = h.attributes & CODEC_MASK
            if h.magic == fmt.MAGIC and codec == CODEC_NONE:
                regions.append((h, pos + fmt.HEADER_SIZE, pos + h.size))
                continue
            if regions:  # keep offset order: what came before this batch first
                self._parse(data, regions, start, end)
                regions = []
            if h.magic != fmt.MAGIC:  # Kafka Lite 0.1's msgpack records: decoded the per-record way
                self._add_records(h, fmt.records_of(buf, pos, h), start, end)
            else:
                raw = decompress(codec, buf[pos + fmt.HEADER_SIZE : pos + h.size])
                self._parse(np.frombuffer(raw, np.uint8), [(h, 0, len(raw))], start, end)
        if regions:
            self._parse(data, regions, start, end)

    def _add_records(self, h: fmt.BatchHeader, recs: list, start: int, end: int) -> None:
        recs = [r for r in recs if start <= h.base_offset + r[0] < end]
        if not recs:
            return
        d_off, d_ts, keys, values, _ = zip(*recs)
        n = len(recs)
        log_append = bool(h.attributes & fmt.TIMESTAMP_LOG_APPEND)
        offsets = h.base_offset + np.array(d_off, np.int64)
        ts = np.full(n, h.max_timestamp, np.int64) if log_append else h.first_timestamp + np.array(d_ts, np.int64)
        types = np.full(n, int(log_append), np.int32)
        self._parts.append((offsets, ts, types, _as_spans(keys), _as_spans(values)))
        self.n += n

    def _parse(self, data: np.ndarray, regions: list, start: int, end: int) -> None:
        k = len(regions)
        starts = np.fromiter((r[1] for r in regions), np.int64, k)
        ends = np.fromiter((r[2] for r in regions), np.int64, k)
        counts = np.fromiter((r[0].record_count for r in regions), np.int64, k)
        bases = np.fromiter((r[0].base_offset for r in regions), np.int64, k)
        log_append = np.fromiter((bool(r[0].attributes & fmt.TIMESTAMP_LOG_APPEND) for r in regions), np.bool_, k)
        # Kafka's rule: every record of a LogAppendTime batch has the broker's time (maxTimestamp).
        first_ts = np.fromiter(
            (
                r[0].max_timestamp if r[0].attributes & fmt.TIMESTAMP_LOG_APPEND else r[0].first_timestamp
                for r in regions
            ),
            np.int64,
            k,
        )
        lo = np.maximum(start - bases, 0)
        hi = end - bases
        total = int(counts.sum())
        off_delta = np.empty(total, np.int64)
        ts_delta = np.empty(total, np.int64)
        region = np.empty(total, np.int64)
        key_pos = np.empty(total, np.int64)
        key_len = np.empty(total, np.int64)
        val_pos = np.empty(total, np.int64)
        val_len = np.empty(total, np.int64)
        n = _parse(data, starts, ends, counts, lo, hi, off_delta, ts_delta, region, key_pos, key_len, val_pos, val_len)
        if n < 0:
            h = regions[-1 - n][0]
            raise RecordFormatError(f"batch at offset {h.base_offset}: a record runs past the batch's end")
        region = region[:n]
        offsets = bases[region] + off_delta[:n]
        ts = first_ts[region] + np.where(log_append[region], 0, ts_delta[:n])
        types = log_append[region].astype(np.int32)
        # Keys and values are copied once, into the Arrow batch's own buffers, when it is taken.
        keys = (data, key_pos[:n], key_len[:n])
        values = (data, val_pos[:n], val_len[:n])
        self._parts.append((offsets, ts, types, keys, values))
        self.n += n

    def take(self) -> pa.RecordBatch | None:
        """What was added so far, as one Arrow batch (None if nothing)."""
        if not self.n:
            return None
        parts, self._parts, n, self.n = self._parts, [], self.n, 0
        offsets = np.concatenate([p[0] for p in parts])
        ts = np.concatenate([p[1] for p in parts])
        types = np.concatenate([p[2] for p in parts])
        keys, values = _binary_pair([p[3] for p in parts], [p[4] for p in parts])
        cols = [
            keys,
            values,
            pa.repeat(pa.scalar(self.topic, pa.string()), n),
            pa.repeat(pa.scalar(self.partition, pa.int32()), n),
            pa.array(offsets),
            pa.array(ts * 1000, _TS),  # Spark's timestamps are microseconds
            pa.array(types),
        ]
        return pa.RecordBatch.from_arrays(cols, schema=self.schema)


def _as_spans(items: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Python bytes (or None) as (buffer, positions, lengths), the form _binary gathers from."""
    lens = np.fromiter((-1 if b is None else len(b) for b in items), np.int64, len(items))
    data = np.frombuffer(b"".join(b for b in items if b is not None) or b"\0", np.uint8)
    pos = np.zeros(len(items), np.int64)
    np.cumsum(np.maximum(lens, 0)[:-1], out=pos[1:])
    return data, pos, lens


def _binary_pair(key_spans: list, value_spans: list) -> tuple[pa.Array, pa.Array]:
    """The key and value columns from (buffer, positions, lengths) spans (length -1: null), each copied once
    into its column's two Arrow buffers."""
    n = sum(len(pos) for _, pos, _ in key_spans)
    outs = []
    for spans in (key_spans, value_spans):
        size = sum(int(np.maximum(lens, 0).sum()) for _, _, lens in spans)
        if size > 2**31 - 1:
            raise RecordFormatError("more than 2 GiB of keys or values in one Arrow batch")
        outs.append((np.empty(size, np.uint8), np.zeros(n + 1, np.int64)))
    (kout, koffs), (vout, voffs) = outs
    at = ko = vo = 0
    for (kbuf, kpos, klen), (vbuf, vpos, vlen) in zip(key_spans, value_spans):
        m = len(kpos)
        ko, vo = _gather(
            kbuf, kpos, klen, kout, koffs[at : at + m + 1], vbuf, vpos, vlen, vout, voffs[at : at + m + 1], ko, vo
        )
        at += m
    cols = []
    for spans, (out, offs) in zip((key_spans, value_spans), outs):
        nulls = np.concatenate([lens < 0 for _, _, lens in spans])
        validity = pa.py_buffer(np.packbits(~nulls, bitorder="little")) if nulls.any() else None
        buffers = [validity, pa.py_buffer(offs.astype(np.int32)), pa.py_buffer(out)]
        cols.append(pa.Array.from_buffers(pa.binary(), n, buffers, null_count=int(nulls.sum())))
    return cols[0], cols[1]


def columnar_batches(
    topic: str,
    partition: int,
    chunks: Iterable[tuple[bytes, list[tuple[fmt.BatchHeader, int]]]],
    start: int,
    end: int,
    schema: pa.Schema,
    rows: int,
) -> Iterator[pa.RecordBatch]:
    """Arrow batches of about `rows` rows from (buffer, [(header, position), ...]) chunks of whole, valid v2
    batches (segments.iter_raw_batches, or fetched data), records with offsets in [start, end)."""
    b = ColumnarBuilder(topic, partition, schema, rows)
    for buf, batches in chunks:
        b.add(buf, batches, start, end)
        if b.n >= rows:
            out = b.take()
            if out is not None:
                yield out
    out = b.take()
    if out is not None:
        yield out
