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

`option("exactlyOnce", "true")` goes beyond Spark's own Kafka sink: each task writes its rows in a Kafka
transaction it leaves open (a two-phase commit, as Flink's Kafka sink does), and the driver commits every
task's transaction once Spark commits the micro-batch (or the job), or aborts them. A task's transactional.id
is `<transactionalIdPrefix>-<query id>-<batch id>-<partition>`: a retried or replayed task fences and aborts
what an earlier attempt left open, and a task of a micro-batch replayed after a driver crash first asks the
coordinator whether its transaction was committed already (DescribeTransactions) and then writes nothing.
So, given a replayable source and a deterministic query (Spark's own condition for exactly-once sinks), each
row is in the topic once for read_committed readers (`kafka.isolation.level=read_committed` on the source).
A micro-batch must finish within `kafka.transaction.timeout.ms` (default 60000, at most the brokers'
transaction.max.timeout.ms), or its coordinator aborts it and the query fails at commit.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructType

from client.config import CommonClientConfig, ProducerConfig
from client.sync import Producer, transaction_state
from client.sync import end_transactions as end_transactions_of
from pipeline import options as opt
from pipeline.remote import bootstrap_servers, client_kwargs
from pipeline.segments import LogReadError

if TYPE_CHECKING:
    import pyarrow as pa

_KEY_TYPES = (BinaryType, StringType)


@dataclass
class Written(WriterCommitMessage):
    records: int
    # exactlyOnce: the task's transaction, left open for the driver to end (None: nothing to end)
    transactional_id: str | None = None
    producer_id: int = -1
    producer_epoch: int = -1


# A replayed task's transaction in these states was committed (or is being completed) by its coordinator.
_COMMITTED_STATES = ("PrepareCommit", "CompleteCommit")
DEFAULT_PREFIX = "kafkalite-spark"


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


def exactly_once(options: Mapping[str, str]) -> bool:
    return opt.bool_option(opt.normalize(options), "exactlyOnce", False)


def write_scope(opts: Mapping[str, str]) -> str | None:
    """A batch write's own replay key, Delta Lake's idempotent-write options: `txnAppId` and `txnVersion`
    (in foreachBatch: the query's id and the batch id), so a replayed foreachBatch write commits once."""
    app, version = opts.get("txnappid"), opts.get("txnversion")
    return f"{app}-{version}" if app and version is not None else None


def _task_transactional_id(opts: Mapping[str, str], job: str, streaming: bool) -> str:
    """This task's transactional.id: the same for every attempt of the same partition of the same micro-batch."""
    from pyspark import TaskContext

    tc = TaskContext.get()
    partition = tc.partitionId() if tc is not None else 0
    prefix = (opts.get("transactionalidprefix") or DEFAULT_PREFIX).strip()
    scope = job
    if streaming and tc is not None:
        # A streaming micro-batch: keyed by the query (its id is stable across restarts from its checkpoint)
        # and the batch id, so a replay finds what the first run did.
        batch_id = tc.getLocalProperty("streaming.sql.batchId")
        query_id = tc.getLocalProperty("sql.streaming.queryId")
        if query_id and batch_id is not None:
            scope = f"{query_id}-{batch_id}"
    return f"{prefix}-{scope}-{partition}"


def _common_kwargs(opts: Mapping[str, str]) -> dict[str, Any]:
    """The connection settings (bootstrap aside) of the kafka.* options, for the driver's own requests."""
    names = set(CommonClientConfig.kafka_names().values())
    return {k: v for k, v in client_kwargs(opts, ProducerConfig).items() if k in names}


def write_rows(
    options: Mapping[str, str], batches: Iterator[pa.RecordBatch], job: str = "", streaming: bool = False
) -> Written:
    """One task's rows into the cluster; returns once every one is acknowledged by all in-sync replicas.
    With exactlyOnce, inside a transaction left open for the driver to commit."""
    opts = opt.normalize(options)
    fixed_topic = (opts.get("topic") or "").strip() or None
    settings = {"acks": "all", "enable_idempotence": True, **client_kwargs(opts, ProducerConfig)}
    bootstrap = bootstrap_servers(opts) or ""
    txn_id = None
    if exactly_once(opts):
        txn_id = _task_transactional_id(opts, job, streaming)
        state = transaction_state(bootstrap, txn_id, **_common_kwargs(opts))
        if state in _COMMITTED_STATES:
            # A replay of a micro-batch whose commit reached this partition's transaction before the driver
            # died: its rows are in the topic already.
            for _ in batches:
                pass
            return Written(0)
        settings["transactional_id"] = txn_id
    n = 0
    with Producer(bootstrap, **settings) as producer:
        if txn_id is not None:
            producer.init_transactions()  # fences an earlier attempt and aborts what it left open
            producer.begin_transaction()
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
        if txn_id is not None:
            pid, epoch = producer.producer_id_and_epoch
            # The producer closes without ending the transaction: the driver commits or aborts it.
            return Written(n, txn_id, pid, epoch)
    return Written(n)


def end_transactions(options: Mapping[str, str], messages: list, commit: bool) -> None:
    """On the driver: end the transactions the tasks of a micro-batch (or job) left open, all at once (one client,
    the EndTxn requests concurrent): the commit costs about one round trip to the coordinators, not one per task."""
    opts = opt.normalize(options)
    open_txns = [
        (m.transactional_id, m.producer_id, m.producer_epoch)
        for m in messages
        if isinstance(m, Written) and m.transactional_id is not None
    ]
    outcomes = end_transactions_of(bootstrap_servers(opts) or "", open_txns, commit, **_common_kwargs(opts))
    failed = [e for e in outcomes if e is not None]
    # An abort is best effort: the coordinator's timeout aborts what is left.
    if commit and failed:
        raise failed[0]


class KafkaLiteWriter(DataSourceArrowWriter):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = dict(options)
        # On the driver: one id for every task of this write (txnAppId-txnVersion when given: replay-safe).
        self.job = write_scope(opt.normalize(self.options)) or uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_rows(self.options, iterator, self.job)

    def commit(self, messages: list) -> None:
        """exactlyOnce: every task succeeded; their rows become visible together."""
        end_transactions(self.options, messages, commit=True)

    def abort(self, messages: list) -> None:
        end_transactions(self.options, messages, commit=False)


class KafkaLiteStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = dict(options)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_rows(self.options, iterator, streaming=True)

    def commit(self, messages: list, batchId: int) -> None:  # noqa: N803 - Spark's name
        """Every task flushed before it reported: at least once, the micro-batch is in the topic already;
        exactlyOnce, the driver commits the tasks' transactions now."""
        end_transactions(self.options, messages, commit=True)

    def abort(self, messages: list, batchId: int) -> None:  # noqa: N803
        """At least once, what tasks wrote stays (as Spark's Kafka sink); exactlyOnce, it is aborted."""
        end_transactions(self.options, messages, commit=False)
