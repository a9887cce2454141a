"""Read partition logs straight from broker data directories (docs/FORMAT.md §1, §2, §4).

Pure functions and plain data, no Spark and no pyarrow, so they are unit-testable and usable by any
batch reader. The batch format itself is `net/batch.py`'s; checkpoint files are parsed by
`broker/log/checkpoint.py`; directory names by `broker/log/manager.py` (all used read-only).

Planning (the Spark driver) and reading (a Spark task) are split on purpose:

- `find_replicas` lists every replica of every partition in the given data directories and
  snapshots each segment's size, so a live broker appending meanwhile cannot change what is read;
- `summarize` finds the offsets a replica can serve: its log start, its valid log end and its
  committed offset (the high watermark);
- `plan_slices` turns one replica and an offset range into `Slice`s (one per segment, or per byte
  range of a big segment), each a self-contained task description;
- `read_slice` reads one slice: whole, CRC-valid batches only, offsets in the slice's range only.
- `read_committed_view` (`kafka.isolation.level=read_committed`): the last stable offset of a replica, from its
  producer-state snapshot and the batch headers after it, and its aborted transactions, from its `.txnindex`
  files (docs/FORMAT.md §11); a slice planned with them skips the aborted transactions' batches.

The committed offset of a replica is, in order of preference:

1. on a single-broker data directory (its metadata log names one voter), the valid log end, since
   there the high watermark equals the log end (FORMAT.md §4), and the checkpoint may trail it;
2. its line in `<data-dir>/replication-offset-checkpoint` (Kafka's file name and format, written by
   the broker every `replica.high.watermark.checkpoint.interval.ms` and at clean shutdown), capped at
   the replica's valid log end;
3. otherwise the valid log end of the most up-to-date replica (highest leader epoch, then longest
   log), which may include records not committed yet: flagged as `committed_source="log-end"`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import msgpack

from broker.log.checkpoint import CorruptCheckpointError, read_checkpoint
from broker.log.index import CorruptIndexError
from broker.log.manager import DELETE_SUFFIX, HW_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, parse_log_dir_name
from broker.log.segment import iter_headers
from broker.log.txn_index import TXN_INDEX_SUFFIX, decode_entries
from broker.metadata.image import MetadataImage
from broker.replica.producer_state import ProducerStateManager
from net import batch as fmt

SEGMENT_RE = re.compile(r"^(\d{20})\.log$")
METADATA_TOPIC = "__cluster_metadata"
CLUSTER_STATE = "cluster.json"  # a kl-cluster root: its broker-N subdirectories are the data dirs

# A slice of one segment is read by one task; bigger segments are cut at batch boundaries so that
# one task never holds more than this (Spark's own file sources split at 128 MiB too).
DEFAULT_MAX_SLICE_BYTES = 128 * 1024 * 1024
_READ_CHUNK = 4 * 1024 * 1024

COMMITTED_CHECKPOINT = HW_CHECKPOINT
COMMITTED_SINGLE_BROKER = "log-end (single broker)"
COMMITTED_LOG_END = "log-end"


class LogReadError(ValueError):
    """Bad input: a missing directory, an unknown topic, an impossible offset range."""


class CorruptBatchError(LogReadError):
    """A batch that must be valid is not. Names the file and the byte position."""

    def __init__(self, path: str, position: int, reason: str) -> None:
        super().__init__(f"corrupt batch in {path} at position {position}: {reason}")
        self.path = path
        self.position = position


# --- discovery ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Segment:
    path: str
    base_offset: int
    size: int  # snapshot taken at planning: never read past it
    inode: int


@dataclass
class Replica:
    """One replica of one partition: its directory and segments as they were when listed."""

    data_dir: str
    topic: str
    partition: int
    segments: list[Segment]
    log_start_checkpoint: int | None
    hw_checkpoint: int | None
    single_broker: bool

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


def expand_paths(spec: str | Iterable[str]) -> list[Path]:
    """Data directories from a comma-separated list; a kl-cluster root stands for its broker-N dirs."""
    items = [s.strip() for s in spec.split(",")] if isinstance(spec, str) else [str(s).strip() for s in spec]
    items = [s for s in items if s]
    if not items:
        raise LogReadError("option 'path' is empty: give one or more broker data directories, comma-separated")
    out: list[Path] = []
    for item in items:
        p = Path(item).expanduser()
        if not p.is_dir():
            raise LogReadError(f"data directory {item} does not exist")
        if (p / CLUSTER_STATE).is_file():
            subs = sorted(d for d in p.iterdir() if d.is_dir() and d.name.startswith("broker-"))
            out.extend(subs)
            continue
        out.append(p)
    seen: set[str] = set()
    unique = []
    for p in out:
        key = os.path.realpath(p)
        if key not in seen:
            seen.add(key)
            unique.append(p)
    return unique


def list_segments(part_dir: Path) -> list[Segment]:
    """The `.log` segments of one partition directory, ordered by base offset, sizes snapshotted."""
    segs = []
    for entry in os.scandir(part_dir):
        m = SEGMENT_RE.match(entry.name)
        if m is None:
            continue  # indexes, checkpoints, and crash leftovers (.deleted, .cleaned, .swap, .tmp)
        try:
            st = entry.stat()
        except FileNotFoundError:
            continue  # deleted by retention while we listed
        segs.append(Segment(entry.path, int(m.group(1)), st.st_size, st.st_ino))
    segs.sort(key=lambda s: s.base_offset)
    return segs


def _checkpoint(path: Path) -> dict[tuple[str, int], int]:
    try:
        return read_checkpoint(path)
    except CorruptCheckpointError as e:
        raise LogReadError(str(e)) from None


def is_single_broker(data_dir: Path) -> bool:
    """True if this data dir's metadata log says the quorum had one voter (then HW = log end)."""
    seg = data_dir / f"{METADATA_TOPIC}-0" / f"{0:020d}.log"
    try:
        with open(seg, "rb") as f:
            head = f.read(64 * 1024)
    except OSError:
        return False
    try:
        for pos, h in fmt.iter_batches(head, validate_crc=True):
            for rec in fmt.records_of(head, pos, h):
                value = msgpack.unpackb(rec[3], raw=False)
                if isinstance(value, dict) and value.get("type") == "leader_change":
                    return len(value.get("voters") or ()) == 1
    except (fmt.InvalidBatch, ValueError, msgpack.UnpackException):
        return False
    return False


