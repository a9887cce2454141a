"""Our idempotent producer's Sender against the broker's own sequence rules (broker/replica/producer_state.py), sans-IO:
after a numbered batch fails for good, or the broker refuses one as out of order, the producer bumps its epoch
(KIP-360) and what it sends next is accepted, with no record appended twice and none acknowledged lost."""

from __future__ import annotations

import time

from broker.replica.producer_state import ProducerStateManager
from client.accumulator import ProducerBatch
from client.producer import AsyncProducer
from net import batch as batch_fmt
from net.errors import KafkaLiteError, OutOfOrderSequenceError, RequestTimedOutError

TP = ("t", 0)


class Broker:
    """One partition's leader: the producer-state checks and a log of the values appended."""

    def __init__(self) -> None:
        self.state = ProducerStateManager()
        self.log: list[bytes] = []

    def produce(self, blob: bytes) -> KafkaLiteError | None:
        headers = [h for _, h in batch_fmt.iter_batches(blob)]
        try:
            retained = self.state.check_append(headers)
        except KafkaLiteError as e:
            return e
        for (pos, h), dup in zip(batch_fmt.iter_batches(blob), retained):
            if dup is None:
                self.state.update(h, len(self.log))
                self.log += [r[3] for r in batch_fmt.records_of(blob, pos, h)]
        return None


def producer(n: int) -> tuple[AsyncProducer, list[ProducerBatch]]:
    """A producer (never started: no I/O) with `n` one-record batches of TP queued, values b"0".. ."""
    p = AsyncProducer("127.0.0.1:1", linger_ms=0, batch_size=1)
    p._publish_count("t", 1)
    p.sender.sequences.reset(77, 0)
    for i in range(n):
        p.send("t", str(i).encode(), partition=0)
    return p, list(p.accumulator.queues[TP])


def send(p: AsyncProducer, broker: Broker, limit: int = 5) -> tuple[list[ProducerBatch], KafkaLiteError | None]:
    s = p.sender
    batches = s._one_batch(TP, p.accumulator.drain(TP, time.monotonic(), 0, True, limit))
    base = len(broker.log)  # the offset a new batch gets
    err = broker.produce(s._encode(TP, batches))
    if err is None:
        s._complete(TP, batches, [base], time.monotonic())
    else:
        s._on_partition_error(TP, batches, err)
    return batches, err


def test_a_batch_failed_for_good_then_new_batches_start_a_new_epoch_at_zero():
    p, _ = producer(3)
    broker = Broker()
    assert send(p, broker, limit=1)[1] is None  # "0" at epoch 0, sequence 0
    [lost] = p.accumulator.drain(TP, time.monotonic(), 0, True, 1)
    p.sender._encode(TP, [lost])  # numbered (sequence 1), then never delivered
    p.sender._fail_batches([lost], RequestTimedOutError("delivery.timeout.ms passed"))
    assert p.sender.producer_epoch == 1
    sent, err = send(p, broker)
    assert err is None and sent[0].producer_epoch == 1
    assert broker.log == [b"0", b"2"]
    assert [f.value for f in p.sender.failures] == [b"1"]


def test_out_of_order_answer_renumbers_in_a_new_epoch_without_duplicates():
    p, batches = producer(4)
    broker = Broker()
    assert send(p, broker, limit=1)[1] is None  # "0"
    # "1" and "2" go out in one request that times out without reaching the broker; "1" then fails for good
    # while "2", numbered after it in epoch 0, waits for its retry.
    b1, b2 = p.accumulator.drain(TP, time.monotonic(), 0, True, 2)
    p.sender._encode(TP, [b1, b2])
    p.sender._fail_batches([b1], RequestTimedOutError("delivery.timeout.ms passed"))
    p.accumulator.requeue_front(TP, [b2])
    # "2" (old epoch) goes alone: "3", new, is not sent in the same request with it.
    sent, err = send(p, broker)
    assert sent == [b2] and isinstance(err, OutOfOrderSequenceError)
    sent, err = send(p, broker)  # renumbered from 0 in epoch 1, alone (a request carries one batch of it)
    assert err is None and sent == [b2] and b2.producer_epoch == 1
    sent, err = send(p, broker)  # "3" after it
    assert err is None and [b.producer_epoch for b in sent] == [1]
    assert broker.log == [b"0", b"2", b"3"]
    assert [(f.value, f.error.outcome) for f in p.sender.failures] == [(b"1", "not_written")]


def test_a_batch_appended_before_its_failure_is_not_sent_again():
    p, _ = producer(3)
    broker = Broker()
    [b0] = p.accumulator.drain(TP, time.monotonic(), 0, True, 1)
    assert broker.produce(p.sender._encode(TP, [b0])) is None  # appended, but the answer was lost...
    p.sender._fail_batches([b0], RequestTimedOutError("timed out"))  # ...and it expired: outcome unknown
    assert send(p, broker)[1] is None
    assert broker.log == [b"0", b"1", b"2"]  # "0" once


def test_queued_batches_go_as_one_record_batch_with_every_records_offset():
    """A request carries one batch of a partition (Kafka's drain): new batches queued behind a request in flight
    are merged into one record batch, one sequence range, and each record's delivery report is its offset."""
    p, batches = producer(3)
    broker = Broker()
    reports: list[tuple[bytes, int]] = []
    for b in batches:
        b.callbacks = [(0, lambda e, md, v=b.records[0][3]: reports.append((v, md.offset)))]
    assert send(p, broker, limit=1)[1] is None  # "0" alone: sequence 0
    sent, err = send(p, broker)
    assert err is None and len(sent) == 1 and sent[0].parts == batches[1:]
    [(pos, h)] = list(batch_fmt.iter_batches(sent[0].encoded))
    assert (h.base_sequence, h.record_count) == (1, 2)
    assert [r[3] for r in batch_fmt.records_of(sent[0].encoded, pos, h)] == [b"1", b"2"]
    assert broker.log == [b"0", b"1", b"2"] and not p.accumulator.has_pending()
    assert reports == [(b"0", 0), (b"1", 1), (b"2", 2)]
