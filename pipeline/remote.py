"""Reading through the broker protocol: the `kafkalite` source's streaming reads, and its batch reads of a
partition on a host without a committed copy of it (docs/ARCHITECTURE.md, "Spark").

No Spark here, so it is unit-testable: the driver side lists topics, partitions and offsets (`BrokerView`);
the executor side reads one `OffsetRange` (`read_range`): the local segment files where this host holds a
replica that has committed the whole range (`local_read`), else the same records fetched from the
partition's leader (`fetch_range`) with our consumer's `poll_raw`, whole record batches, decoded by the
same `net/batch.py` as the files. Either way it yields `(header, records)` pairs cut to the range, the
shape `pipeline/arrow_reader.py` turns into Arrow.

Client settings are Spark's Kafka source options with the `kafka.` prefix (`kafka.bootstrap.servers`,
`kafka.security.protocol`, `kafka.sasl.mechanism`, ...), checked by the consumer's config schema.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from client.config import ClientConfigDef, ConsumerConfig
from client.sync import Consumer
from client.topic_partition import TopicPartition
from net import batch as fmt
from net.errors import ErrorCode, KafkaLiteError, OffsetOutOfRangeError, UnknownTopicOrPartitionError
from pipeline import segments as seg
from pipeline.segments import LogReadError

log = logging.getLogger("kafkalite.pipeline")

KAFKA_PREFIX = "kafka."
EARLIEST = -2
LATEST = -1
# Where an executor looks for local replicas when the `path` option is absent: a broker host's data directory
# (deploy/ sets it for the Spark worker it installs next to a broker).
DATA_DIR_ENV = "KAFKALITE_DATA_DIR"
# A range's records must arrive within this long of each other; the leader may be failing over meanwhile.
DEFAULT_FETCH_TIMEOUT_S = 60.0
T = TypeVar("T")


@dataclass(frozen=True)
class OffsetRange:
    """Offsets [start, end) of one partition: what one Spark task reads."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


def bootstrap_servers(options: Mapping[str, str]) -> str | None:
    v = options.get("kafka.bootstrap.servers")
    return str(v).strip() if v is not None and str(v).strip() else None


def client_kwargs(options: Mapping[str, str], family: type[ClientConfigDef] = ConsumerConfig) -> dict:
    """Keyword arguments for our consumer (or producer: `family`) from the `kafka.`-prefixed options, Kafka's
    names after the prefix."""
    props = {k[len(KAFKA_PREFIX) :]: str(v) for k, v in options.items() if k.startswith(KAFKA_PREFIX)}
    props.pop("bootstrap.servers", None)
    for spark_managed in ("group.id", "auto.offset.reset", "enable.auto.commit") if family is ConsumerConfig else ():
        # Spark's Kafka source refuses these: the query, not a group, owns the offsets.
        if props.pop(spark_managed, None) is not None:
            raise LogReadError(
                f"option kafka.{spark_managed} is not supported: the query's checkpoint holds the offsets"
            )
    try:
        return family.kwargs_from_properties(props)
    except ValueError as e:
        raise LogReadError(f"bad kafka.* option: {e}") from None


def open_consumer(options: Mapping[str, str]) -> Consumer:
    bootstrap = bootstrap_servers(options)
    if bootstrap is None:
        raise LogReadError("option kafka.bootstrap.servers is required (host:port[,host:port])")
    return Consumer(bootstrap, auto_offset_reset="none", enable_auto_commit=False, **client_kwargs(options))