def find_replicas(data_dirs: list[Path]) -> dict[tuple[str, int], list[Replica]]:
    """Every partition replica in the data dirs, keyed by (topic, partition)."""
    found: dict[tuple[str, int], list[Replica]] = {}
    for d in data_dirs:
        start = _checkpoint(d / LOG_START_OFFSET_CHECKPOINT)
        hw = _checkpoint(d / HW_CHECKPOINT)
        single = is_single_broker(d)
        for entry in sorted(os.scandir(d), key=lambda e: e.name):
            if not entry.is_dir() or entry.name.endswith(DELETE_SUFFIX):
                continue
            tp = parse_log_dir_name(entry.name)
            if tp is None:
                continue
            found.setdefault(tp, []).append(
                Replica(str(d), tp[0], tp[1], list_segments(Path(entry.path)), start.get(tp), hw.get(tp), single)
            )
    return found


def metadata_partition_counts(data_dirs: list[Path]) -> dict[str, int]:
    """Topic -> partition count from the longest metadata log among the data dirs ({} if none).

    Lets a reader tell "partition 2 has no replica in these directories" from "there is no
    partition 2". Replays the valid prefix of the metadata log (FORMAT.md §5) into a `MetadataImage`,
    as a broker does at startup."""
    best: dict[str, int] = {}
    best_end = -1
    for d in data_dirs:
        part = d / f"{METADATA_TOPIC}-0"
        if not part.is_dir():
            continue
        image = MetadataImage()
        end = 0
        try:
            for seg in list_segments(part):
                with open(seg.path, "rb") as f:
                    data = f.read(seg.size)
                for pos, h in fmt.iter_batches(data, validate_crc=True):
                    end = h.next_offset
                    for rec in fmt.records_of(data, pos, h):
                        value = msgpack.unpackb(rec[3], raw=False)
                        if isinstance(value, dict):
                            image.apply(h.base_offset + rec[0], value)
        except (fmt.InvalidBatch, ValueError, KeyError, TypeError, msgpack.UnpackException, OSError):
            pass  # keep the valid prefix, as the broker's recovery would
        if end > best_end:
            best_end, best = end, {name: len(t.partitions) for name, t in image.topics.items()}
    return best


