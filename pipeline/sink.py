"""The `kafkalite` sink: `df.write.format("kafkalite")` and `df.writeStream.format("kafkalite")`, Spark's Kafka
sink schema and options.

    counts.selectExpr("hashtag AS key", "to_json(struct(*)) AS value").write.format("kafkalite")
        .option("kafka.bootstrap.servers", "host:9092").option("topic", "hashtag-counts").save()

Columns: `value` (binary or string, required), `key` (binary or string), `topic` (string; the `topic` option
wins over it), `partition` (int; else the producer's partitioner), `headers`
(array<struct<key:string,value:binary>>). Each Spark task writes its rows with our producer, acks=all and
idempotence on, and flushes before it reports success, so a finished job's rows are committed in the topic.
As with Spark's Kafka sink, delivery is at least once: a task that Spark retries writes its rows again.
Other `kafka.`-prefixed options are producer configs (security settings included).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructType

from client.config import ProducerConfig
from client.sync import Producer
from pipeline import options as opt
from pipeline.remote import bootstrap_servers, client_kwargs
from pipeline.segments import LogReadError

_KEY_TYPES = (BinaryType, StringType)


@dataclass
class Written(WriterCommitMessage):
    records: int


def check_schema(schema: StructType, options: Mapping[str, str]) -> None:
    """Spark's Kafka sink rules, checked on the driver before any task runs."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in fields:
        raise LogReadError("the kafkalite sink needs a 'value' column (binary or string)")
    for name in ("key", "value"):
        if name in fields and not isinstance(fields[name], _KEY_TYPES):
            raise LogReadError(f"column {name!r} must be binary or string, not {fields[name].simpleString()}")
    if "topic" in fields and not isinstance(fields["topic"], StringType):
        raise LogReadError(f"column 'topic' must be a string, not {fields['topic'].simpleString()}")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise LogReadError(f"column 'partition' must be an int, not {fields['partition'].simpleString()}")
    if "topic" not in fields and not (opt.normalize(options).get("topic") or "").strip():
        raise LogReadError("no topic to write to: give the 'topic' option or a 'topic' column")
    if bootstrap_servers(opt.normalize(options)) is None:
        raise LogReadError("option kafka.bootstrap.servers is required (host:port[,host:port])")
    client_kwargs(opt.normalize(options), ProducerConfig)  # bad kafka.* settings fail here, not in every task


def _as_bytes(v: object) -> bytes | None:
    return v.encode() if isinstance(v, str) else v  # type: ignore[return-value]


def write_rows(options: Mapping[str, str], batches: Iterator[pa.RecordBatch]) -> Written:
    """One task's rows into the cluster; returns once every one is acknowledged by all in-sync replicas."""
    opts = opt.normalize(options)
    fixed_topic = (opts.get("topic") or "").strip() or None
    settings = {"acks": "all", "enable_idempotence": True, **client_kwargs(opts, ProducerConfig)}
    n = 0
    with Producer(bootstrap_servers(opts) or "", **settings) as producer:
        for rb in batches:
            cols = {name.lower(): rb.column(i).to_pylist() for i, name in enumerate(rb.schema.names)}
            rows = rb.num_rows
            values = cols["value"]
            keys = cols.get("key") or [None] * rows
            topics = [fixed_topic] * rows if fixed_topic else cols["topic"]
            parts = cols.get("partition") or [None] * rows
            headers = cols.get("headers") or [None] * rows
            for i in range(rows):
                if topics[i] is None:
                    raise LogReadError("a row has a null 'topic' and no 'topic' option is given")
                hd = [(h["key"], _as_bytes(h["value"])) for h in headers[i]] if headers[i] else None
                producer.send(topics[i], _as_bytes(values[i]), _as_bytes(keys[i]), parts[i], hd)
            n += rows
        producer.flush()  # raises if any record failed: the task fails and Spark retries it
    return Written(n)


class KafkaLiteWriter(DataSourceArrowWriter):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = dict(options)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_rows(self.options, iterator)


class KafkaLiteStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = dict(options)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_rows(self.options, iterator)

    def commit(self, messages: list, batchId: int) -> None:  # noqa: N803 - Spark's name
        """Every task flushed before it reported: the micro-batch is in the topic already."""

    def abort(self, messages: list, batchId: int) -> None:  # noqa: N803
        """No transactions: what tasks wrote stays (at least once, as Spark's Kafka sink)."""
