"""The metadata image: every broker's view of the cluster, the committed metadata log applied in order.

Kafka's MetadataImage: brokers (BrokerInfo), topics (TopicInfo) and their partitions (PartitionState), configs,
SCRAM credentials, ACLs and client quotas, as of the last applied record (`MetadataImage.apply`). The controller
(broker/controller/logic.py) decides from it and writes records; each broker applies them to its own image
(broker/metadata/applier.py says what a broker does about them).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from broker.metadata.records import (
    AclRecord,
    BrokerConfigRecord,
    BrokerRecord,
    ClientQuotaRecord,
    ClusterRecord,
    ConfigRecord,
    GroupConfigRecord,
    LeaderChangeRecord,
    MetadataDelta,
    MetadataRecord,
    PartitionRecord,
    RemoveAclRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UntrackedDelta,
    UserScramCredentialRecord,
    decode,
)
from broker.security.scram import ScramCredential
from net.acl import AclBinding

NO_LEADER = -1


@dataclass
class BrokerInfo:
    id: int
    host: str
    port: int
    fenced: bool = True
    # The broker's Kafka-protocol listener as clients should reach it (kafka.advertised.host, kafka.port);
    # None / -1: it has none. Registered with the broker, so every broker's Metadata can name it.
    kafka_host: str | None = None
    kafka_port: int = -1
    # Every client listener as its clients reach it: name -> (advertised host, port, wire) (the "listeners" of
    # its registration; empty in records of brokers from before named listeners).
    listeners: dict[str, tuple[str, int, str]] = field(default_factory=dict)


@dataclass
class PartitionState:
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    partition_epoch: int = 0
    # A reassignment in progress (KIP-455): `replicas` is then target + the original replicas not in it, and
    # these say which of them are being added (not in the original) and removed (not in the target).
    adding_replicas: list[int] = field(default_factory=list)
    removing_replicas: list[int] = field(default_factory=list)

    @property
    def reassigning(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    @property
    def original_replicas(self) -> list[int]:
        return [r for r in self.replicas if r not in self.adding_replicas]

    @property
    def target_replicas(self) -> list[int]:
        return [r for r in self.replicas if r not in self.removing_replicas]


@dataclass
class TopicInfo:
    name: str
    topic_id: str
    partitions: dict[int, PartitionState]
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0


class MetadataImage:
    """Every broker's view of the cluster: the committed metadata log, applied in order."""

    def __init__(self) -> None:
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.cluster_id = ""
        self.controller_id = -1
        # Security (docs/SECURITY.md): SCRAM credentials by (user, mechanism), ACL bindings, client quotas by
        # entity ((("user", name), ("client-id", id)) with None for <default>) -> {quota key: value}.
        self.scram_credentials: dict[tuple[str, str], ScramCredential] = {}
        self.acls: set[AclBinding] = set()
        self.client_quotas: dict[tuple[tuple[str, str | None], ...], dict[str, float]] = {}
        # Dynamic broker configs (broker/server/dynamic_config.py): broker id as a string, or "" for the cluster
        # default -> {config: value}.
        self.broker_configs: dict[str, dict[str, str]] = {}
        # Groups' own configs (KIP-932's GroupConfig, broker/group/group_configs.py): group id -> {config: value}.
        self.group_configs: dict[str, dict[str, str]] = {}
        self.offset = -1  # last applied metadata offset
        self._leader_counts: dict[int, int] | None = None  # leadership_counts(), until the next record
        # When this broker saw each broker fenced (time.monotonic(); local, not replicated): see listed_brokers.
        self.fenced_since: dict[int, float] = {}

    def apply(self, offset: int, record: dict[str, Any], delta: MetadataDelta | None = None) -> None:
        """Apply the metadata log's record at `offset` (its dict, as committed): read into its typed class
        (broker/metadata/records.py; a type not known is skipped) and applied; `delta` collects what changed."""
        typed = decode(record)
        if typed is not None:
            self._leader_counts = None
            _REPLAY[type(typed)](self, typed, delta if delta is not None else _IGNORED)
        self.offset = offset

    def replay(self, record: MetadataRecord, delta: MetadataDelta) -> None:
        """Apply one typed record (Kafka's MetadataDelta.replay), noting in `delta` what it changed. The image
        takes the record's lists and maps as they are: a record is read for the image, not kept elsewhere."""
        self._leader_counts = None
        _REPLAY[type(record)](self, record, delta)

    def _cluster(self, record: ClusterRecord, delta: MetadataDelta) -> None:
        self.cluster_id = record.cluster_id

    def _broker(self, record: BrokerRecord, delta: MetadataDelta) -> None:
        was = self.brokers.get(record.id)
        if not record.fenced:
            self.fenced_since.pop(record.id, None)
        elif was is not None and not was.fenced:
            self.fenced_since[record.id] = time.monotonic()
        self.brokers[record.id] = BrokerInfo(
            record.id,
            record.host,
            record.port,
            record.fenced,
            record.kafka_host,
            record.kafka_port,
            record.listeners,
        )
        delta.broker_changed(record.id)

    def _topic(self, record: TopicRecord, delta: MetadataDelta) -> None:
        self.topics[record.name] = TopicInfo(record.name, record.topic_id, {}, record.configs)
        delta.topic_changed(record.name)

    def _partition(self, record: PartitionRecord, delta: MetadataDelta) -> None:
        t = self.topics.get(record.topic)
        if t is not None:
            t.partitions[record.partition] = PartitionState(
                record.partition,
                record.leader,
                record.leader_epoch,
                record.replicas,
                record.isr,
                record.partition_epoch,
                record.adding_replicas,
                record.removing_replicas,
            )
        delta.partition_changed(record.topic, record.partition)

    def _remove_topic(self, record: RemoveTopicRecord, delta: MetadataDelta) -> None:
        self.topics.pop(record.name, None)
        delta.topic_changed(record.name)

    def _config(self, record: ConfigRecord, delta: MetadataDelta) -> None:
        t = self.topics.get(record.topic)
        if t is not None:
            t.configs = record.configs
        delta.topic_changed(record.topic)

    def _group_config(self, record: GroupConfigRecord, delta: MetadataDelta) -> None:
        if record.configs:
            self.group_configs[record.group] = record.configs
        else:
            self.group_configs.pop(record.group, None)

    def _broker_config(self, record: BrokerConfigRecord, delta: MetadataDelta) -> None:
        if record.configs:
            self.broker_configs[record.broker] = record.configs
        else:
            self.broker_configs.pop(record.broker, None)

    def _leader_change(self, record: LeaderChangeRecord, delta: MetadataDelta) -> None:
        self.controller_id = record.leader

    def _scram(self, record: UserScramCredentialRecord, delta: MetadataDelta) -> None:
        self.scram_credentials[(record.name, record.mechanism)] = record.credential()

    def _remove_scram(self, record: RemoveUserScramCredentialRecord, delta: MetadataDelta) -> None:
        self.scram_credentials.pop((record.name, record.mechanism), None)

    def _acl(self, record: AclRecord, delta: MetadataDelta) -> None:
        self.acls.add(record.binding)

    def _remove_acl(self, record: RemoveAclRecord, delta: MetadataDelta) -> None:
        self.acls.discard(record.binding)

    def _client_quota(self, record: ClientQuotaRecord, delta: MetadataDelta) -> None:
        values = {k: v for k, v in record.values.items() if v is not None}
        if values:
            self.client_quotas[record.entity] = values
        else:
            self.client_quotas.pop(record.entity, None)

    def live_brokers(self) -> list[int]:
        return sorted(b.id for b in self.brokers.values() if not b.fenced)

    def listed_brokers(self, session_timeout_s: float) -> list[BrokerInfo]:
        """The brokers Metadata names: the live ones, and a fenced one until a session timeout has passed
        since its fencing. Kafka fences a broker that stopped only when its session expires, so its clients
        keep a crashed broker listed that long; Kafka Lite fences at once (leaders move at once), but a broker
        that comes back within the timeout never leaves a client's list (librdkafka forgets, and stops using,
        brokers a Metadata answer leaves out). No leader is ever a fenced broker."""
        now = time.monotonic()
        return sorted(
            (
                b
                for b in self.brokers.values()
                if not b.fenced or now - self.fenced_since.get(b.id, -1e9) < session_timeout_s
            ),
            key=lambda b: b.id,
        )

    def leaderships(self, broker_id: int) -> int:
        return self.leadership_counts().get(broker_id, 0)

    def leadership_counts(self) -> dict[int, int]:
        """Partitions led per broker, counted once per image state: fencing a broker that leads thousands of
        partitions elects a leader for each, and a recount per election was quadratic."""
        if self._leader_counts is None:
            counts: dict[int, int] = {}
            for t in self.topics.values():
                for p in t.partitions.values():
                    counts[p.leader] = counts.get(p.leader, 0) + 1
            self._leader_counts = counts
        return self._leader_counts