# --- what a replica can serve ------------------------------------------------------------------


@dataclass
class ReplicaSummary:
    replica: Replica
    log_start: int
    log_end: int  # after the last whole, valid batch
    last_epoch: int  # leader epoch of the last valid batch, -1 if empty
    committed: int  # offsets below this are committed (see the module docstring)
    committed_source: str


def _whole_batches(fd: int, end: int) -> Iterator[tuple[int, fmt.BatchHeader]]:
    """(position, header) of each whole, well-framed batch in [0, end), headers only; stops quietly at a
    torn tail or garbage (the task reading that part reports or tolerates it)."""
    for pos, h in iter_headers(fd, 0, end):
        if pos + h.size > end or h.magic not in fmt.MAGICS:
            return
        yield pos, h


def _scan_end(seg: Segment, validate_crc: bool) -> tuple[int, int, int, int]:
    """(valid end position, next offset, last epoch, batches) of a segment, stopping quietly at a bad tail."""
    next_offset, epoch, n, valid_end = seg.base_offset, -1, 0, 0
    try:
        fd = os.open(seg.path, os.O_RDONLY)
    except FileNotFoundError:
        return 0, seg.base_offset, -1, 0
    try:
        for pos, h in _whole_batches(fd, seg.size):
            if h.base_offset < next_offset:
                break
            if validate_crc:
                try:
                    fmt.validate(os.pread(fd, h.size, pos))
                except fmt.InvalidBatch:
                    break
            next_offset, epoch, n, valid_end = h.next_offset, h.leader_epoch, n + 1, pos + h.size
    finally:
        os.close(fd)
    return valid_end, next_offset, epoch, n


def summarize(replica: Replica) -> ReplicaSummary:
    """Log start, valid log end and committed offset of one replica, reading only its newest segments."""
    segs = replica.segments
    first_base = segs[0].base_offset if segs else 0
    log_start = max(first_base, replica.log_start_checkpoint or 0)
    # Without a high watermark on disk the end must exclude a CRC-invalid tail; with one, the
    # tasks check CRCs below it anyway, so headers are enough.
    need_crc = replica.hw_checkpoint is None or replica.single_broker
    if segs:
        # A newest segment without a valid batch (just rolled, or torn) ends the log at its base (FORMAT.md §4).
        _, log_end, epoch, n = _scan_end(segs[-1], need_crc)
        if n == 0:
            epoch = _last_epoch_before(segs)
    else:
        log_end, epoch = log_start, -1
    if replica.single_broker:
        # Fresher than the checkpoint, which a live broker rewrites only every few seconds.
        committed, source = log_end, COMMITTED_SINGLE_BROKER
    elif replica.hw_checkpoint is not None:
        committed, source = min(replica.hw_checkpoint, log_end), COMMITTED_CHECKPOINT
    else:
        committed, source = log_end, COMMITTED_LOG_END
    return ReplicaSummary(replica, log_start, log_end, epoch, max(committed, log_start), source)


def _last_epoch_before(segs: list[Segment]) -> int:
    for seg in reversed(segs[:-1]):
        _, _, epoch, n = _scan_end(seg, False)
        if n:
            return epoch
    return -1


def choose_replica(replicas: list[Replica]) -> ReplicaSummary:
    """The replica to read a partition from: the highest committed offset.

    Replicas with a high watermark checkpoint beat those without; among the latter, the most
    up-to-date log wins (highest last leader epoch, then longest), as a leader election would pick."""
    summaries = [summarize(r) for r in replicas]

    def rank(s: ReplicaSummary) -> tuple:
        if s.committed_source == COMMITTED_CHECKPOINT:
            return (1, s.committed, s.last_epoch, s.log_end)
        return (0, s.last_epoch, s.log_end, 0)

    return max(summaries, key=rank)