class BrokerView:
    """The driver's questions to the cluster: which topics and partitions exist, and their offsets."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.bootstrap = bootstrap_servers(options) or ""
        self.consumer = open_consumer(options)

        # Spark's Kafka source options for these driver-side lookups, with its defaults: a leader failing over
        # answers again after a metadata refresh, so retriable errors are retried.
        self.retries = int(options.get("fetchoffset.numretries", 3))
        self.retry_interval = int(options.get("fetchoffset.retryintervalms", 1000)) / 1000

    def _retrying(self, what: Callable[[], T]) -> T:
        for attempt in range(self.retries + 1):
            try:
                return what()
            except KafkaLiteError as e:
                if not e.retriable or attempt == self.retries:
                    raise
                log.warning("asking the cluster failed (%s); retrying in %.1fs", e, self.retry_interval)
                time.sleep(self.retry_interval)
        raise AssertionError("unreachable")

    def available(self) -> dict[str, set[int]]:
        """Every topic (internal ones left out) and its partitions."""
        found = self._retrying(self.consumer.list_topics)
        return {t: set(ps) for t, ps in found.items() if not t.startswith("__")}

    def offsets(self, tps: list[tuple[str, int]], which: int) -> dict[tuple[str, int], int]:
        """EARLIEST (log start), LATEST (high watermark) or the first offset at/after a timestamp (-1 if none)."""
        if not tps:
            return {}
        try:
            found = self._retrying(lambda: self.consumer.list_offsets([TopicPartition(*tp) for tp in tps], which))
        except KafkaLiteError as e:
            if e.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise
            # A topic deleted since its partitions were listed (a query reading it as it goes): the partitions
            # that still exist are answered, the gone ones left out, for failOnDataLoss to judge (stream.py).
            available = self.available()
            still = [tp for tp in tps if tp[1] in available.get(tp[0], ())]
            if len(still) == len(tps):
                raise
            return self.offsets(still, which)
        return {(tp.topic, tp.partition): off for tp, off in found.items()}

    def close(self) -> None:
        self.consumer.close()


def fetch_range(
    consumer: Consumer, r: OffsetRange, fail_on_data_loss: bool, timeout_s: float = DEFAULT_FETCH_TIMEOUT_S
) -> Iterator[tuple[bytes, list[tuple[fmt.BatchHeader, int]]]]:
    """The range's batches from the partition's leader (whichever broker leads it now), CRC-checked, as
    (fetched data, [(header, position), ...]): whole batches holding offsets of [start, end), their records
    still to be cut to it (segments.read_slice_raw's shape).

    Offsets below the log start (deleted by retention since planning) and a deleted topic follow
    failOnDataLoss: an error naming them, or the records that are left."""
    tp = TopicPartition(r.topic, r.partition)
    consumer.assign([tp])
    consumer.seek(tp, r.start)
    pos = r.start
    last_progress = time.monotonic()
    while pos < r.end:
        try:
            chunks = consumer.poll_raw(500)
        except OffsetOutOfRangeError:
            lost_to = consumer.list_offsets([tp], EARLIEST)[tp]
            if fail_on_data_loss:
                raise LogReadError(
                    f"{r.name}: offsets {pos} to {min(lost_to, r.end) - 1} were deleted (retention) before they were "
                    f"read; set failOnDataLoss=false to skip what is gone"
                ) from None
            log.warning("%s: offsets %d-%d are gone (retention); skipped", r.name, pos, lost_to - 1)
            if lost_to >= r.end:
                return
            consumer.seek(tp, lost_to)
            pos = lost_to
            continue
        if not chunks:
            moved = consumer.position(tp)
            if moved > pos:  # only aborted records and markers were read (read_committed): none to hand out
                pos, last_progress = moved, time.monotonic()
                if pos >= r.end:
                    return
                continue
            if time.monotonic() - last_progress > timeout_s:
                _check_exists(consumer, r, fail_on_data_loss)
                raise LogReadError(
                    f"{r.name}: no records from offset {pos} within {timeout_s:.0f}s (reading to {r.end})"
                )
            if time.monotonic() - last_progress > 5 and not _check_exists(consumer, r, fail_on_data_loss):
                return
            continue
        last_progress = time.monotonic()
        for _, data, _ in chunks:
            batches = []
            for bpos, h in fmt.iter_batches(data, validate_crc=True):
                if h.next_offset <= pos:
                    continue
                if h.base_offset >= r.end:
                    break
                pos = h.next_offset
                if h.attributes & fmt.CONTROL:  # a transaction marker, never a record (as Kafka's consumers)
                    continue
                batches.append((h, bpos))
            if batches:
                yield data, batches
            if pos >= r.end or (batches and batches[-1][0].base_offset >= r.end):
                return


def _check_exists(consumer: Consumer, r: OffsetRange, fail_on_data_loss: bool) -> bool:
    """False if the topic or partition is gone (and failOnDataLoss=false); raises if gone and it is true."""
    try:
        gone = r.partition not in consumer.partitions_for(r.topic)
    except UnknownTopicOrPartitionError:
        gone = True
    if not gone:
        return True
    if fail_on_data_loss:
        raise LogReadError(
            f"{r.name} was deleted before offsets {r.start}-{r.end - 1} were read; "
            f"set failOnDataLoss=false to skip deleted topics"
        )
    log.warning("%s was deleted; its offsets %d-%d are skipped", r.name, r.start, r.end - 1)
    return False


def local_data_dirs(options: Mapping[str, str]) -> list[Path]:
    """This host's broker data directories: the `path` option's that exist here, else $KAFKALITE_DATA_DIR."""
    raw = options.get("path") or os.environ.get(DATA_DIR_ENV) or ""
    found = [p for p in (s.strip() for s in str(raw).split(",")) if p and Path(p).is_dir()]
    return seg.expand_paths(found) if found else []


def local_slices(r: OffsetRange, dirs: list[Path]) -> list[seg.Slice] | None:
    """Slices of a local replica that has committed all of the range (its high-watermark checkpoint, the same
    rule as the file-only reads), or None: then the range is fetched from the leader."""
    if not dirs:
        return None
    replicas = seg.find_replicas(dirs).get((r.topic, r.partition))
    if not replicas:
        return None
    best = seg.choose_replica(replicas)
    if best.committed < r.end or best.log_start > r.start:
        return None
    return seg.plan_slices(best, r.start, r.end, seg.DEFAULT_MAX_SLICE_BYTES, None)


def read_range(
    r: OffsetRange, options: Mapping[str, str], fail_on_data_loss: bool, prefer_local: bool
) -> Iterator[tuple[bytes, list[tuple[fmt.BatchHeader, int]]]]:
    """One task's read, as (buffer, [(header, position), ...]) chunks of whole batches: from local segment
    files when `prefer_local` and a local replica has it all, else over the network. Logs which (Spark's
    executor log), so a multi-host run shows where each range came from."""
    if r.start >= r.end:
        return
    dirs = local_data_dirs(options) if prefer_local else []
    slices = local_slices(r, dirs)
    if slices is not None:
        where = Path(slices[0].path).parent.parent if slices else dirs
        log.warning("kafkalite read %s [%d, %d) from the local replica in %s", r.name, r.start, r.end, where)
        for sl in slices:
            yield from seg.read_slice_raw(sl)
        return
    log.warning(
        "kafkalite read %s [%d, %d) from the leader (broker protocol); local data dirs: %s",
        r.name,
        r.start,
        r.end,
        ",".join(map(str, dirs)) or "none",
    )
    consumer = open_consumer(options)
    try:
        yield from fetch_range(consumer, r, fail_on_data_loss)
    except KafkaLiteError as e:
        raise LogReadError(f"{r.name}: {e}") from None
    finally:
        consumer.close()


# --- planning (the driver) -------------------------------------------------------------------------------


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None, max_records: int | None) -> list[OffsetRange]:
    """Cut ranges so there are at least `min_partitions` tasks and none reads more than `max_records` offsets."""
    limit = max_records or 0
    total = sum(r.end - r.start for r in ranges)
    if min_partitions and total:
        per = -(-total // min_partitions)
        limit = min(limit, per) if limit else per
    if not limit:
        return [r for r in ranges if r.end > r.start]
    out = []
    for r in ranges:
        for lo in range(r.start, r.end, limit):
            out.append(OffsetRange(r.topic, r.partition, lo, min(lo + limit, r.end)))
    return out


@dataclass
class RemotePlan:
    ranges: list[OffsetRange]
    include_headers: bool
    fail_on_data_loss: bool
    # [start, end) of every partition read, empty ones too (ranges leaves them out): what opt.pin_offsets pins
    spans: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)


def plan_remote_read(options: Mapping[str, str]) -> RemotePlan:
    """A batch read planned from the cluster (`kafka.bootstrap.servers`): each chosen partition from its log
    start (or startingOffsets) to its high watermark when planned (or endingOffsets), Spark's rules."""
    from pipeline import options as opt

    opts = opt.normalize(options)
    headers = opt.include_headers(opts)
    fail_on_loss = opt.bool_option(opts, "failOnDataLoss", True)
    start_default, start_over = opt.offsets_option(opts, "startingOffsets", opt.EARLIEST)
    end_default, end_over = opt.offsets_option(opts, "endingOffsets", opt.LATEST)
    try:
        view = BrokerView(opts)
    except KafkaLiteError as e:
        raise LogReadError(f"connecting to {bootstrap_servers(opts)}: {e.code.name}: {e}") from None
    try:
        available = view.available()
        chosen = opt.select(opts, available, view.bootstrap, {t: len(ps) for t, ps in available.items()}, on_disk=False)
        opt.check_offsets_named(chosen, start_over, end_over)
        tps = [(t, p) for t in sorted(chosen) for p in chosen[t]]
        log_start = view.offsets(tps, EARLIEST)
        committed = view.offsets(tps, LATEST)
    except KafkaLiteError as e:
        raise LogReadError(f"reading the cluster at {view.bootstrap}: {e.code.name}: {e}") from None
    finally:
        view.close()
    ranges = []
    for t, p in tps:
        start, end = opt.resolve_range(
            t,
            p,
            start_over.get(t, {}).get(p, start_default),
            end_over.get(t, {}).get(p, end_default),
            log_start[(t, p)],
            committed[(t, p)],
            fail_on_loss,
        )
        ranges.append(OffsetRange(t, p, start, end))
    split = split_ranges(
        ranges, opt.positive_int(opts, "minPartitions"), opt.positive_int(opts, "maxRecordsPerPartition")
    )
    return RemotePlan(split, headers, fail_on_loss, {(r.topic, r.partition): (r.start, r.end) for r in ranges})
