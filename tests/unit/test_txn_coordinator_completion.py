"""The transaction coordinator finishes a transaction whose Prepare* is durable even when its markers or
Complete* write failed the first time (found by the transactional nemesis, seed 11 in custom mode: a
Complete write refused while the ISR of __transaction_state was below min.insync.replicas left the id in
PrepareAbort, and every InitProducerId of its producer was answered CONCURRENT_TRANSACTIONS for good).
The coordinator's own logic runs; only its log writes are replaced, to fail one on purpose."""

from __future__ import annotations

import asyncio

from broker.transaction.coordinator import TransactionCoordinator
from broker.transaction.state import TransactionMetadata, TxnError, TxnState
from net.errors import ErrorCode


class CompleteFailsOnce(TransactionCoordinator):
    """Its __transaction_state writes succeed, except the first Complete* one (the ISR shrank)."""

    def __init__(self) -> None:
        super().__init__(1, None, lambda: None, 1, 900_000, 604_800_000, 10, 3_600_000)  # type: ignore[arg-type]
        self.epochs[0] = 0
        self.written: list[TxnState | None] = []
        self.markers: list[TxnState] = []

    async def _write(self, meta: TransactionMetadata | None, tid: str) -> None:
        if meta is not None and meta.state == TxnState.COMPLETE_ABORT and meta.state not in self.written:
            self.written.append(meta.state)
            raise TxnError(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, "ISR shrank below min.insync.replicas")
        self.written.append(meta.state if meta else None)
        self.txns[tid] = meta  # type: ignore[assignment]

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
