"""The transaction coordinator finishes a transaction whose Prepare* is durable even when its markers or
Complete* write failed the first time (found by the transactional nemesis, seed 11 in custom mode: a
Complete write refused while the ISR of __transaction_state was below min.insync.replicas left the id in
PrepareAbort, and every InitProducerId of its producer was answered CONCURRENT_TRANSACTIONS for good).
The coordinator's own logic runs; only its log writes are replaced, to fail one on purpose."""

from __future__ import annotations

import asyncio

from broker.metadata.image import MetadataImage, PartitionState, TopicInfo
from broker.transaction.coordinator import TransactionCoordinator
from broker.transaction.state import TransactionMetadata, TxnError, TxnState
from net.errors import ErrorCode
from net.schema.convert import error_response
from net.schema.write_txn_markers import WriteTxnMarkersRequest, WriteTxnMarkersResponse


class CompleteFailsOnce(TransactionCoordinator):
    """Its __transaction_state writes succeed, except the first Complete* one (the ISR shrank)."""

    def __init__(self) -> None:
        super().__init__(1, None, lambda: None, 1, 900_000, 604_800_000, 10, 3_600_000)  # type: ignore[arg-type]
        self.epochs[0] = 0
        self.written: list[TxnState | None] = []
        self.markers: list[TxnState] = []

    def _append(
        self, meta: TransactionMetadata | None, tid: str, behind: "asyncio.Future[None] | None" = None
    ) -> "asyncio.Future[None]":
        async def durable() -> None:
            if meta is not None and meta.state == TxnState.COMPLETE_ABORT and meta.state not in self.written:
                self.written.append(meta.state)
                raise TxnError(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, "ISR shrank below min.insync.replicas")
            self.written.append(meta.state if meta else None)
            if behind is not None:
                await behind
            self.txns[tid] = meta  # type: ignore[assignment]

        return asyncio.ensure_future(durable())

    async def _write_markers(self, meta: TransactionMetadata) -> None:
        self.markers.append(meta.state)


def test_a_timed_out_transaction_is_completed_after_a_failed_complete_write():
    asyncio.run(_abort_then_init())


async def _abort_then_init() -> None:
    c = CompleteFailsOnce()
    c.txns["t"] = TransactionMetadata("t", 7, 0, 100, TxnState.ONGOING, {("orders", 0)}, start_ms=1, update_ms=1)
    await c._abort_timed_out("t")
    for _ in range(50):  # the completion runs in the background
        if c.txns["t"].state == TxnState.COMPLETE_ABORT:
            break
        await asyncio.sleep(0.01)
    assert c.txns["t"].state == TxnState.COMPLETE_ABORT, c.written
    assert c.markers == [TxnState.PREPARE_ABORT, TxnState.PREPARE_ABORT]  # written again: idempotent on leaders
    pid, epoch = await c.init_producer_id("t", 1000, (-1, -1))  # no CONCURRENT_TRANSACTIONS
    assert (pid, epoch) == (7, 2)


class HeldWrites(TransactionCoordinator):
    """Its __transaction_state writes are appended in order and become durable only when the test says so."""

    def __init__(self) -> None:
        super().__init__(1, None, lambda: None, 1, 900_000, 604_800_000, 10, 3_600_000)  # type: ignore[arg-type]
        self.epochs[0] = 0
        self.log: list[tuple[TxnState | None, asyncio.Future[None]]] = []  # appended, with its commit

    def _append(
        self, meta: TransactionMetadata | None, tid: str, behind: "asyncio.Future[None] | None" = None
    ) -> "asyncio.Future[None]":
        committed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.log.append((meta.state if meta else None, committed))

        async def durable() -> None:
            await committed
            if behind is not None:
                await behind
            self.txns[tid] = meta  # type: ignore[assignment]

        return asyncio.ensure_future(durable())

    async def _write_markers(self, meta: TransactionMetadata) -> None:
        pass

    def commit(self, i: int, error: TxnError | None = None) -> None:
        committed = self.log[i][1]
        if error is None:
            committed.set_result(None)
        else:
            committed.set_exception(error)


