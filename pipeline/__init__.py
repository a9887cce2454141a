"""Kafka Lite's data pipeline: a Spark data source over segment files, batch jobs, the tweet stream.

`pipeline.register(spark)` makes `spark.read.format("kafkalite")` available; the pure readers
(pipeline/segments.py, pipeline/options.py) need neither Spark nor Java.
"""

from __future__ import annotations


def register(spark) -> None:  # type: ignore[no-untyped-def]
    """Register the `kafkalite` data source in a SparkSession (imports pyspark only when called)."""
    from pipeline.datasource import register as _register

    _register(spark)


__all__ = ["register"]