# --- planning ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Slice:
    """What one task reads: offsets [start_offset, end_offset) of one segment file, bytes [start_pos, end_pos)."""

    topic: str
    partition: int
    path: str
    start_pos: int
    end_pos: int
    start_offset: int
    end_offset: int
    # A rolled segment read through its end: every byte up to end_pos must be a valid batch.
    read_to_end: bool
    inode: int = 0
    # read_committed: (producer id, first offset, abort marker offset) of the aborted transactions overlapping
    # the slice; their batches are skipped.
    aborted: tuple[tuple[int, int, int], ...] = ()

    @property
    def size(self) -> int:
        return self.end_pos - self.start_pos


def plan_slices(
    summary: ReplicaSummary,
    start_offset: int,
    end_offset: int,
    max_slice_bytes: int = DEFAULT_MAX_SLICE_BYTES,
    max_slice_records: int | None = None,
    aborted: tuple[tuple[int, int, int], ...] = (),
) -> list[Slice]:
    """Slices covering offsets [start_offset, end_offset) of the chosen replica, in offset order; each carries
    the `aborted` transactions that overlap it (read_committed)."""
    slices = _plan_slices(summary, start_offset, end_offset, max_slice_bytes, max_slice_records)
    if not aborted:
        return slices
    return [
        replace(sl, aborted=tuple(a for a in aborted if a[2] >= sl.start_offset and a[1] < sl.end_offset))
        for sl in slices
    ]


def _plan_slices(
    summary: ReplicaSummary, start_offset: int, end_offset: int, max_slice_bytes: int, max_slice_records: int | None
) -> list[Slice]:
    rep = summary.replica
    start_offset = max(start_offset, summary.log_start)
    end_offset = min(end_offset, summary.committed)
    if start_offset >= end_offset:
        return []
    segs = rep.segments
    out: list[Slice] = []
    for i, seg in enumerate(segs):
        next_base = segs[i + 1].base_offset if i + 1 < len(segs) else None
        if next_base is not None and next_base <= start_offset:
            continue
        if seg.base_offset >= end_offset:
            break
        lo = max(start_offset, seg.base_offset)
        hi = end_offset if next_base is None else min(end_offset, next_base)
        to_end = next_base is not None and end_offset >= next_base
        if seg.size <= max_slice_bytes and max_slice_records is None:
            out.append(Slice(rep.topic, rep.partition, seg.path, 0, seg.size, lo, hi, to_end, seg.inode))
            continue
        out.extend(_split_segment(rep, seg, lo, hi, to_end, max_slice_bytes, max_slice_records))
    return out


def _split_segment(
    rep: Replica, seg: Segment, lo: int, hi: int, to_end: bool, max_bytes: int, max_records: int | None
) -> list[Slice]:
    """Cut one segment at batch boundaries into slices of at most max_bytes / max_records."""
    cuts: list[tuple[int, int]] = []  # (position, first offset) where a slice starts
    fd = os.open(seg.path, os.O_RDONLY)
    try:
        cur_pos, cur_bytes, cur_records = None, 0, 0
        for pos, h in _whole_batches(fd, seg.size):
            if h.next_offset <= lo:
                continue
            if h.base_offset >= hi:
                break
            if cur_pos is None or cur_bytes + h.size > max_bytes or (max_records and cur_records >= max_records):
                cuts.append((pos, max(lo, h.base_offset)))
                cur_pos, cur_bytes, cur_records = pos, 0, 0
            cur_bytes += h.size
            cur_records += h.record_count
    finally:
        os.close(fd)
    if not cuts:
        return [Slice(rep.topic, rep.partition, seg.path, 0, seg.size, lo, hi, to_end, seg.inode)]
    out = []
    for j, (pos, first) in enumerate(cuts):
        last = j + 1 == len(cuts)
        end_pos = seg.size if last else cuts[j + 1][0]
        end_off = hi if last else cuts[j + 1][1]
        out.append(Slice(rep.topic, rep.partition, seg.path, pos, end_pos, first, end_off, to_end and last, seg.inode))
    return out