async def _until(cond: object) -> None:
    for _ in range(2000):  # the completion's retry waits MARKER_RETRY_S
        if cond():  # type: ignore[operator]
            return
        await asyncio.sleep(0.001)
    raise AssertionError("condition not reached")


async def _committed_then_next(c: HeldWrites) -> "asyncio.Future[None]":
    """A transaction committed (PrepareCommit durable, Complete* appended), then the producer's next
    AddPartitionsToTxn: its state appended, nothing durable past PrepareCommit."""
    c.txns["t"] = TransactionMetadata("t", 7, 0, 60_000, TxnState.ONGOING, {("orders", 0)}, start_ms=1, update_ms=1)
    end = asyncio.ensure_future(c.end_txn("t", 7, 0, True))
    await _until(lambda: len(c.log) == 1)
    c.commit(0)  # PrepareCommit durable: EndTxn answered, the markers and Complete* follow
    await end
    await _until(lambda: len(c.log) == 2)
    assert c.log[1][0] == TxnState.COMPLETE_COMMIT
    add = asyncio.ensure_future(c.add_partitions("t", 7, 0, {("orders", 1)}))
    await _until(lambda: len(c.log) == 3)  # appended while Complete* is not durable yet
    assert c.log[2][0] == TxnState.ONGOING
    return add


def test_the_next_transaction_is_appended_behind_complete_and_answered_once_both_are_durable():
    asyncio.run(_next_behind_complete())


async def _next_behind_complete() -> None:
    c = HeldWrites()
    add = await _committed_then_next(c)
    assert c.txns["t"].state == TxnState.PREPARE_COMMIT  # nothing applies before it is durable
    c.commit(2)
    await asyncio.sleep(0.01)
    assert not add.done(), "answered before the Complete* it was computed from is durable"
    c.commit(1)
    await add
    assert c.txns["t"].state == TxnState.ONGOING and c.txns["t"].partitions == {("orders", 1)}


def test_a_next_transaction_behind_a_failed_complete_is_refused_and_the_transaction_completed():
    asyncio.run(_next_behind_failed_complete())


async def _next_behind_failed_complete() -> None:
    c = HeldWrites()
    add = await _committed_then_next(c)
    c.commit(1, TxnError(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, "ISR shrank"))
    c.commit(2)
    try:
        await add
    except TxnError as e:
        assert e.code == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    else:
        raise AssertionError("AddPartitionsToTxn answered behind a Complete* that failed")
    assert c.txns["t"].state == TxnState.PREPARE_COMMIT
    await _until(lambda: len(c.log) == 4)  # the completion is retried: markers again, Complete* again
    assert c.log[3][0] == TxnState.COMPLETE_COMMIT
    c.commit(3)
    await _until(lambda: c.txns["t"].state == TxnState.COMPLETE_COMMIT)


