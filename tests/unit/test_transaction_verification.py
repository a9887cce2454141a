"""KIP-890 verification in the produce path (broker/transaction/verification.py, broker/server/kafka_apis.py), called as
the network
layer calls the handlers: a real ReplicaManager, a real transaction coordinator on `__transaction_state` answering
AddPartitionsToTxn `verify_only` in-process (as the broker does when it is the coordinator), a real verifier."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import time
from typing import Any

from broker.metadata.naming import TXN_TOPIC
from broker.network.server import ConnectionContext
from broker.transaction.state import TxnError, TxnState
from broker.transaction.verification import TransactionVerifier
from net import batch as batch_fmt
from net.errors import ErrorCode
from net.protocol import SUPPORTED_VERSIONS, ApiKey
from net.schema.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from tests.unit.test_request_handlers import TOPIC, Broker, topic_records

TID = "verified-txn"


class VerifyingBroker(Broker):
    """Broker 1 alone, also leading `__transaction_state` (one partition) and verifying transactional produces;
    every verification question it asks is counted."""

    def __init__(self, tmp_path: Any) -> None:
        super().__init__(tmp_path)
        for offset, record in enumerate(topic_records(TXN_TOPIC, 1), start=1000):
            self.image.apply(offset, record)
        txns = self.apis.transactions
        self.coordinator = txns.coordinator
        groups = self.groups

        def on_change(p: Any, change: str) -> None:
            groups.on_partition_change(p, change)
            self.coordinator.on_partition_change(p, change)

        self.replicas.on_change = on_change
        self.asked: list[Any] = []

        async def send(broker_id: int, request: Any) -> Any:
            assert broker_id == 1
            self.asked.append(request)
            return await txns.add_partitions_to_txn(request, ConnectionContext("local", "BROKER"))

        txns.verifier = TransactionVerifier(self.replicas.partitions, lambda: self.image, 1, send)

    def run(self, scenario: Any) -> None:
        """Start the broker on a fresh event loop, run `scenario()` there, and close the broker whatever happens."""

        async def started() -> None:
            self.start()  # on the loop: the broker's tasks belong to it
            await scenario()

        try:
            asyncio.run(started())
        finally:
            self.close()

    async def begin(self, partitions: set[tuple[str, int]]) -> tuple[int, int]:
        """A transactional producer's InitProducerId and AddPartitionsToTxn, once the coordinator has loaded."""
        deadline = time.monotonic() + 10
        while True:
            try:
                pid, epoch = await self.coordinator.init_producer_id(TID, 60_000, (-1, -1))
                break
            except TxnError:
                assert time.monotonic() < deadline, "the coordinator never loaded"
                await asyncio.sleep(0.01)
        await self.coordinator.add_partitions(TID, pid, epoch, partitions)
        return pid, epoch

    def produce_call(self, pid: int, epoch: int, *entries: tuple[int, int]) -> Any:
        """A transactional produce of one record per (partition, sequence), started as the network layer starts
        it: the handler's answer, or the awaitable of it."""
        parts = tuple(
            PartitionProduceData(index=p, records=batch_fmt.build([(0, 0, None, b"v", None)], 1, 1, producer_id=pid,
                                 producer_epoch=epoch, base_sequence=seq, transactional=True))
            for p, seq in entries
        )  # fmt: skip
        request = ProduceRequest(
            transactional_id=TID,
            acks=-1,
            timeout=datetime.timedelta(seconds=5),
            topic_data=(TopicProduceData(name=TOPIC, partition_data=parts),),
        )
        return self.apis.handle(ApiKey.PRODUCE, SUPPORTED_VERSIONS[ApiKey.PRODUCE][1], request, self.ctx)


async def _answer(result: Any) -> dict[int, list]:
    """The typed answer's rows by partition: [partition, error code, base offset, error message]."""
    answer = await result if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future) else result
    [topic] = answer.responses
    return {r.index: [r.index, r.error_code, r.base_offset, r.error_message] for r in topic.partition_responses}


def test_only_a_transactions_first_batch_per_partition_asks_the_coordinator(tmp_path):
    b = VerifyingBroker(tmp_path)

    async def scenario() -> None:
        pid, epoch = await b.begin({(TOPIC, 0)})
        rows = await _answer(b.produce_call(pid, epoch, (0, 0)))
        assert rows[0][1] == 0 and len(b.asked) == 1
        assert b.asked[0].transactions[0].verify_only
        rows = await _answer(b.produce_call(pid, epoch, (0, 1)))  # the open transaction vouches for it
        assert rows[0][1] == 0 and len(b.asked) == 1
        rows = await _answer(b.produce_call(pid, epoch, (1, 0)))  # never added to the transaction: refused
        assert rows[1][1] == ErrorCode.INVALID_TXN_STATE and len(b.asked) == 2
        assert b.replicas.partitions[(TOPIC, 1)].log.log_end_offset == 0
        rows = await _answer(b.produce_call(pid, epoch + 1, (1, 0)))  # an epoch the coordinator does not know
        assert rows[1][1] == ErrorCode.INVALID_PRODUCER_EPOCH and len(b.asked) == 3
        # the transaction being completed (Prepare*): Kafka's CONCURRENT_TRANSACTIONS, a retriable produce error
        meta = b.coordinator.txns[TID]
        b.coordinator.txns[TID] = dataclasses.replace(meta, state=TxnState.PREPARE_COMMIT)
        rows = await _answer(b.produce_call(pid, epoch, (1, 0)))
        assert rows[1][1] == ErrorCode.NOT_ENOUGH_REPLICAS and len(b.asked) == 4
        assert b.replicas.partitions[(TOPIC, 1)].log.log_end_offset == 0

    b.run(scenario)