# --- reading -------------------------------------------------------------------------------------


class SegmentChangedError(LogReadError):
    """The segment file is gone since planning (retention or compaction deleted it)."""


def read_slice(sl: Slice) -> Iterator[tuple[fmt.BatchHeader, tuple]]:
    """(header, records) of every batch of the slice holding offsets in [start_offset, end_offset).

    Records are `(offset_delta, timestamp_delta, key, value, headers)` tuples, already cut to the
    offset range. A corrupt batch, or a committed offset that is not in the file, raises
    CorruptBatchError naming the file and position; a torn tail past the slice's range is ignored."""
    return records_in(read_slice_raw(sl), sl.start_offset, sl.end_offset)


def records_in(
    chunks: Iterable[tuple[bytes, list[tuple[fmt.BatchHeader, int]]]], start: int, end: int
) -> Iterator[tuple[fmt.BatchHeader, tuple]]:
    """(header, records) of raw (buffer, [(header, position), ...]) chunks, records cut to [start, end): the
    per-record decoding, one tuple per record (headers included)."""
    for buf, batches in chunks:
        for h, off in batches:
            recs = fmt.records_of(buf, off, h)
            if h.base_offset < start or h.next_offset > end:
                lo, hi = start - h.base_offset, end - h.base_offset
                recs = tuple(r for r in recs if lo <= r[0] < hi)
            if recs:
                yield h, recs


def read_slice_raw(sl: Slice) -> Iterator[tuple[bytes, list[tuple[fmt.BatchHeader, int]]]]:
    """The slice's batches undecoded, CRC-checked, as (read buffer, [(header, position in it), ...]): whole
    batches holding offsets in the slice's range (their records still need cutting to it), the same checks
    and errors as read_slice. pipeline/columnar.py decodes them a buffer at a time."""
    pending: list[tuple[fmt.BatchHeader, int]] = []
    pending_buf = b""
    aborted: dict[int, list[tuple[int, int]]] = {}
    for pid, first, last in sl.aborted:
        aborted.setdefault(pid, []).append((first, last))
    for h, buf, off in _slice_batches(sl):
        if buf is not pending_buf and pending:
            yield pending_buf, pending
            pending = []
        pending_buf = buf
        if h.attributes & fmt.CONTROL:  # a transaction marker is no record of the topic's (docs/FORMAT.md §11)
            continue
        if aborted and h.is_transactional and _is_aborted(h, aborted):
            continue  # read_committed: an aborted transaction's batch
        pending.append((h, off))
    if pending:
        yield pending_buf, pending


def _is_aborted(h: fmt.BatchHeader, aborted: dict[int, list[tuple[int, int]]]) -> bool:
    return any(first <= h.base_offset < last for first, last in aborted.get(h.producer_id, ()))


# --- read_committed -------------------------------------------------------------------------------------


def read_committed_view(summary: ReplicaSummary, start: int) -> tuple[int, tuple[tuple[int, int, int], ...]]:
    """What a read_committed reader of the replica may read from `start`: (its last stable offset at its committed
    offset: the first offset of the oldest transaction open there, or that offset; the aborted transactions, as
    (producer id, first offset, marker offset), that overlap [start, that LSO)). Read-only, like everything here:
    the broker's producer-state snapshot (the open transactions at its offset, docs/FORMAT.md §8) and the batch
    headers after it, and the `.txnindex` files (§11)."""
    rep = summary.replica
    part_dir = Path(rep.data_dir) / rep.name
    end = summary.committed
    state, at = ProducerStateManager.load(part_dir, summary.log_start, end, read_only=True)
    for i, seg in enumerate(rep.segments):
        next_base = rep.segments[i + 1].base_offset if i + 1 < len(rep.segments) else None
        if (next_base is not None and next_base <= at) or seg.base_offset >= end:
            continue
        try:
            fd = os.open(seg.path, os.O_RDONLY)
        except FileNotFoundError:
            raise SegmentChangedError(f"segment {seg.path} was deleted while planning; run the query again") from None
        try:
            for _, h in _whole_batches(fd, seg.size):
                if h.base_offset >= end:
                    break
                if h.next_offset > at:
                    state.update(h, h.base_offset)  # a marker (commit or abort) ends its producer's transaction
        finally:
            os.close(fd)
    first_open = state.first_unstable_offset()
    lso = end if first_open is None else max(summary.log_start, min(end, first_open))
    aborted = []
    for seg in rep.segments:
        path = seg.path[: -len(".log")] + TXN_INDEX_SUFFIX
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            continue  # no aborted transaction ends in this segment
        try:
            entries = decode_entries(data, path)
        except CorruptIndexError as e:
            raise LogReadError(f"{e}: read it through the brokers, or restart its broker to rebuild it") from None
        aborted += [(t.producer_id, t.first_offset, t.last_offset) for t in entries if t.last_offset >= start]
    return lso, tuple(a for a in aborted if a[1] < lso)