class LeaderJustRestarted(TransactionCoordinator):
    """Its markers go through `send_markers` to the leader its image names (broker 2); its __transaction_state
    writes succeed at once. The leader answers as the test says, one answer per WriteTxnMarkers."""

    def __init__(self, answers: list[int], image: MetadataImage) -> None:
        super().__init__(1, None, lambda: image, 1, 900_000, 604_800_000, 10, 3_600_000)  # type: ignore[arg-type]
        self.epochs[0] = 0
        self.answers = answers
        self.sent: list[tuple[int, list[tuple[str, int]]]] = []
        self.send_markers = self._leader

    async def _leader(self, broker: int, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
        [marker] = request.markers
        tps = [(t.name, p) for t in marker.topics for p in t.partition_indexes]
        self.sent.append((broker, tps))
        return error_response(request, WriteTxnMarkersResponse, self.answers.pop(0) if self.answers else 0)

    def _append(
        self, meta: TransactionMetadata | None, tid: str, behind: "asyncio.Future[None] | None" = None
    ) -> "asyncio.Future[None]":
        async def durable() -> None:
            self.txns[tid] = meta  # type: ignore[assignment]

        return asyncio.ensure_future(durable())


def _image_with(topic: str, leader: int) -> MetadataImage:
    image = MetadataImage()
    image.topics[topic] = TopicInfo(topic, "id", {0: PartitionState(0, leader, 1, [leader, 3], [leader, 3])})
    return image


def test_a_leader_that_does_not_know_the_topic_yet_gets_the_marker_again():
    """Found by the transactional nemesis (seed 160, zookeeper: a transaction left open on txn-b-1 for good, its
    last stable offset stuck). After the kill-all, a coordinator loaded a transaction in PrepareAbort and sent its
    markers to the leader its image named, a broker whose listener was up but whose own image was still empty (it
    catches up with the metadata after it starts): it answered UNKNOWN_TOPIC_OR_PARTITION, which the coordinator
    took as written (as for a deleted topic) before writing CompleteAbort. Kafka retries a marker on that error
    (TransactionMarkerRequestCompletionHandler); whether the topic is gone is the coordinator's own image's to say."""
    asyncio.run(_marker_retried_until_written())


async def _marker_retried_until_written() -> None:
    c = LeaderJustRestarted([int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)], _image_with("orders", 2))
    c.txns["t"] = TransactionMetadata("t", 7, 0, 60_000, TxnState.ONGOING, {("orders", 0)}, start_ms=1, update_ms=1)
    await c.end_txn("t", 7, 0, True)
    await _until(lambda: c.txns["t"].state == TxnState.COMPLETE_COMMIT)
    assert c.sent == [(2, [("orders", 0)]), (2, [("orders", 0)])], "Complete* written without the marker"


def test_a_deleted_topic_needs_no_marker():
    """The other side: a topic gone from the coordinator's image is left out (no reader needs its marker)."""
    asyncio.run(_deleted_topic_skipped())


async def _deleted_topic_skipped() -> None:
    c = LeaderJustRestarted([], _image_with("orders", 2))
    c.txns["t"] = TransactionMetadata(
        "t", 7, 0, 60_000, TxnState.ONGOING, {("orders", 0), ("gone", 0)}, start_ms=1, update_ms=1
    )
    await c.end_txn("t", 7, 0, False)
    await _until(lambda: c.txns["t"].state == TxnState.COMPLETE_ABORT)
    assert c.sent == [(2, [("orders", 0)])]


def test_a_fenced_producer_is_told_at_once_while_the_id_is_busy():
    """A zombie's EndTxn or AddPartitionsToTxn while the new producer's transaction is being completed (the id's
    lock held, markers waiting for a leader): PRODUCER_FENCED at once, as Kafka's coordinator checks the epoch
    before a pending transition. Waiting for the lock answered CONCURRENT_TRANSACTIONS, which a client retries
    until its own timeout (librdkafka's commit_transaction ended _TIMED_OUT, not fenced)."""
    asyncio.run(_fenced_while_busy())


async def _fenced_while_busy() -> None:
    c = HeldWrites()
    c.txns["t"] = TransactionMetadata(
        "t", 7, 1, 60_000, TxnState.PREPARE_ABORT, {("orders", 0)}, start_ms=1, update_ms=1
    )
    async with c._locks["t"]:  # the completion holds it
        calls = [
            (c.end_txn("t", 7, 0, True), ErrorCode.PRODUCER_FENCED),
            (c.add_partitions("t", 7, 0, {("orders", 1)}), ErrorCode.PRODUCER_FENCED),
            (c.end_txn("t", 6, 3, False), ErrorCode.INVALID_PRODUCER_ID_MAPPING),
        ]
        for call, code in calls:
            try:
                await asyncio.wait_for(call, 1.0)  # LOCK_WAIT_S is 5 s: an answer within 1 s did not wait
            except TxnError as e:
                assert e.code == code, e
            else:
                raise AssertionError("a fenced producer's request was accepted")
        # the current producer waits its turn: not refused
        current = asyncio.ensure_future(c.end_txn("t", 7, 1, False))
        await asyncio.sleep(0.05)
        assert not current.done()
    current.cancel()