# How the image applies each record class (MetadataImage.replay).
_REPLAY: dict[type, Callable[[MetadataImage, Any, MetadataDelta], None]] = {
    ClusterRecord: MetadataImage._cluster,
    BrokerRecord: MetadataImage._broker,
    TopicRecord: MetadataImage._topic,
    PartitionRecord: MetadataImage._partition,
    RemoveTopicRecord: MetadataImage._remove_topic,
    ConfigRecord: MetadataImage._config,
    GroupConfigRecord: MetadataImage._group_config,
    BrokerConfigRecord: MetadataImage._broker_config,
    LeaderChangeRecord: MetadataImage._leader_change,
    UserScramCredentialRecord: MetadataImage._scram,
    RemoveUserScramCredentialRecord: MetadataImage._remove_scram,
    AclRecord: MetadataImage._acl,
    RemoveAclRecord: MetadataImage._remove_acl,
    ClientQuotaRecord: MetadataImage._client_quota,
}

_IGNORED = UntrackedDelta()


def partition_record(topic: str, p: PartitionState) -> PartitionRecord:
    """A partition's record from its state, its lists copied (the state may be the image's own)."""
    return PartitionRecord(
        topic,
        p.partition,
        p.leader,
        p.leader_epoch,
        list(p.replicas),
        list(p.isr),
        p.partition_epoch,
        list(p.adding_replicas),
        list(p.removing_replicas),
    )
