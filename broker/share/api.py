"""ShareApis: the share group apis (KIP-932), typed end to end (net/schema/).

- ShareGroupHeartbeat (76), ShareGroupDescribe (77): at the group coordinator (broker/share/group_api.py).
- ShareFetch (78), ShareAcknowledge (79): at the partitions' leaders (broker/share/fetch_api.py).
- DescribeShareGroupOffsets (90), AlterShareGroupOffsets (91), DeleteShareGroupOffsets (92) and DeleteGroups of
  a share group (`offsets.delete_group`): at the group coordinator (broker/share/offsets_api.py).
- Initialize/Read/Write/DeleteShareGroupState (83-86), ReadShareGroupStateSummary (87): at the share coordinator,
  from the leaders and the group coordinator (broker/share/state_api.py; their side is broker/share/persister.py).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Awaitable, Callable

from broker.group.group_configs import GroupConfigs
from broker.share.config import ShareKeys
from broker.share.coordinator import ShareCoordinator
from broker.share.fetch_api import ShareFetchApis
from broker.share.group_api import ShareGroupApis
from broker.share.manager import SharePartitionManager
from broker.share.offsets_api import ShareOffsetsApis
from broker.share.persister import ShareStatePersister
from broker.share.sessions import ShareSessionCache
from broker.share.state_api import ShareStateApis
from broker.share.state_records import SHARE_STATE_TOPIC

if TYPE_CHECKING:
    from broker.group.coordinator import GroupCoordinator
    from broker.metadata.image import MetadataImage
    from broker.replica.partition import Partition
    from broker.replica.replica_manager import ReplicaManager

MAX_SHARE_SESSIONS = 2000  # Kafka's max.share.session.cache.size per broker


class ShareApis:
    def __init__(
        self,
        config: ShareKeys,
        configs: GroupConfigs,
        broker_id: int,
        group_coordinator: "GroupCoordinator",
        replica_manager: "ReplicaManager",
        image: Callable[[], "MetadataImage"],
        call: Callable[[int, object, float], Awaitable[object]],
        create_topic: Callable[[str, int, int, dict[str, str]], Awaitable[None]],
        brokers: Callable[[], int],
    ) -> None:
        self.config = config
        self.groups = ShareGroupApis(group_coordinator, image, configs)
        self.coordinator = ShareCoordinator(
            replica_manager,
            config.share_coordinator_state_topic_num_partitions,
            config.share_coordinator_write_timeout_ms,
        )
        self._create_topic = create_topic
        self._brokers = brokers
        persister = ShareStatePersister(broker_id, self.coordinator, image, call, self._create_state_topic)
        self.manager = SharePartitionManager(replica_manager, configs, persister)
        # A session idle as long as a member's session timeout belongs to a member the coordinator dropped.
        sessions = ShareSessionCache(MAX_SHARE_SESSIONS, config.group_share_session_timeout_ms)
        self.fetch = ShareFetchApis(self.manager, replica_manager, image, sessions)
        self.offsets = ShareOffsetsApis(self.groups, persister, image)
        self.handlers = {
            **self.groups.handlers,
            **self.fetch.handlers,
            **ShareStateApis(self.coordinator, image).handlers,
            **self.offsets.handlers,
        }

    async def _create_state_topic(self) -> None:
        """Kafka's share coordinator makes __share_group_state on first use, as __consumer_offsets."""
        cfg = self.config
        rf = cfg.share_coordinator_state_topic_replication_factor
        if rf < 1:
            rf = min(3, max(1, self._brokers()))
        configs = {
            "cleanup.policy": "compact",
            "min.insync.replicas": str(min(cfg.share_coordinator_state_topic_min_isr, rf)),
        }
        await self._create_topic(SHARE_STATE_TOPIC, cfg.share_coordinator_state_topic_num_partitions, rf, configs)

    def tick(self) -> None:
        """The broker's 100 ms tick: acquisition locks, idle share sessions (members' sessions: the group
        coordinator's tick)."""
        self.manager.tick(int(time.monotonic() * 1000))
        self.fetch.evict_idle()

    def on_partition_change(self, p: "Partition", change: str) -> None:
        self.coordinator.on_partition_change(p, change)
        if change != "leader":
            self.manager.drop_partition(p.topic, p.partition)

    def close(self) -> None:
        self.coordinator.close()
