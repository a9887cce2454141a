"""The `kafkalite` source's streaming side: `spark.readStream.format("kafkalite")`, Spark's Kafka source options.

    spark.readStream.format("kafkalite").option("kafka.bootstrap.servers", "host:9092")
        .option("subscribe", "tweets").option("startingOffsets", "earliest").load()

PySpark's DataSourceStreamReader: Spark keeps each micro-batch's end offsets (`{"topic": {"0": 23}}`, the
Kafka source's JSON) in the query's checkpoint and hands them back as the next start, so a query restarted
from its checkpoint neither skips nor repeats a record. End offsets are high watermarks: only committed
records are read. Topics and partitions are listed again at every trigger, so a pattern picks up a new
topic and a topic's new partitions are read from their start. Data loss (a deleted topic, offsets deleted
by retention before they were read) follows failOnDataLoss. Tasks read through the broker protocol
(pipeline/remote.py), so executors can run anywhere.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from net.errors import KafkaLiteError
from pipeline import options as opt
from pipeline.remote import EARLIEST, LATEST, BrokerView, OffsetRange, read_range, split_ranges
from pipeline.segments import LogReadError

if TYPE_CHECKING:
    import pyarrow as pa

TP = tuple[str, int]


def to_json(offsets: Mapping[TP, int]) -> dict:
    """{(topic, partition): offset} -> Spark's Kafka offsets JSON {"topic": {"0": offset}}."""
    out: dict[str, dict[str, int]] = {}
    for (t, p), off in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = int(off)
    return out


def from_json(obj: Mapping) -> dict[TP, int]:
    return {(t, int(p)): int(off) for t, parts in (obj or {}).items() for p, off in parts.items()}


