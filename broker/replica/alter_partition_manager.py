"""AlterPartitionManager: carries partition leaders' ISR proposals to the controller until each has a verdict.

Kafka's AlterPartitionManager. A leader's `LeaderState` proposes an ISR change (broker/replica/replication.py); this
sends it (through the `ControllerChannel`), retries with backoff while there is no verdict, and tells the
leader the outcome. Forgetting a proposal the controller did commit would let the high watermark pass a
replica the controller counts in the ISR, so only a refusal proving it was not applied resets it: see
broker/replica/replication.py alter_partition_outcome. The requests and their verdicts are
broker/replica/replication.py's AlterPartitionAttempts, which the simulator (tests/sim/replication_sim.py) drives too.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from broker.replica.replication import AlterAttempt, AlterOutcome, AlterPartitionAttempts
from broker.utils.repeated_log import RepeatedConditionLog
from net.retry import Backoff

if TYPE_CHECKING:
    from broker.controller.channel import ControllerChannel
    from broker.metrics.broker_metrics import BrokerMetrics
    from broker.replica.partition import Partition

log = logging.getLogger("kafkalite.broker")
# Backoff between attempts that got no verdict (Kafka's AlterPartitionManager backs off too): "no controller"
# and "unreachable" come back at once, and must not spin while an election runs.
ALTER_RETRY_BACKOFF_S = (0.05, 1.0)


class AlterPartitionManager:
    def __init__(
        self, broker_id: int, incarnation: int, channel: "ControllerChannel", metrics: "BrokerMetrics"
    ) -> None:
        self.broker_id = broker_id
        # Sent with every request: the controller refuses proposals of a process that has since restarted.
        self.incarnation = incarnation
        self.channel = channel
        self.metrics = metrics
        # Proposals retried or refused over and over under a fault: one line per partition per 10 s.
        self._log = RepeatedConditionLog(log)
        # This process's requests without a verdict yet, numbered (the controller drops overtaken ones).
        self.attempts = AlterPartitionAttempts()
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    def propose(self, p: "Partition", isr: list[int], partition_epoch: int, silent: list[int]) -> None:
        """The `propose_isr` callback of every Partition: runs `alter` in the background."""
        if self._closed:
            return
        task = asyncio.ensure_future(self.alter(p, isr, partition_epoch, silent))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def alter(self, p: "Partition", isr: list[int], partition_epoch: int, silent: list[int]) -> None:
        """Carry one proposal until it has a verdict, or the same leadership no longer waits for it.
        `silent`: the dropped members that sent no fetch within the lag time (LeaderState's evidence that
        the leader is cut off from them, not that they are slow); retries carry the same evidence."""
        attempt: AlterAttempt | None = self.attempts.propose(
            p.topic, p.partition, p.leader_epoch, isr, partition_epoch, silent
        )
        retry = Backoff(ALTER_RETRY_BACKOFF_S[0] * 1000, ALTER_RETRY_BACKOFF_S[1] * 1000)
        key = (p.topic, p.partition)
        if len(isr) < len(p.isr):  # Kafka's "Shrinking ISR from ... to ..." line
            log.info("%s-%d: shrinking ISR from %s to %s (silent: %s)", p.topic, p.partition, p.isr, isr, silent)
        while attempt is not None:
            body = {
                "topic": p.topic,
                "partition": p.partition,
                "leader": self.broker_id,
                "leader_epoch": attempt.leader_epoch,
                "partition_epoch": partition_epoch,
                "isr": isr,
                "silent": silent,
                "incarnation": self.incarnation,
                "seq": attempt.seq,
            }
            code, message = await self.channel.alter_partition(body)
            answer = self.attempts.answered(attempt.seq, code)
            if answer is None:
                return  # only this task answers its attempts: never, but the type says it may
            outcome, attempt = answer
            if outcome is AlterOutcome.COMMITTED:
                grew = len(isr) > len(p.isr)
                (self.metrics.isr_expands if grew else self.metrics.isr_shrinks).inc()
                self._log.clear(key, how="ISR change committed")
                log.info("%s-%d: ISR change to %s committed", p.topic, p.partition, isr)
                return
            if outcome is AlterOutcome.AWAIT_METADATA:
                # Maybe our own change, committed without its answer reaching us: it keeps bounding the HW
                # until metadata brings the newer state (LeaderState.on_isr_committed settles it).
                self._log.report(
                    key, logging.INFO, "%s-%d: ISR change to %s refused against a newer state: %s", *key, isr, message
                )
                return
            if outcome is AlterOutcome.REJECTED:
                self._log.report(key, logging.WARNING, "%s-%d: ISR change to %s not committed: %s", *key, isr, message)
                p.isr_change_rejected(isr, partition_epoch)
                return
            # No verdict: it may or may not have been applied. Ask again while the same leadership still
            # waits for it; a retry of an applied change is refused as stale (INVALID_UPDATE_VERSION).
            self._log.report(
                key, logging.INFO, "%s-%d: ISR change to %s, no verdict (%s); retrying", *key, isr, message
            )
            await asyncio.sleep(retry.next())
            attempt = None if self._closed else self.attempts.retry(attempt, p.leader_state)

    def close(self) -> None:
        self._closed = True
        for t in list(self._tasks):
            t.cancel()