def test_a_produce_behind_one_being_verified_appends_after_it(tmp_path):
    """A produce joining partition 0 to the transaction waits for the coordinator with partition 1's next batch in
    it; the connection's next produce (partition 1's batch after that) must not overtake it, or its sequence would
    be out of order."""
    b = VerifyingBroker(tmp_path)

    async def scenario() -> None:
        pid, epoch = await b.begin({(TOPIC, 0), (TOPIC, 1)})
        assert (await _answer(b.produce_call(pid, epoch, (1, 0))))[1][1] == 0
        first = b.produce_call(pid, epoch, (0, 0), (1, 1))  # partition 0's first batch: verified
        second = b.produce_call(pid, epoch, (1, 2))  # needs no verification, but comes after
        rows_first, rows_second = await asyncio.gather(_answer(first), _answer(second))
        assert rows_first[0][1] == 0 and rows_first[1][1] == 0 and rows_second[1][1] == 0, (rows_first, rows_second)
        assert rows_first[1][2] < rows_second[1][2]
        assert b.apis.transactions.verifier is not None and len(b.asked) == 2

    b.run(scenario)


def test_first_batches_of_one_loop_turn_ask_the_coordinator_once(tmp_path):
    """librdkafka sends a ProduceRequest per partition: a transaction's first batches on a leader arrive together.
    Their questions go to the coordinator in one AddPartitionsToTxn (Kafka's AddPartitionsToTxnManager batches per
    coordinator likewise), and each produce gets its own partitions' answers, a refusal included."""
    b = VerifyingBroker(tmp_path)

    async def scenario() -> None:
        pid, epoch = await b.begin({(TOPIC, 0)})
        calls = [b.produce_call(pid, epoch, (p, 0)) for p in (0, 1)]  # partition 1 was never added
        rows = await asyncio.gather(*(_answer(c) for c in calls))
        assert [rows[0][0][1], rows[1][1][1]] == [0, ErrorCode.INVALID_TXN_STATE], rows
        assert len(b.asked) == 1, b.asked
        [txn] = b.asked[0].transactions
        assert txn.verify_only and {(t.name, p) for t in txn.topics for p in t.partitions} == {(TOPIC, 0), (TOPIC, 1)}
        assert [b.replicas.partitions[(TOPIC, p)].log.log_end_offset for p in (0, 1)] == [1, 0]

    b.run(scenario)


def test_one_transactional_id_for_two_epochs_in_one_turn_asks_twice(tmp_path):
    """A zombie's first batch and its successor's in the same turn: the answers are told apart by transactional id,
    so the two questions go in two requests, and only the current epoch's batch is appended."""
    b = VerifyingBroker(tmp_path)

    async def scenario() -> None:
        pid, epoch = await b.begin({(TOPIC, 0), (TOPIC, 1)})
        current, other = b.produce_call(pid, epoch, (0, 0)), b.produce_call(pid, epoch + 1, (1, 0))
        rows_current, rows_other = await asyncio.gather(_answer(current), _answer(other))
        assert rows_current[0][1] == 0 and rows_other[1][1] == ErrorCode.INVALID_PRODUCER_EPOCH
        assert sorted(r.transactions[0].producer_epoch for r in b.asked) == [epoch, epoch + 1]
        assert all(len(r.transactions) == 1 for r in b.asked)
        assert [b.replicas.partitions[(TOPIC, p)].log.log_end_offset for p in (0, 1)] == [1, 0]

    b.run(scenario)


def test_the_produces_one_answer_verified_append_before_a_woken_fetch_reads(tmp_path):
    """The produces that one verification answer lets through append in the same loop turn: a follower's fetch woken
    by the first append then finds every one of them in the log (one replication round, not one per partition)."""
    b = VerifyingBroker(tmp_path)

    async def scenario() -> None:
        pid, epoch = await b.begin({(TOPIC, 0), (TOPIC, 1)})
        p0, p1 = b.replicas.partitions[(TOPIC, 0)], b.replicas.partitions[(TOPIC, 1)]
        woken = asyncio.get_running_loop().create_future()
        p0.add_data_waiter(woken)
        seen: list[int] = []

        async def parked_fetch() -> None:  # as ReplicaManager.fetch_messages: resumes at the wake, then reads
            await asyncio.wait({woken})
            seen.append(p1.log.log_end_offset)

        fetch = asyncio.ensure_future(parked_fetch())
        calls = [b.produce_call(pid, epoch, (p, 0)) for p in (0, 1)]
        rows = await asyncio.gather(*(_answer(c) for c in calls))
        await fetch
        assert [rows[0][0][1], rows[1][1][1]] == [0, 0] and len(b.asked) == 1
        assert seen == [1], "partition 1's batch was not in the log when the fetch woken by partition 0's read"
        assert p0.log.log_end_offset == 1

    b.run(scenario)
