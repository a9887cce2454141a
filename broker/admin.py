"""AdminManager: create, delete and reconfigure topics, and keep the
ReplicaManager's partitions in step with the metadata.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from broker.metadata import MetadataCache, TopicInfo, validate_topic_name
from broker.partition import Partition
from net.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.log.config import LogConfig
    from broker.log.manager import LogManager
    from broker.replica_manager import ReplicaManager

log = logging.getLogger("kafkalite.admin")
MAX_PARTITIONS = 10000


class AdminManager:
    def __init__(
        self,
        config: "BrokerConfig",
        metadata: MetadataCache,
        log_manager: "LogManager",
        replica_manager: "ReplicaManager",
    ) -> None:
        self.config = config
        self.metadata = metadata
        self.log_manager = log_manager
        self.replica_manager = replica_manager
        self.live_brokers = [config.broker_id]

    def topic_config(self, info: TopicInfo) -> "LogConfig":
        return self.config.topic_config_defaults().merged(info.configs)

    def load(self) -> None:
        """Open a Partition for every assigned replica known to the metadata."""
        for info in self.metadata.topics.values():
            self._open_partitions(info)

    def _open_partitions(self, info: TopicInfo) -> None:
        cfg = self.topic_config(info)
        for st in info.partitions.values():
            if self.config.broker_id not in st.replicas:
                continue
            lg = self.log_manager.get_or_create_log(info.name, st.partition, cfg)
            self.replica_manager.add_partition(
                Partition(
                    info.name,
                    st.partition,
                    lg,
                    self.config.broker_id,
                    st.leader,
                    st.leader_epoch,
                    st.isr,
                    cfg.min_insync_replicas,
                )
            )

    def create_topic(
        self,
        name: object,
        num_partitions: int | None,
        replication_factor: int | None,
        configs: dict | None,
        validate_only: bool = False,
    ) -> TopicInfo | None:
        name = validate_topic_name(name)
        if name in self.metadata.topics:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        n = self.config.num_partitions if num_partitions in (None, -1) else num_partitions
        rf = self.config.default_replication_factor if replication_factor in (None, -1) else replication_factor
        if not isinstance(n, int) or not 1 <= n <= MAX_PARTITIONS:
            raise InvalidPartitionsError(f"number of partitions must be between 1 and {MAX_PARTITIONS}, got {n}")
        if not isinstance(rf, int) or rf < 1:
            raise InvalidReplicationFactorError(f"replication factor must be >= 1, got {rf}")
        if rf > len(self.live_brokers):
            raise InvalidReplicationFactorError(
                f"replication factor {rf} is larger than the number of available brokers ({len(self.live_brokers)})"
            )
        overrides = self._validate_configs(configs or {})
        if validate_only:
            return None
        brokers = sorted(self.live_brokers)
        # Round-robin leaders and replicas across brokers, as Kafka's default assignment does.
        replicas = [[brokers[(p + r) % len(brokers)] for r in range(rf)] for p in range(n)]
        info = self.metadata.add_topic(name, n, replicas, overrides)
        self._open_partitions(info)
        log.info("created topic %s with %d partitions, replication factor %d, configs %s", name, n, rf, overrides)
        return info

    def _validate_configs(self, configs: dict) -> dict[str, str]:
        if not isinstance(configs, dict):
            raise InvalidConfigError("configs must be a map of name to value")
        overrides = {str(k): str(v) for k, v in configs.items()}
        self.config.topic_config_defaults().merged(overrides)  # raises InvalidConfigError naming the key
        return overrides

    def delete_topic(self, name: object) -> None:
        if not isinstance(name, str) or name not in self.metadata.topics:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        info = self.metadata.topics[name]
        for p in info.partitions:
            if self.replica_manager.remove_partition(name, p) is not None:
                self.log_manager.delete_log(name, p)
        self.metadata.remove_topic(name)
        log.info("deleted topic %s", name)

    def alter_configs(self, name: object, changes: dict, validate_only: bool = False) -> None:
        """Incremental: a value sets the key, None deletes the override (back to the default)."""
        if not isinstance(name, str) or name not in self.metadata.topics:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        if not isinstance(changes, dict):
            raise InvalidConfigError("configs must be a map of name to value")
        info = self.metadata.topics[name]
        merged = dict(info.configs)
        for k, v in changes.items():
            if v is None:
                merged.pop(str(k), None)
            else:
                merged[str(k)] = str(v)
        overrides = self._validate_configs(merged)
        if validate_only:
            return
        self.metadata.set_configs(name, overrides)
        cfg = self.topic_config(info)
        for p in info.partitions:
            part = self.replica_manager.partitions.get((name, p))
            if part is not None:
                part.log.update_config(cfg)
                part.min_insync_replicas = cfg.min_insync_replicas
        log.info("altered configs of topic %s: %s", name, changes)

    def describe_configs(self, name: str) -> dict[str, tuple[str, bool]]:
        if name not in self.metadata.topics:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        info = self.metadata.topics[name]
        props = self.topic_config(info).to_props()
        return {k: (str(v), k not in info.configs) for k, v in sorted(props.items())}
