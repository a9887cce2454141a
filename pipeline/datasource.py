"""The `kafkalite` PySpark data source: batch reads from broker segment files or from live brokers, streaming
reads, and a sink.

    import pipeline
    pipeline.register(spark)
    df = spark.read.format("kafkalite").option("path", DATA_DIR).option("subscribe", "tweets").load()
    df = spark.read.format("kafkalite").option("kafka.bootstrap.servers", B).option("subscribe", "tweets").load()
    sdf = spark.readStream.format("kafkalite").option("kafka.bootstrap.servers", B).option("subscribe", "t").load()
    df.write.format("kafkalite").option("kafka.bootstrap.servers", B).option("topic", "out").save()

Schema and option names are those of Spark's own Kafka source and sink (pipeline/options.py lists them).
Batch reads with `path` only: the driver plans from the files (pipeline/options.py: one replica per
partition, slices of segments), each task reads one slice (pipeline/segments.py). Batch reads with
`kafka.bootstrap.servers`: the driver plans from the cluster (offset ranges up to each high watermark) and
each task reads its range from a local replica when its host has one, else from the leader
(pipeline/remote.py). Streaming reads: pipeline/stream.py. Every read reaches the JVM as Arrow batches
(pipeline/arrow_reader.py); writes go through our producer (pipeline/sink.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.types import StructType

from pipeline import options as opt
from pipeline.remote import OffsetRange, bootstrap_servers, plan_remote_read, read_range
from pipeline.segments import Slice

if TYPE_CHECKING:
    import pyarrow as pa

NAME = "kafkalite"


class KafkaLiteDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        # Spark calls this at load(), for read and readStream alike: check the options now, so a typo fails there
        # and not at the first action. With brokers to ask, the cluster is asked when the query is planned.
        options = opt.normalize(dict(self.options))
        if bootstrap_servers(options) is None:
            opt.plan_read(options, warn=False)
        else:
            opt.selection(options)
        return opt.schema_ddl(opt.include_headers(options))

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaLiteReader(dict(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from pipeline.stream import KafkaLiteStreamReader

        return KafkaLiteStreamReader(dict(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from pipeline.sink import KafkaLiteWriter, check_schema

        check_schema(schema, dict(self.options))
        return KafkaLiteWriter(dict(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from pipeline.sink import KafkaLiteStreamWriter, check_schema

        check_schema(schema, dict(self.options))
        return KafkaLiteStreamWriter(dict(self.options))


class KafkaLiteReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = opt.normalize(options)
        self.include_headers = opt.include_headers(options)
        self.fail_on_data_loss = opt.bool_option(self.options, "failOnDataLoss", True)

    def partitions(self) -> Sequence[InputPartition]:
        # Planned once, on the driver side: sizes and committed offsets are fixed here, so tasks
        # reading a live broker's files see one consistent prefix.
        if bootstrap_servers(self.options) is not None:
            return [InputPartition(r) for r in plan_remote_read(self.options).ranges]
        return [InputPartition(s) for s in opt.plan_read(self.options).slices]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # Imported here, in the executor's task: pyarrow and numba (~0.4 s of CPU) are not needed by the Python
        # processes Spark starts to create and plan the source, one per query and step.
        from pipeline.arrow_reader import arrow_schema, raw_arrow_batches, record_batches

        part = partition.value
        schema = arrow_schema(self.include_headers)
        if isinstance(part, OffsetRange):
            chunks = read_range(part, self.options, self.fail_on_data_loss, prefer_local=True)
            return raw_arrow_batches(
                part.topic, part.partition, chunks, part.start, part.end, self.include_headers, schema
            )
        if not isinstance(part, Slice):  # Spark's placeholder partition when nothing is to be read
            return iter(())
        return record_batches(part, self.include_headers, schema)


def register(spark) -> None:  # type: ignore[no-untyped-def]
    """Make `spark.read.format("kafkalite")` available in this session."""
    spark.dataSource.register(KafkaLiteDataSource)
