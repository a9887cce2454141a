"""Metadata changes visible on every broker before the request that made them is answered.

A client that creates a topic through one broker and then asks another (a Metadata refresh, a produce to the
new leader, a ListOffsets) must not be told UNKNOWN_TOPIC_OR_PARTITION: the controller commits the records,
but each broker applies them when its own copy of the metadata log catches up (a quorum fetch interval or a
ZooKeeper watch later). So the controller, after a client's CreateTopics, DeleteTopics, CreatePartitions,
AlterConfigs, CreateAcls, DeleteAcls, SCRAM or quota change, asks every live broker to answer once it has
applied everything committed so far (UPDATE_METADATA, Kafka's name for the controller's push of metadata to
brokers in ZooKeeper mode), and answers the client after that.

The wait is bounded (`PROPAGATION_TIMEOUT_S`): a broker that is stalled, cut off or about to be fenced must
not hold admin requests hostage, and the change is committed either way; such a broker is logged and the
answer goes out. Both coordination modes deliver `applied` and `applied_listeners`, so this is the same code
for both.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Awaitable, Callable

from net.protocol import ApiKey

if TYPE_CHECKING:
    from broker.metadata.image import MetadataImage
    from broker.network.peers import BrokerPeers
    from election.coordination import Coordination

log = logging.getLogger("kafkalite.controller")
PROPAGATION_TIMEOUT_S = 5.0


class MetadataPropagation:
    def __init__(
        self,
        broker_id: int,
        coordination: "Coordination",
        image: "MetadataImage",
        peers: "BrokerPeers",
        settled: Callable[[], Awaitable[None]],
    ) -> None:
        self.broker_id = broker_id
        self.coordination = coordination
        self.image = image
        self.peers = peers
        # The replica manager's: partition work a large change queued (created logs, leaderships) is done.
        self._settled = settled
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        coordination.applied_listeners.append(self._on_applied)

    # --- the broker's side: answer once applied ------------------------------------------

    async def applied_here(self, offset: int, timeout_s: float) -> int:
        """Wait until this broker has applied every metadata record below `offset` and made its replicas
        follow them, or `timeout_s` passed; returns the applied offset (what the caller compares)."""
        if self.coordination.applied < offset:
            fut = asyncio.get_running_loop().create_future()
            self._waiters.append((offset, fut))
            try:
                await asyncio.wait_for(asyncio.shield(fut), timeout_s)
            except TimeoutError:
                return self.coordination.applied
            finally:
                self._waiters = [(o, f) for o, f in self._waiters if f is not fut]
        await self._settled()
        return self.coordination.applied

    def _on_applied(self) -> None:
        applied = self.coordination.applied
        for offset, fut in self._waiters:
            if offset <= applied and not fut.done():
                fut.set_result(None)

    # --- the controller's side: ask every live broker --------------------------------------

    async def visible_everywhere(self, timeout_s: float = PROPAGATION_TIMEOUT_S) -> list[int]:
        """Once every live broker has applied what this broker has applied (the controller: all it has
        committed), return; the brokers that did not confirm within `timeout_s` are returned (and logged)."""
        target = self.coordination.applied
        others = [b for b in self.image.live_brokers() if b != self.broker_id]
        body = {"applied": target, "timeout_ms": int(timeout_s * 1000)}

        async def ask(bid: int) -> bool:
            try:
                answer = await self.peers.request(bid, ApiKey.UPDATE_METADATA, body, timeout_s + 1.0)
            except Exception as e:  # unreachable, not answering, an older broker without the API
                log.debug("broker %d did not confirm metadata offset %d: %s", bid, target, e)
                return False
            return not answer.get("error_code") and int(answer.get("applied", -1)) >= target

        confirmed = await asyncio.gather(*(ask(b) for b in others), self.applied_here(target, timeout_s))
        behind = [b for b, ok in zip(others, confirmed) if not ok]
        if behind:
            log.info("metadata offset %d not confirmed by brokers %s in %.1fs: answering", target, behind, timeout_s)
        return behind
