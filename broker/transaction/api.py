"""TransactionApis: the transaction apis of both listeners, typed end to end (net/schema/).

- InitProducerId (22): a plain idempotent producer gets a random 62-bit id (no coordination needed); a
  transactional one its id's producer id and a new epoch from the transaction coordinator.
- AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26), DescribeTransactions (65), ListTransactions (66):
  the coordinator of the transactional id (broker/transaction/coordinator.py).
- WriteTxnMarkers (27, CLUSTER_ACTION): a coordinator's commit or abort markers (or an admin's abort of a hanging
  transaction, kl-transactions abort), appended by each partition's leader as a control batch and answered once
  replicated (acks=all); listeners (the group coordinator, for transactional offsets) hear of each one committed.
- AddPartitionsToTxn v4+ `verify_only` (a broker's): whether partitions are in a producer's ongoing transaction,
  asked by partition leaders before a transaction's first batch there (broker/transaction/verification.py).

Authorization is decided before these run (broker/server/authorization.py): WRITE on the transactional id, WRITE on
the topics added, READ on the group, DESCRIBE for the describe apis, CLUSTER_ACTION for WriteTxnMarkers.
"""

from __future__ import annotations

import asyncio
import datetime
import secrets
import time
from typing import TYPE_CHECKING, Callable

from broker.metadata.naming import OFFSETS_TOPIC
from broker.network.server import ConnectionContext
from broker.transaction.coordinator import TransactionCoordinator
from broker.transaction.state import TransactionMetadata, TxnError, TxnState
from broker.transaction.verification import TransactionVerifier
from net import batch as batch_fmt
from net.errors import ErrorCode, KafkaLiteError
from net.protocol import ApiKey
from net.schema.add_offsets_to_txn import AddOffsetsToTxnRequest, AddOffsetsToTxnResponse
from net.schema.add_partitions_to_txn import (
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnResult,
    AddPartitionsToTxnTopic,
    AddPartitionsToTxnTopicResult,
)
from net.schema.describe_transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    TopicData,
)
from net.schema.describe_transactions import TransactionState as DescribedTxn
from net.schema.end_txn import EndTxnRequest, EndTxnResponse
from net.schema.init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from net.schema.list_transactions import ListTransactionsRequest, ListTransactionsResponse
from net.schema.list_transactions import TransactionState as ListedTxn
from net.schema.write_txn_markers import (
    WritableTxnMarkerPartitionResult,
    WritableTxnMarkerResult,
    WritableTxnMarkerTopicResult,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)

if TYPE_CHECKING:
    from broker.metadata.image import MetadataImage
    from broker.replica.replica_manager import ReplicaManager

MARKER_TIMEOUT_S = 10.0


