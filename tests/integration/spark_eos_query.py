"""A streaming query for test_spark_exactly_once.py, in a process of its own so the test can SIGKILL its driver
mid-batch: `python -m tests.integration.spark_eos_query BOOTSTRAP IN_TOPIC OUT_TOPIC CHECKPOINT`.

It reads IN_TOPIC (read_committed), slows each row down (so a micro-batch's tasks are writing for about a
second), and writes every value to OUT_TOPIC with the kafkalite sink's exactlyOnce mode."""

from __future__ import annotations

import sys
import time


def main(bootstrap: str, src: str, dst: str, checkpoint: str) -> None:
    from pyspark.sql.functions import col, udf
    from pyspark.sql.types import BinaryType

    from pipeline.session import spark_session

    spark = spark_session("local[2]", "kl-eos-test", {"spark.sql.shuffle.partitions": "2"})

    @udf(BinaryType())
    def slow(v: bytes) -> bytes:
        time.sleep(0.02)  # the task is mid-write for longer than a kill takes to land
        return v

    df = (
        spark.readStream.format("kafkalite")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", src)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "60")
        .option("kafka.isolation.level", "read_committed")
        .load()
    )
    query = (
        df.select(slow(col("value")).alias("value"))
        .writeStream.format("kafkalite")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", dst)
        .option("exactlyOnce", "true")
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    print("started", flush=True)
    query.awaitTermination()


if __name__ == "__main__":
    main(*sys.argv[1:5])
