"""ShareApis: the share group apis of the client listeners (KIP-932), typed end to end (net/schema/).

- ShareGroupHeartbeat (76), ShareGroupDescribe (77): at the group coordinator (broker/share/group_api.py).
- ShareFetch (78), ShareAcknowledge (79): at the partitions' leaders (broker/share/fetch_api.py).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable

from broker.share.fetch_api import ShareFetchApis
from broker.share.config import ShareKeys
from broker.share.group_api import ShareGroupApis
from broker.share.manager import Persister, SharePartitionManager
from broker.share.sessions import ShareSessionCache

if TYPE_CHECKING:
    from broker.controller import MetadataImage
    from broker.group_coordinator import GroupCoordinator
    from broker.partition import Partition
    from broker.replica_manager import ReplicaManager

MAX_SHARE_SESSIONS = 2000  # Kafka's max.share.session.cache.size... per broker


class ShareApis:
    def __init__(
        self,
        config: ShareKeys,
        coordinator: "GroupCoordinator",
        replica_manager: "ReplicaManager",
        image: Callable[[], "MetadataImage"],
        persister: Persister | None = None,
    ) -> None:
        self.groups = ShareGroupApis(
            coordinator, image, config.group_share_session_timeout_ms, config.group_share_heartbeat_interval_ms
        )
        self.manager = SharePartitionManager(
            replica_manager,
            config.group_share_record_lock_duration_ms,
            config.group_share_delivery_count_limit,
            config.group_share_partition_max_record_locks,
            config.share_auto_offset_reset,
            persister,
        )
        # A session idle as long as a member's session timeout belongs to a member the coordinator dropped.
        sessions = ShareSessionCache(MAX_SHARE_SESSIONS, config.group_share_session_timeout_ms)
        self.fetch = ShareFetchApis(self.manager, replica_manager, image, sessions)
        self.handlers = {**self.groups.handlers, **self.fetch.handlers}

    def tick(self) -> None:
        """The broker's 100 ms tick: member sessions, acquisition locks, idle share sessions."""
        self.groups.tick()
        self.manager.tick(int(time.monotonic() * 1000))
        self.fetch.evict_idle()

    def on_partition_change(self, p: "Partition", change: str) -> None:
        if change != "leader":
            self.manager.drop_partition(p.topic, p.partition)
