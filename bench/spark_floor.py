"""Spark's own cost of a Python data source, without our decoding: a source that serves Arrow
record batches already built (by pipeline.arrow_reader, from the same segment files) and saved
as memory-mapped Arrow IPC files. bench/run_spark.py scans it next to `kafkalite` and Parquet,
so the gap between kafkalite and Parquet splits into Spark's Python-source path and our decoding."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from pipeline import options as opt
from pipeline.arrow_reader import arrow_schema, record_batches

NAME = "prebuiltarrow"


def write_ipc(data_dir: Path, topic: str, out: Path) -> tuple[float, int]:
    """Decode every slice of `topic` into out/N.arrow; returns (seconds spent decoding, rows)."""
    out.mkdir(parents=True, exist_ok=True)
    schema = arrow_schema(False)
    decode_s, rows = 0.0, 0
    for i, sl in enumerate(opt.plan_read({"path": str(data_dir), "subscribe": topic}).slices):
        with pa.OSFile(str(out / f"{i:05d}.arrow"), "wb") as f, pa.ipc.new_file(f, schema) as w:
            batches = record_batches(sl, False, schema)
            while True:
                t0 = time.perf_counter()
                rb = next(batches, None)
                decode_s += time.perf_counter() - t0
                if rb is None:
                    break
                rows += rb.num_rows
                w.write_batch(rb)
    return decode_s, rows


class PrebuiltArrowSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return opt.schema_ddl(False)

    def reader(self, schema: StructType) -> DataSourceReader:
        return _Reader(self.options["dir"])


class _Reader(DataSourceReader):
    def __init__(self, directory: str) -> None:
        self.directory = directory

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(str(p)) for p in sorted(Path(self.directory).glob("*.arrow"))]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        reader = pa.ipc.open_file(pa.memory_map(partition.value))
        for i in range(reader.num_record_batches):
            yield reader.get_batch(i)
