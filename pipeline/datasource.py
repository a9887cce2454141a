"""The `kafkalite` PySpark data source: Spark batch reads straight from broker segment files.

    import pipeline
    pipeline.register(spark)
    df = spark.read.format("kafkalite").option("path", DATA_DIR).option("subscribe", "tweets").load()

Schema and option names are those of Spark's own Kafka source (pipeline/options.py lists them).
The driver plans (pipeline/options.py: one replica per partition, slices of segments); each Spark
task reads one slice (pipeline/segments.py) and hands it to the JVM as Arrow batches
(pipeline/arrow_reader.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from pipeline import options as opt
from pipeline.arrow_reader import arrow_schema, record_batches
from pipeline.segments import Slice

NAME = "kafkalite"


class KafkaLiteDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        # Spark calls this at load(): check the options now, so a typo fails there and not at the first action.
        opt.plan_read(dict(self.options), warn=False)
        return opt.schema_ddl(opt.include_headers(dict(self.options)))

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaLiteReader(dict(self.options))


class KafkaLiteReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        self.include_headers = opt.include_headers(options)

    def partitions(self) -> Sequence[InputPartition]:
        # Planned once, on the driver side: sizes and committed offsets are fixed here, so tasks
        # reading a live broker's files see one consistent prefix.
        return [InputPartition(s) for s in opt.plan_read(self.options).slices]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        sl = partition.value
        if not isinstance(sl, Slice):  # Spark's placeholder partition when nothing is to be read
            return iter(())
        return record_batches(sl, self.include_headers, arrow_schema(self.include_headers))


def register(spark) -> None:  # type: ignore[no-untyped-def]
    """Make `spark.read.format("kafkalite")` available in this session."""
    spark.dataSource.register(KafkaLiteDataSource)