def _slice_batches(sl: Slice) -> Iterator[tuple[fmt.BatchHeader, bytes, int]]:
    try:
        f = open(sl.path, "rb", buffering=0)
    except FileNotFoundError:
        raise SegmentChangedError(
            f"segment {sl.path} was deleted after the query was planned (retention or compaction); run it again"
        ) from None
    with f:
        end_pos = sl.end_pos
        pos = sl.start_pos
        if sl.inode and os.fstat(f.fileno()).st_ino != sl.inode:
            # Replaced by a compacted copy: same offset range, fewer records, other positions.
            end_pos = os.fstat(f.fileno()).st_size
            pos = 0
        buf, buf_pos = b"", pos
        expected = None
        while pos < end_pos:
            if not sl.read_to_end and expected is not None and expected >= sl.end_offset:
                return  # what follows is past the range (maybe a batch still being written)
            off = pos - buf_pos
            if off + fmt.HEADER_SIZE > len(buf):
                buf, buf_pos, off = _refill(f, pos, end_pos, fmt.HEADER_SIZE), pos, 0
            if len(buf) - off < fmt.HEADER_SIZE:
                raise CorruptBatchError(sl.path, pos, f"{len(buf) - off} trailing bytes, shorter than a batch header")
            h = fmt.parse_header(buf, off)
            if h.batch_length < fmt.HEADER_SIZE - fmt.LOG_OVERHEAD:
                raise CorruptBatchError(sl.path, pos, f"batch length {h.batch_length} is shorter than the header")
            if not sl.read_to_end and h.base_offset >= sl.end_offset:
                return
            if off + h.size > len(buf):
                buf, buf_pos, off = _refill(f, pos, end_pos, h.size), pos, 0
                if len(buf) < h.size:
                    raise CorruptBatchError(
                        sl.path, pos, f"batch of {h.size} bytes runs past the end of the data ({end_pos})"
                    )
            if h.magic not in fmt.MAGICS:
                raise CorruptBatchError(sl.path, pos, f"unknown magic {h.magic}")
            if expected is not None and h.base_offset < expected:
                raise CorruptBatchError(sl.path, pos, f"base offset {h.base_offset} below the expected {expected}")
            if h.base_offset >= sl.end_offset:
                # read_to_end: a rolled segment holds nothing at or past the next segment's base.
                raise CorruptBatchError(sl.path, pos, f"offset {h.base_offset} belongs to the next segment")
            expected = h.next_offset
            if h.next_offset > sl.start_offset:
                try:
                    fmt.validate(buf, off, off + h.size)
                except fmt.InvalidBatch as e:
                    raise CorruptBatchError(sl.path, pos, str(e)) from None
                yield h, buf, off
            pos += h.size
        if expected is not None and expected < sl.end_offset and not sl.read_to_end:
            # The planner promised committed offsets up to end_offset: they must be here.
            raise CorruptBatchError(
                sl.path, pos, f"the file ends at offset {expected}, but offsets up to {sl.end_offset} are committed"
            )


def _refill(f, pos: int, end_pos: int, need: int) -> bytes:  # type: ignore[no-untyped-def]
    f.seek(pos)
    return f.read(min(max(need, _READ_CHUNK), end_pos - pos))