def rate_limit(start: Mapping[TP, int], latest: Mapping[TP, int], max_rows: int) -> dict[TP, int]:
    """End offsets that read at most `max_rows` records in all, shared in proportion to each partition's backlog
    (Spark's Kafka source does the same with maxOffsetsPerTrigger)."""
    backlog = {tp: max(0, latest[tp] - start.get(tp, latest[tp])) for tp in latest}
    total = sum(backlog.values())
    if total <= max_rows:
        return dict(latest)
    out = {}
    for tp, off in latest.items():
        begin = start.get(tp, off)
        out[tp] = min(off, begin + backlog[tp] * max_rows // total)
    if sum(out[tp] - start.get(tp, out[tp]) for tp in out) == 0:  # rounding gave nothing: move the biggest by one
        tp = max(backlog, key=backlog.__getitem__)
        out[tp] += 1
    return out


def max_rows(limit: ReadLimit) -> int | None:
    """The record cap of the ReadLimit Spark hands to latestOffset: None for no cap.

    Spark passes back the limit getDefaultReadLimit gave (ReadMaxRows for maxOffsetsPerTrigger), or
    ReadAllAvailable (Trigger.Once). The limits are dataclasses whose fields are snake_case
    (`max_rows`) in every PySpark the source supports (4.2, 4.3); their docstrings' `maxRows` is wrong."""
    if isinstance(limit, ReadAllAvailable):
        return None
    if isinstance(limit, ReadMaxRows):
        return int(limit.max_rows)
    # ReadMinRows, ReadMaxBytes, ReadMaxFiles: never asked for (the source has no option that gives them).
    raise LogReadError(f"the kafkalite source does not support the read limit {limit!r}")


class KafkaLiteStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = opt.normalize(options)
        self.spec = opt.stream_spec(self.options)
        self.include_headers = self.spec.include_headers
        self._view: BrokerView | None = None
        # Trigger.AvailableNow: the ends of the partitions when the query started, which no micro-batch passes
        self._target: dict[TP, int] | None = None

    def __getstate__(self) -> dict:
        # Spark pickles the reader to its tasks: the driver's broker connections stay behind.
        state = dict(self.__dict__)
        state["_view"] = None
        return state

    @property
    def view(self) -> BrokerView:
        if self._view is None:
            try:
                self._view = BrokerView(self.options)
            except KafkaLiteError as e:
                raise LogReadError(
                    f"connecting to {self.options.get('kafka.bootstrap.servers')}: {e.code.name}: {e}"
                ) from None
        return self._view

    def _partitions(self) -> list[TP]:
        """The partitions the query reads now (listed again each trigger: new topics and partitions appear)."""
        available = self.view.available()
        chosen = opt.select(self.options, available, self.view.bootstrap, {}, on_disk=False, strict=False)
        return [(t, p) for t in sorted(chosen) for p in chosen[t]]

    def initialOffset(self) -> dict:
        tps = self._partitions()
        spec = self.spec
        if spec.starting in ("earliest", "latest"):
            return to_json(self.view.offsets(tps, EARLIEST if spec.starting == "earliest" else LATEST))
        if spec.starting == "timestamp":
            found = self.view.offsets(tps, spec.starting_timestamp or 0)
            missing = [tp for tp, off in found.items() if off < 0]
            if missing and spec.timestamp_strategy == "error":
                t, p = missing[0]
                raise LogReadError(
                    f"{t}-{p} has no record at or after startingTimestamp {spec.starting_timestamp}; "
                    f"set startingOffsetsByTimestampStrategy=latest to start at its end"
                )
            latest = self.view.offsets(missing, LATEST)
            return to_json({tp: latest.get(tp, off) for tp, off in found.items()})
        given = spec.starting_offsets
        unnamed = [(t, p) for t, p in tps if p not in given.get(t, {})]
        if unnamed:
            raise LogReadError(
                f"startingOffsets must give every partition read; {unnamed[0][0]}-{unnamed[0][1]} is missing "
                f"(-2 for earliest, -1 for latest)"
            )
        asked = {(t, p): given[t][p] for t, p in tps}
        resolved = {}
        for which in (EARLIEST, LATEST):
            named = [tp for tp, off in asked.items() if off == which]
            resolved.update(self.view.offsets(named, which))
        return to_json({tp: resolved.get(tp, off) for tp, off in asked.items()})

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.spec.max_offsets_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow, as Spark's Kafka source: what is there now is read, in micro-batches of at most
        maxOffsetsPerTrigger records, and nothing that comes later; then the query ends."""
        self._target = self.view.offsets(self._partitions(), LATEST)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        tps = self._partitions()
        latest = self.view.offsets(tps, LATEST)
        begin = from_json(start)
        new = [tp for tp in tps if tp not in begin]
        begin.update(self.view.offsets(new, EARLIEST))  # new partitions are read from their start
        if self._target is not None:  # a partition that appeared since the query started is not read
            target = self._target
            latest = {tp: min(off, max(target.get(tp, begin[tp]), begin[tp])) for tp, off in latest.items()}
        cap = max_rows(limit)
        if cap is not None:
            latest = rate_limit(begin, latest, cap)
        return to_json(latest)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, stop = from_json(start), from_json(end)
        fail = self.spec.fail_on_data_loss
        dropped = [tp for tp in begin if tp not in stop]
        gone = [tp for tp in dropped if tp not in set(self._partitions())] if dropped else []
        if gone and fail:
            raise LogReadError(
                f"{gone[0][0]}-{gone[0][1]} was deleted while the query read it (offsets after {begin[gone[0]]} may be "
                f"lost); set failOnDataLoss=false to go on without it"
            )
        log_start = self.view.offsets(list(stop), EARLIEST) if stop else {}
        ranges = []
        for tp, e in stop.items():
            s = begin.get(tp, log_start[tp])
            if s < log_start[tp]:
                if fail:
                    raise LogReadError(
                        f"{tp[0]}-{tp[1]}: offsets {s} to {log_start[tp] - 1} were deleted (retention) before "
                        f"the query read them; set failOnDataLoss=false to skip them"
                    )
                s = log_start[tp]
            if e < s:
                if fail:
                    raise LogReadError(
                        f"{tp[0]}-{tp[1]}: its offsets went back from {s} to {e} (was the topic recreated?); "
                        f"set failOnDataLoss=false to go on from there"
                    )
                continue
            ranges.append(OffsetRange(tp[0], tp[1], s, e))
        split = split_ranges(ranges, self.spec.min_partitions, None)
        return [InputPartition(r) for r in split]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from pipeline.arrow_reader import arrow_schema, raw_arrow_batches  # in the task only (datasource.py's read)

        r = partition.value
        chunks = read_range(r, self.options, self.spec.fail_on_data_loss, prefer_local=False)
        schema = arrow_schema(self.include_headers)
        return raw_arrow_batches(r.topic, r.partition, chunks, r.start, r.end, self.include_headers, schema)

    def commit(self, end: dict) -> None:
        """Spark's checkpoint holds the offsets; nothing is committed to a group (as Spark's Kafka source)."""

    def stop(self) -> None:
        if self._view is not None:
            self._view.close()
            self._view = None
