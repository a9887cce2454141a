"""The read options, spelled as Spark's Kafka source spells them, and the plan they lead to.

Pure (no Spark): the data source calls `plan_read(options)` on the driver; errors are
`LogReadError`s with one clear sentence each, shown by Spark and by `kl-spark` as they are.

- `path`: broker data directories, comma-separated (a kl-cluster root stands for its broker
  dirs). With several replicas of a partition, the one with the highest committed offset is read.
- `subscribe` / `subscribePattern` / `assign`: exactly one. Topics `a,b`; a regex over whole
  topic names (internal `__*` topics left out); JSON `{"a":[0,1]}`.
- `startingOffsets`: `earliest` (default) or JSON `{"a":{"0":23,"1":-2}}` (-2 = earliest);
  partitions left out start at the earliest. Inclusive.
- `endingOffsets`: `latest` (default: the committed offset) or JSON (-1 = latest); partitions
  left out end at the latest. Exclusive.
- `failOnDataLoss`: `true` (default): starting below the log start (deleted by retention) is an
  error; `false`: start at the log start. Also: a segment deleted between planning and reading.
- `includeHeaders`: `true` adds `headers array<struct<key:string,value:binary>>`.
- `minPartitions`: at least this many Spark partitions (big slices cut at batch boundaries).
- `maxRecordsPerPartition`: cut slices so that none holds more records than this.
- `kafka.isolation.level`: `read_uncommitted` (default) or `read_committed`: up to the last stable offset,
  without the records of aborted transactions (their `.txnindex` files, docs/FORMAT.md §11).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from pipeline import segments as seg
from pipeline.segments import LogReadError

log = logging.getLogger("kafkalite.pipeline")

EARLIEST = -2
LATEST = -1

SCHEMA_FIELDS = [
    ("key", "binary"),
    ("value", "binary"),
    ("topic", "string"),
    ("partition", "int"),
    ("offset", "long"),
    ("timestamp", "timestamp"),
    ("timestampType", "int"),
]
HEADERS_FIELD = ("headers", "array<struct<key:string,value:binary>>")


def schema_ddl(include_headers: bool) -> str:
    """Spark's Kafka source schema, as DDL."""
    fields = SCHEMA_FIELDS + ([HEADERS_FIELD] if include_headers else [])
    return ", ".join(f"{name} {kind}" for name, kind in fields)


def normalize(options: Mapping[str, str]) -> dict[str, str]:
    """Option names are case-insensitive in Spark; make them so for plain dicts too."""
    return {str(k).lower(): v for k, v in options.items()}


def _opt(opts: Mapping[str, str], name: str) -> str | None:
    v = opts.get(name.lower())
    return None if v is None else str(v)


