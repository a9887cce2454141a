"""The `kafkalite` sink with its driver-side commit timed, for bench/run_spark_sink.py: the same writers, but
`commit` (where exactlyOnce ends the tasks' transactions) appends its duration to the file named by the
`benchCommitLog` option, one JSON line per commit. Spark calls `commit` on the driver side, in a Python worker,
so a file is the simplest way back to the benchmark's process."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter
from pyspark.sql.types import StructType

from pipeline import options as opt
from pipeline.datasource import KafkaLiteDataSource
from pipeline.sink import KafkaLiteStreamWriter, KafkaLiteWriter, check_schema

NAME = "kafkalitetimed"


def _log(options: Mapping[str, str], kind: str, tasks: int, seconds: float) -> None:
    path = opt.normalize(dict(options)).get("benchcommitlog")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"kind": kind, "tasks": tasks, "ms": seconds * 1000}) + "\n")


class TimedWriter(KafkaLiteWriter):
    def commit(self, messages: list) -> None:
        t0 = time.perf_counter()
        super().commit(messages)
        _log(self.options, "batch", len(messages), time.perf_counter() - t0)


class TimedStreamWriter(KafkaLiteStreamWriter):
    def commit(self, messages: list, batchId: int) -> None:  # noqa: N803 - Spark's name
        t0 = time.perf_counter()
        super().commit(messages, batchId)
        _log(self.options, "micro-batch", len(messages), time.perf_counter() - t0)


class TimedKafkaLiteDataSource(KafkaLiteDataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        check_schema(schema, dict(self.options))
        return TimedWriter(dict(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        check_schema(schema, dict(self.options))
        return TimedStreamWriter(dict(self.options))