class TransactionApis:
    def __init__(
        self,
        coordinator: TransactionCoordinator,
        replica_manager: "ReplicaManager",
        image: Callable[[], "MetadataImage"],
        offsets_partition_for: Callable[[str], int],
    ) -> None:
        self.coordinator = coordinator
        self.replica_manager = replica_manager
        self._image = image
        self.offsets_partition_for = offsets_partition_for
        # KIP-890's check of a produce's transactional first batches, for the produce path
        # (broker/server/kafka_apis.py);
        # None: transaction.partition.verification.enable=false. Set by the broker.
        self.verifier: TransactionVerifier | None = None
        self.handlers: dict[ApiKey, Callable[..., object]] = {
            ApiKey.INIT_PRODUCER_ID: self.init_producer_id,
            ApiKey.ADD_PARTITIONS_TO_TXN: self.add_partitions_to_txn,
            ApiKey.ADD_OFFSETS_TO_TXN: self.add_offsets_to_txn,
            ApiKey.END_TXN: self.end_txn,
            ApiKey.WRITE_TXN_MARKERS: self.write_txn_markers,
            ApiKey.DESCRIBE_TRANSACTIONS: self.describe_transactions,
            ApiKey.LIST_TRANSACTIONS: self.list_transactions,
        }

    # --- InitProducerId ------------------------------------------------------------------------

    async def init_producer_id(self, req: InitProducerIdRequest, ctx: ConnectionContext) -> InitProducerIdResponse:
        if req.transactional_id is None:
            # Random 62-bit ids need no coordination between brokers; a collision is astronomically unlikely.
            return InitProducerIdResponse(producer_id=secrets.randbits(62), producer_epoch=0)
        timeout_ms = int(req.transaction_timeout.total_seconds() * 1000)
        try:
            pid, epoch = await self.coordinator.init_producer_id(
                req.transactional_id, timeout_ms, (req.producer_id, req.producer_epoch)
            )
        except TxnError as e:
            return InitProducerIdResponse(error_code=int(e.code), producer_id=-1, producer_epoch=-1)
        return InitProducerIdResponse(producer_id=pid, producer_epoch=epoch)

    # --- AddPartitionsToTxn / AddOffsetsToTxn ------------------------------------------------------

    async def add_partitions_to_txn(
        self, req: AddPartitionsToTxnRequest, ctx: ConnectionContext
    ) -> AddPartitionsToTxnResponse:
        if req.transactions:  # v4+: a broker's batched form (KIP-890)
            results = []
            for t in req.transactions:
                topics = await self._add(t.transactional_id, t.producer_id, t.producer_epoch, t.topics, t.verify_only)
                results.append(AddPartitionsToTxnResult(transactional_id=t.transactional_id, topic_results=topics))
            return AddPartitionsToTxnResponse(results_by_transaction=tuple(results))
        topics = await self._add(
            req.v3_and_below_transactional_id,
            req.v3_and_below_producer_id,
            req.v3_and_below_producer_epoch,
            req.v3_and_below_topics,
            False,
        )
        return AddPartitionsToTxnResponse(results_by_topic_v3_and_below=topics)

    async def _add(
        self, tid: str, pid: int, epoch: int, topics: tuple[AddPartitionsToTxnTopic, ...], verify_only: bool
    ) -> tuple[AddPartitionsToTxnTopicResult, ...]:
        image = self._image()
        wanted = {(t.name, p) for t in topics for p in t.partitions}
        unknown = {(t, p) for t, p in wanted if (info := image.topics.get(t)) is None or p not in info.partitions}
        code = 0
        codes: dict[tuple[str, int], int] = {}
        if unknown:  # Kafka: the unknown ones refused, the others not attempted
            codes = {tp: int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) for tp in unknown}
            code = int(ErrorCode.OPERATION_NOT_ATTEMPTED)
        else:
            try:
                if verify_only:
                    present = self.coordinator.verify_partitions(tid, pid, epoch, wanted)
                    codes = {tp: int(ErrorCode.INVALID_TXN_STATE) for tp in wanted - present}
                else:
                    await self.coordinator.add_partitions(tid, pid, epoch, wanted)
            except TxnError as e:
                code = int(e.code)
        return tuple(
            AddPartitionsToTxnTopicResult(
                name=t.name,
                results_by_partition=tuple(
                    AddPartitionsToTxnPartitionResult(
                        partition_index=p, partition_error_code=codes.get((t.name, p), code)
                    )
                    for p in t.partitions
                ),
            )
            for t in topics
        )

    async def add_offsets_to_txn(self, req: AddOffsetsToTxnRequest, ctx: ConnectionContext) -> AddOffsetsToTxnResponse:
        """The group's __consumer_offsets partition joins the transaction: its TxnOffsetCommit is written
        there, and EndTxn's marker makes it visible or drops it."""
        tp = (OFFSETS_TOPIC, self.offsets_partition_for(req.group_id))
        try:
            await self.coordinator.add_partitions(req.transactional_id, req.producer_id, req.producer_epoch, {tp})
        except TxnError as e:
            return AddOffsetsToTxnResponse(error_code=int(e.code))
        return AddOffsetsToTxnResponse()

    # --- EndTxn --------------------------------------------------------------------------------

    async def end_txn(self, req: EndTxnRequest, ctx: ConnectionContext) -> EndTxnResponse:
        try:
            await self.coordinator.end_txn(req.transactional_id, req.producer_id, req.producer_epoch, req.committed)
        except TxnError as e:
            return EndTxnResponse(error_code=int(e.code))
        return EndTxnResponse(producer_id=req.producer_id, producer_epoch=req.producer_epoch)

    # --- WriteTxnMarkers (on partition leaders) --------------------------------------------------

    async def write_txn_markers(self, req: WriteTxnMarkersRequest, ctx: ConnectionContext) -> WriteTxnMarkersResponse:
        results = []
        for m in req.markers:
            jobs = [
                self._marker(t.name, p, m.producer_id, m.producer_epoch, m.transaction_result, m.coordinator_epoch)
                for t in m.topics
                for p in t.partition_indexes
            ]
            codes = iter(await asyncio.gather(*jobs))
            topics = tuple(
                WritableTxnMarkerTopicResult(
                    name=t.name,
                    partitions=tuple(
                        WritableTxnMarkerPartitionResult(partition_index=p, error_code=next(codes))
                        for p in t.partition_indexes
                    ),
                )
                for t in m.topics
            )
            results.append(WritableTxnMarkerResult(producer_id=m.producer_id, topics=topics))
        return WriteTxnMarkersResponse(markers=tuple(results))

    async def _marker(self, topic: str, index: int, pid: int, epoch: int, commit: bool, coord_epoch: int) -> int:
        p = self.replica_manager.partitions.get((topic, index))
        if p is None:
            info = self._image().topics.get(topic)
            known = info is not None and index in info.partitions
            return int(ErrorCode.NOT_LEADER_OR_FOLLOWER if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        try:
            marker = batch_fmt.build_marker(pid, epoch, commit, coord_epoch, int(time.time() * 1000))
            base = p.append_as_leader(marker, -1, int(time.monotonic() * 1000), markers=True)[0]
            await p.wait_for_commit(base, MARKER_TIMEOUT_S)
        except KafkaLiteError as e:
            return int(e.code)
        except TimeoutError:
            return int(ErrorCode.REQUEST_TIMED_OUT)
        self.replica_manager.marker_committed(topic, index, pid, epoch, commit, base)
        return 0

    # --- DescribeTransactions / ListTransactions ---------------------------------------------------

    def describe_transactions(
        self, req: DescribeTransactionsRequest, ctx: ConnectionContext
    ) -> DescribeTransactionsResponse:
        rows = []
        for tid in req.transactional_ids:
            try:
                self.coordinator.check_owner(tid)
            except TxnError as e:
                rows.append(DescribedTxn(error_code=int(e.code), transactional_id=tid))
                continue
            meta = self.coordinator.txns.get(tid)
            if meta is None:
                rows.append(DescribedTxn(error_code=int(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND), transactional_id=tid))
                continue
            rows.append(_described(meta))
        return DescribeTransactionsResponse(transaction_states=tuple(rows))

    def list_transactions(self, req: ListTransactionsRequest, ctx: ConnectionContext) -> ListTransactionsResponse:
        """The transactional ids this broker coordinates, filtered as Kafka filters (states, producer ids, open for
        at least `duration_filter` ms, a regular expression on the id); unknown state names are listed back."""
        import re

        known = {s.value for s in TxnState}
        states = set(req.state_filters)
        pids = set(req.producer_id_filters)
        pattern = re.compile(req.transactional_id_pattern) if req.transactional_id_pattern else None
        now = int(time.time() * 1000)
        rows = []
        for meta in self.coordinator.txns.values():
            if states and meta.state.value not in states:
                continue
            if pids and meta.producer_id not in pids:
                continue
            if req.duration_filter >= 0 and (meta.start_ms < 0 or now - meta.start_ms < req.duration_filter):
                continue
            if pattern is not None and not pattern.fullmatch(meta.transactional_id):
                continue
            rows.append(
                ListedTxn(
                    transactional_id=meta.transactional_id,
                    producer_id=meta.producer_id,
                    transaction_state=meta.state.value,
                )
            )
        return ListTransactionsResponse(
            unknown_state_filters=tuple(sorted(states - known)), transaction_states=tuple(rows)
        )


def _described(meta: TransactionMetadata) -> DescribedTxn:
    by_topic: dict[str, list[int]] = {}
    for t, p in sorted(meta.partitions):
        by_topic.setdefault(t, []).append(p)
    start = (
        datetime.datetime.fromtimestamp(meta.start_ms / 1000, tz=datetime.UTC)
        if meta.start_ms >= 0
        else datetime.datetime.fromtimestamp(0, tz=datetime.UTC)
    )
    return DescribedTxn(
        transactional_id=meta.transactional_id,
        transaction_state=meta.state.value,
        transaction_timeout=datetime.timedelta(milliseconds=meta.timeout_ms),
        transaction_start_time=start,
        producer_id=meta.producer_id,
        producer_epoch=meta.producer_epoch,
        topics=tuple(TopicData(topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
    )