def bool_option(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _opt(opts, name)
    if raw is None:
        return default
    v = raw.strip().lower()
    if v not in ("true", "false"):
        raise LogReadError(f"option {name} must be true or false, got {raw!r}")
    return v == "true"


def read_committed_option(opts: Mapping[str, str]) -> bool:
    """`kafka.isolation.level`, as Kafka's consumer spells it."""
    raw = _opt(opts, "kafka.isolation.level")
    v = (raw or "read_uncommitted").strip().lower()
    if v not in ("read_uncommitted", "read_committed"):
        raise LogReadError(f"option kafka.isolation.level must be read_uncommitted or read_committed, got {raw!r}")
    return v == "read_committed"


def positive_int(opts: Mapping[str, str], name: str) -> int | None:
    raw = _opt(opts, name)
    if raw is None:
        return None
    try:
        v = int(raw.strip())
    except ValueError:
        v = 0
    if v <= 0:
        raise LogReadError(f"option {name} must be a positive integer, got {raw!r}")
    return v


def include_headers(options: Mapping[str, str]) -> bool:
    return bool_option(normalize(options), "includeHeaders", False)


def data_dirs(options: Mapping[str, str]) -> list:
    opts = normalize(options)
    raw = _opt(opts, "path")
    paths = _opt(opts, "paths")  # DataFrameReader.load([a, b]) passes a JSON list
    if raw is None and paths:
        try:
            raw = ",".join(json.loads(paths))
        except (ValueError, TypeError):
            raw = paths
    if raw is None:
        raise LogReadError(
            "option 'path' is required: the broker data directories to read, comma-separated "
            '(.option("path", "/var/lib/kafkalite") or .load(DIR))'
        )
    return seg.expand_paths(raw)


def _parse_offsets_json(name: str, raw: str) -> dict[str, dict[int, int]]:
    example = '{"tweets":{"0":23,"1":-2}}'
    try:
        obj = json.loads(raw)
    except ValueError as e:
        raise LogReadError(f"{name} is neither earliest/latest nor valid JSON ({e}); expected e.g. {example}") from None
    if not isinstance(obj, dict):
        raise LogReadError(f"{name} JSON must be an object of topics, e.g. {example}")
    out: dict[str, dict[int, int]] = {}
    for topic, parts in obj.items():
        if not isinstance(parts, dict):
            raise LogReadError(f"{name}: the value for topic {topic!r} must be an object of partitions, e.g. {example}")
        out[topic] = {}
        for p, off in parts.items():
            if not (isinstance(p, str) and p.strip().lstrip("-").isdigit()) or isinstance(off, bool):
                raise LogReadError(f"{name}: partition {p!r} of topic {topic!r} is not a number")
            if not isinstance(off, int):
                raise LogReadError(f"{name}: offset {off!r} for {topic}-{p} is not an integer")
            if off < EARLIEST:
                raise LogReadError(
                    f"{name}: offset {off} for {topic}-{p} is invalid (use >= 0, -1 latest, -2 earliest)"
                )
            out[topic][int(p)] = off
    return out


def offsets_option(options: Mapping[str, str], name: str, default: int) -> tuple[int, dict[str, dict[int, int]]]:
    """(default for every partition, per-partition overrides) from an offsets option."""
    raw = _opt(options, name)
    if raw is None:
        return default, {}
    v = raw.strip()
    if v.lower() == "earliest":
        chosen, overrides = EARLIEST, {}
    elif v.lower() == "latest":
        chosen, overrides = LATEST, {}
    else:
        chosen, overrides = default, _parse_offsets_json(name, v)
    # Spark's rules for batch queries.
    if name == "startingOffsets" and (chosen == LATEST or any(LATEST in m.values() for m in overrides.values())):
        raise LogReadError("startingOffsets: latest (-1) is not allowed for batch queries; use earliest or offsets")
    if name == "endingOffsets" and (chosen == EARLIEST or any(EARLIEST in m.values() for m in overrides.values())):
        raise LogReadError("endingOffsets: earliest (-2) is not allowed for batch queries; use latest or offsets")
    return chosen, overrides


def selection(options: Mapping[str, str]) -> tuple[str, str]:
    """(which of subscribe / subscribePattern / assign, its value): exactly one is required."""
    given = {k: _opt(options, k) for k in ("subscribe", "subscribePattern", "assign")}
    given = {k: v for k, v in given.items() if v is not None and v.strip()}
    if len(given) != 1:
        raise LogReadError(
            "exactly one of the options subscribe, subscribePattern, assign is required"
            + (f" (got {', '.join(sorted(given))})" if given else "")
        )
    ((how, value),) = given.items()
    return how, value.strip()


def select(
    options: Mapping[str, str],
    available: dict[str, set[int]],
    dirs_text: str,
    expected: dict[str, int],
    on_disk: bool = True,
    strict: bool = True,
) -> dict[str, list[int]]:
    """Topic -> partitions chosen by exactly one of subscribe / subscribePattern / assign, among the `available`
    ones: read from data directories `dirs_text` (`on_disk`), or from the cluster at `dirs_text`. Not `strict`
    (a streaming query): subscribed topics that do not exist yet and a pattern matching nothing are no error,
    the query picks them up when they appear."""

    def no_topic(t: str) -> str:
        if on_disk:
            return f"no {t}-<partition> directory in {dirs_text}"
        return f"no such topic on the cluster at {dirs_text}"

    how, value = selection(options)
    if how == "subscribe":
        topics = [t.strip() for t in value.split(",") if t.strip()]
        unknown = [t for t in topics if t not in available]
        if unknown and strict:
            raise LogReadError(f"unknown topic {unknown[0]!r}: {no_topic(unknown[0])}" + _known(available))
        return {t: _all_partitions(t, available, expected) for t in topics if t in available}
    if how == "subscribePattern":
        try:
            rx = re.compile(value)
        except re.error as e:
            raise LogReadError(f"subscribePattern {value!r} is not a valid regular expression: {e}") from None
        topics = sorted(t for t in available if not t.startswith("__") and rx.fullmatch(t))
        if not topics and strict:
            raise LogReadError(f"subscribePattern {value!r} matches no topic in {dirs_text}" + _known(available))
        return {t: _all_partitions(t, available, expected) for t in topics}
    example = '{"tweets":[0,1]}'
    try:
        obj = json.loads(value)
    except ValueError as e:
        raise LogReadError(f"assign is not valid JSON ({e}); expected e.g. {example}") from None
    if not isinstance(obj, dict) or not all(
        isinstance(ps, list) and all(isinstance(p, int) and not isinstance(p, bool) for p in ps) for ps in obj.values()
    ):
        raise LogReadError(f"assign JSON must map topics to lists of partition numbers, e.g. {example}")
    out = {}
    for topic, parts in obj.items():
        if topic not in available:
            if not strict:
                continue
            raise LogReadError(f"unknown topic {topic!r} in assign: {no_topic(topic)}")
        missing = [p for p in parts if p not in available[topic]]
        if missing and strict:
            raise LogReadError(f"assign: {topic}-{missing[0]} has no replica in {dirs_text}")
        parts = [p for p in parts if p in available[topic]]
        out[topic] = sorted(set(parts))
    return out


def _known(available: dict[str, set[int]]) -> str:
    names = sorted(t for t in available if not t.startswith("__"))
    return f" (topics there: {', '.join(names)})" if names else " (no topics there)"


def _all_partitions(topic: str, available: dict[str, set[int]], expected: dict[str, int]) -> list[int]:
    have = available[topic]
    count = max(expected.get(topic, 0), max(have) + 1)
    missing = [p for p in range(count) if p not in have]
    if missing:
        raise LogReadError(
            f"{topic}-{missing[0]} has no replica in the given data directories: add the data directory "
            f"of a broker that hosts it, or read the other partitions with assign"
        )
    return sorted(have)


def check_offsets_named(chosen: dict[str, list[int]], start_over: dict, end_over: dict) -> None:
    """Offsets JSON may only name partitions that are read."""
    for name, over in (("startingOffsets", start_over), ("endingOffsets", end_over)):
        for topic, parts in over.items():
            if topic not in chosen:
                raise LogReadError(f"{name} names topic {topic!r}, which is not read (subscribe/assign it)")
            bad = [p for p in parts if p not in chosen[topic]]
            if bad:
                raise LogReadError(f"{name} names {topic}-{bad[0]}, which is not read (no such partition)")


def resolve_range(
    topic: str, p: int, asked_start: int, asked_end: int, log_start: int, committed: int, fail_on_loss: bool
) -> tuple[int, int]:
    """[start, end) of a batch read of one partition from the asked offsets (EARLIEST/LATEST or numbers), its log
    start and its committed offset: Spark's rules, the same for segment files and for the broker protocol."""
    start = log_start if asked_start == EARLIEST else asked_start
    end = committed if asked_end == LATEST else min(asked_end, committed)
    if asked_end >= 0 and start > asked_end:
        raise LogReadError(f"startingOffsets {topic}-{p}={start} is after endingOffsets {topic}-{p}={asked_end}")
    if start < log_start:
        if fail_on_loss:
            raise LogReadError(
                f"startingOffsets {topic}-{p}={start} is below the log start offset {log_start} "
                f"(deleted by retention); set failOnDataLoss=false to start at {log_start}"
            )
        start = log_start
    return start, max(start, end)


@dataclass
class PartitionPlan:
    topic: str
    partition: int
    data_dir: str  # the replica read
    log_start: int
    committed: int
    committed_source: str
    start: int  # first offset read
    end: int  # offsets below this are read
    slices: list[seg.Slice] = field(default_factory=list)


@dataclass
class ReadPlan:
    partitions: list[PartitionPlan]
    include_headers: bool
    fail_on_data_loss: bool

    @property
    def slices(self) -> list[seg.Slice]:
        return [s for p in self.partitions for s in p.slices]

    @property
    def spans(self) -> dict[tuple[str, int], tuple[int, int]]:
        return {(p.topic, p.partition): (p.start, p.end) for p in self.partitions}


def pin_offsets(options: Mapping[str, str], spans: Mapping[tuple[str, int], tuple[int, int]]) -> dict[str, str]:
    """The options with startingOffsets / endingOffsets set to a plan's exact [start, end) per partition.

    Spark plans a batch read again for every action of a query (and kl-spark plans once more before Spark starts,
    to print the plan): "latest" means a later high watermark each time, so what was printed, and what each
    action counted, differed (issue 24: planned tweets-0 up to 20,853, counted 22,060). Pinned, every planning
    of the query reads exactly the printed ranges."""
    replaced = ("startingoffsets", "endingoffsets", "subscribe", "subscribepattern", "assign")
    pinned = {k: v for k, v in options.items() if k.lower() not in replaced}
    assign: dict[str, list[int]] = {}
    starts: dict[str, dict[str, int]] = {}
    ends: dict[str, dict[str, int]] = {}
    for (topic, partition), (start, end) in sorted(spans.items()):
        assign.setdefault(topic, []).append(partition)  # a pattern matching a topic created since: not read
        starts.setdefault(topic, {})[str(partition)] = start
        ends.setdefault(topic, {})[str(partition)] = end
    pinned["assign"] = json.dumps(assign)
    pinned["startingOffsets"] = json.dumps(starts)
    pinned["endingOffsets"] = json.dumps(ends)
    return pinned


def plan_read(options: Mapping[str, str], warn: bool = True) -> ReadPlan:
    """Validate the options, pick one replica per partition, and cut the read into slices."""
    opts = normalize(options)
    dirs = data_dirs(opts)
    dirs_text = ", ".join(str(d) for d in dirs)
    headers = bool_option(opts, "includeHeaders", False)
    fail_on_loss = bool_option(opts, "failOnDataLoss", True)
    min_parts = positive_int(opts, "minPartitions")
    max_records = positive_int(opts, "maxRecordsPerPartition")
    start_default, start_over = offsets_option(opts, "startingOffsets", EARLIEST)
    end_default, end_over = offsets_option(opts, "endingOffsets", LATEST)
    read_committed = read_committed_option(opts)

    replicas = seg.find_replicas(dirs)
    if not replicas and not any((d / seg.LOG_START_OFFSET_CHECKPOINT).exists() for d in dirs):
        raise LogReadError(
            f"no Kafka Lite data in {dirs_text}: expected <topic>-<partition> directories (a broker's --data-dir)"
        )
    available: dict[str, set[int]] = {}
    for t, p in replicas:
        available.setdefault(t, set()).add(p)
    chosen = select(opts, available, dirs_text, seg.metadata_partition_counts(dirs))
    check_offsets_named(chosen, start_over, end_over)

    plans: list[tuple[PartitionPlan, seg.ReplicaSummary]] = []
    aborted: dict[tuple[str, int], tuple[tuple[int, int, int], ...]] = {}
    for topic in sorted(chosen):
        for p in chosen[topic]:
            best = seg.choose_replica(replicas[(topic, p)])
            if read_committed:  # readable up to the last stable offset, as a read_committed consumer
                lso, aborted[(topic, p)] = seg.read_committed_view(best, best.log_start)
                best = replace(best, committed=lso)
            if warn and best.committed_source == seg.COMMITTED_LOG_END:
                log.warning(
                    "%s-%d: no %s in %s: reading up to the log end (%d), which may include records not committed yet",
                    topic,
                    p,
                    seg.HW_CHECKPOINT,
                    best.replica.data_dir,
                    best.log_end,
                )
            start, end = resolve_range(
                topic,
                p,
                start_over.get(topic, {}).get(p, start_default),
                end_over.get(topic, {}).get(p, end_default),
                best.log_start,
                best.committed,
                fail_on_loss,
            )
            pp = PartitionPlan(
                topic,
                p,
                best.replica.data_dir,
                best.log_start,
                best.committed,
                best.committed_source,
                start,
                max(start, end),
            )
            plans.append((pp, best))

    max_bytes = seg.DEFAULT_MAX_SLICE_BYTES
    if min_parts:
        total = sum(_range_bytes(pp, best) for pp, best in plans)
        max_bytes = max(1, min(max_bytes, -(-total // min_parts)))
    for pp, best in plans:
        pp.slices = seg.plan_slices(
            best, pp.start, pp.end, max_bytes, max_records, aborted.get((pp.topic, pp.partition), ())
        )
    return ReadPlan([pp for pp, _ in plans], headers, fail_on_loss)


def _range_bytes(pp: PartitionPlan, best: seg.ReplicaSummary) -> int:
    """Bytes of the segments the range touches (an upper bound, good enough to size slices)."""
    segs = best.replica.segments
    total = 0
    for i, s in enumerate(segs):
        nxt = segs[i + 1].base_offset if i + 1 < len(segs) else None
        if (nxt is None or nxt > pp.start) and s.base_offset < pp.end:
            total += s.size
    return total


# --- streaming queries (readStream), read through the broker protocol -------------------------------------


@dataclass(frozen=True)
class StreamSpec:
    """A streaming query's options, checked. `starting` is earliest, latest, offsets (JSON) or timestamp."""

    starting: str
    starting_offsets: dict[str, dict[int, int]]
    starting_timestamp: int | None
    timestamp_strategy: str  # no offset at/after startingTimestamp: error (Spark's default) or latest
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    include_headers: bool
    min_partitions: int | None


def stream_spec(options: Mapping[str, str]) -> StreamSpec:
    """Spark's Kafka source options for a streaming query: startingOffsets defaults to latest there."""
    opts = normalize(options)
    selection(opts)
    if _opt(opts, "endingOffsets") is not None or _opt(opts, "endingTimestamp") is not None:
        raise LogReadError("endingOffsets/endingTimestamp are for batch queries only (spark.read), not readStream")
    raw_ts = _opt(opts, "startingTimestamp")
    raw = _opt(opts, "startingOffsets")
    ts = None
    offsets: dict[str, dict[int, int]] = {}
    if raw_ts is not None:
        if raw is not None:
            raise LogReadError("give startingOffsets or startingTimestamp, not both")
        try:
            ts = int(raw_ts.strip())
        except ValueError:
            ts = -1
        if ts < 0:
            raise LogReadError(f"startingTimestamp must be milliseconds since the epoch, got {raw_ts!r}")
        starting = "timestamp"
    elif raw is None or raw.strip().lower() == "latest":
        starting = "latest"
    elif raw.strip().lower() == "earliest":
        starting = "earliest"
    else:
        starting, offsets = "offsets", _parse_offsets_json("startingOffsets", raw.strip())
    strategy = (_opt(opts, "startingOffsetsByTimestampStrategy") or "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise LogReadError(f"startingOffsetsByTimestampStrategy must be error or latest, got {strategy!r}")
    return StreamSpec(
        starting,
        offsets,
        ts,
        strategy,
        positive_int(opts, "maxOffsetsPerTrigger"),
        bool_option(opts, "failOnDataLoss", True),
        bool_option(opts, "includeHeaders", False),
        positive_int(opts, "minPartitions"),
    )
