"""The metadata log's records as typed classes, one per record type, with a registry by type name (Kafka's
MetadataRecordType and its ApiMessage classes: TopicRecord, PartitionRecord, RegisterBrokerRecord, ...).

On the log a record stays what it always was, the msgpack of a dict with a "type" (docs/FORMAT.md §5). The
controller (broker/controller/logic.py) makes the typed records and `to_dict` gives each its dict only where it
is written to the log (ControllerService proposing it): the same keys in the same order as ever, optional ones
left out as before, so a log written before the classes existed reads the same and a new one is byte for byte
what the dicts made. `decode` reads one into its class (None for a type this broker does not know, which the
image skips, as Kafka skips what it cannot read), `MetadataImage.apply` (broker/metadata/image.py) applies the
typed record and says in a `MetadataDelta` what it changed, so that nothing downstream sniffs a record's fields
to find out.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Callable, ClassVar

from broker.security.scram import ScramCredential
from net.acl import AclBinding


class _Record:
    """A record class: its fields read from the record's dict by name, a missing one taking the field's
    default (a field added later), a map or list copied (None read as empty), so the image owns what it keeps;
    written as "type" then its fields in their order. A class whose fields need more overrides `from_dict` and
    `to_dict`. A record is a value made to be written: `to_dict` shares its maps and lists (the makers copy
    what they take from the image)."""

    __slots__ = ()
    TYPE: ClassVar[str]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Any:
        return cls(**{name: read(d[name]) if name in d else _missing(cls, name) for name, read in _readers(cls)})

    def to_dict(self) -> dict[str, Any]:
        """The record as the metadata log holds it (docs/FORMAT.md §5)."""
        out: dict[str, Any] = {"type": self.TYPE}
        for name, _ in _readers(type(self)):
            out[name] = getattr(self, name)
        return out


def _missing(cls: type, name: str) -> Any:
    f = cls.__dataclass_fields__[name]  # type: ignore[attr-defined]
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    raise KeyError(f"{cls.__name__} record without {name!r}")


def _readers(cls: type) -> list[tuple[str, Callable[[Any], Any]]]:
    """Per field, how its value is read: a map or list copied, anything else as it is (worked out once)."""
    if (known := _READERS.get(cls)) is not None:
        return known

    def same(v: Any) -> Any:
        return v

    def as_dict(v: Any) -> Any:
        return dict(v or ())

    def as_list(v: Any) -> Any:
        return list(v or ())

    out: list[tuple[str, Callable[[Any], Any]]] = []
    for f in fields(cls):
        kind = str(f.type)
        out.append((f.name, as_dict if kind.startswith("dict[") else as_list if kind.startswith("list[") else same))
    _READERS[cls] = out
    return out


_READERS: dict[type, list[tuple[str, Callable[[Any], Any]]]] = {}


@dataclass(slots=True)
class ClusterRecord(_Record):
    TYPE: ClassVar[str] = "cluster"
    cluster_id: str


@dataclass(slots=True)
class BrokerRecord(_Record):
    """A broker's registration, or its fencing / unfencing (Kafka's RegisterBrokerRecord and its fence records)."""

    TYPE: ClassVar[str] = "broker"
    id: int
    host: str
    port: int
    fenced: bool
    kafka_host: str | None = None
    kafka_port: int = -1
    # Its other listeners: name -> (host, port, wire).
    listeners: dict[str, tuple[str, int, str]] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BrokerRecord:
        return cls(
            d["id"],
            d["host"],
            d["port"],
            d["fenced"],
            d.get("kafka_host"),
            d.get("kafka_port", -1),
            {row[0]: (row[1], row[2], row[3]) for row in d.get("listeners") or ()},
        )

    def to_dict(self) -> dict[str, Any]:
        # Without a Kafka listener its keys are left out, and so are no other listeners (records of older brokers).
        out: dict[str, Any] = {"type": self.TYPE, "id": self.id, "host": self.host, "port": self.port}
        out["fenced"] = self.fenced
        if self.kafka_port >= 0:
            out["kafka_host"], out["kafka_port"] = self.kafka_host, self.kafka_port
        if self.listeners:
            out["listeners"] = [[name, *ep] for name, ep in sorted(self.listeners.items())]
        return out


@dataclass(slots=True)
class TopicRecord(_Record):
    TYPE: ClassVar[str] = "topic"
    name: str
    topic_id: str
    configs: dict[str, Any]


@dataclass(slots=True)
class PartitionRecord(_Record):
    """A partition's whole state in one leader and partition epoch (Kafka's PartitionRecord and
    PartitionChangeRecord in one): every change writes it again."""

    TYPE: ClassVar[str] = "partition"
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    partition_epoch: int
    adding_replicas: list[int] = field(default_factory=list)
    removing_replicas: list[int] = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PartitionRecord:
        # Read field by field, not by the generic reader: a flood commits thousands of these at once.
        return cls(
            d["topic"],
            d["partition"],
            d["leader"],
            d["leader_epoch"],
            list(d["replicas"]),
            list(d["isr"]),
            d["partition_epoch"],
            list(d.get("adding_replicas") or ()),
            list(d.get("removing_replicas") or ()),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": self.TYPE,
            "topic": self.topic,
            "partition": self.partition,
            "leader": self.leader,
            "leader_epoch": self.leader_epoch,
            "replicas": self.replicas,
            "isr": self.isr,
            "partition_epoch": self.partition_epoch,
        }
        if self.adding_replicas or self.removing_replicas:  # left out otherwise: never reassigned, the old shape
            out["adding_replicas"], out["removing_replicas"] = self.adding_replicas, self.removing_replicas
        return out


@dataclass(slots=True)
class RemoveTopicRecord(_Record):
    TYPE: ClassVar[str] = "remove_topic"
    name: str


@dataclass(slots=True)
class ConfigRecord(_Record):
    """A topic's whole set of config overrides."""

    TYPE: ClassVar[str] = "config"
    topic: str
    configs: dict[str, Any]


@dataclass(slots=True)
class GroupConfigRecord(_Record):
    """A group's own configs (KIP-932's GroupConfig); empty: back to the broker's."""

    TYPE: ClassVar[str] = "group_config"
    group: str
    configs: dict[str, str]


@dataclass(slots=True)
class BrokerConfigRecord(_Record):
    """Dynamic broker configs of one broker (its id as a string), or the cluster default's (""); empty: none."""

    TYPE: ClassVar[str] = "broker_config"
    broker: str
    configs: dict[str, str]


@dataclass(slots=True)
class LeaderChangeRecord(_Record):
    """A new controller's first record of its epoch. The quorum (election/quorum.py leader_change_record) writes
    it as its dict: the election core sits below the broker and knows no broker classes."""

    TYPE: ClassVar[str] = "leader_change"
    epoch: int = -1
    leader: int = -1
    voters: list[int] = field(default_factory=list)


@dataclass(slots=True)
class UserScramCredentialRecord(_Record):
    """A user's SCRAM credential for one mechanism: salt, StoredKey and ServerKey in base64, as
    `ScramCredential.to_record` encodes them (also for bootstrap.records, broker/security/bootstrap.py)."""

    TYPE: ClassVar[str] = "user_scram_credential"
    name: str
    mechanism: str
    salt: str
    stored_key: str
    server_key: str
    iterations: int

    @classmethod
    def of(cls, user: str, cred: ScramCredential) -> UserScramCredentialRecord:
        record: UserScramCredentialRecord = cls.from_dict(cred.to_record(user))
        return record

    def credential(self) -> ScramCredential:
        return ScramCredential.from_record(self.to_dict())


@dataclass(slots=True)
class RemoveUserScramCredentialRecord(_Record):
    TYPE: ClassVar[str] = "remove_user_scram_credential"
    name: str
    mechanism: str


@dataclass(slots=True)
class _BindingRecord(_Record):
    """A record of one ACL binding; on the log as the binding's wire form (AclBinding.to_wire, net/acl.py)."""

    binding: AclBinding

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Any:
        return cls(AclBinding.from_wire(d["binding"]))

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.TYPE, "binding": self.binding.to_wire()}


@dataclass(slots=True)
class AclRecord(_BindingRecord):
    TYPE: ClassVar[str] = "acl"


@dataclass(slots=True)
class RemoveAclRecord(_BindingRecord):
    TYPE: ClassVar[str] = "remove_acl"


@dataclass(slots=True)
class ClientQuotaRecord(_Record):
    """An entity's quotas ((("user", name), ("client-id", id)), None for <default>); a None value removes one."""

    TYPE: ClassVar[str] = "client_quota"
    entity: tuple[tuple[str, str | None], ...]
    values: dict[str, float | None]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ClientQuotaRecord:
        return cls(tuple((k, v) for k, v in d["entity"]), dict(d["values"]))

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.TYPE, "entity": [list(e) for e in self.entity], "values": self.values}


MetadataRecord = (
    ClusterRecord
    | BrokerRecord
    | TopicRecord
    | PartitionRecord
    | RemoveTopicRecord
    | ConfigRecord
    | GroupConfigRecord
    | BrokerConfigRecord
    | LeaderChangeRecord
    | UserScramCredentialRecord
    | RemoveUserScramCredentialRecord
    | AclRecord
    | RemoveAclRecord
    | ClientQuotaRecord
)

_CLASSES: tuple[type[MetadataRecord], ...] = (
    ClusterRecord,
    BrokerRecord,
    TopicRecord,
    PartitionRecord,
    RemoveTopicRecord,
    ConfigRecord,
    GroupConfigRecord,
    BrokerConfigRecord,
    LeaderChangeRecord,
    UserScramCredentialRecord,
    RemoveUserScramCredentialRecord,
    AclRecord,
    RemoveAclRecord,
    ClientQuotaRecord,
)
# The registry: a record's "type" -> the reader of its class.
REGISTRY: dict[str, Callable[[dict[str, Any]], MetadataRecord]] = {cls.TYPE: cls.from_dict for cls in _CLASSES}


def decode(record: dict[str, Any]) -> MetadataRecord | None:
    """The typed record of a metadata log record (its dict), or None for a type not in the registry."""
    reader = REGISTRY.get(record.get("type", ""))
    return reader(record) if reader is not None else None


@dataclass
class MetadataDelta:
    """What applied records changed (Kafka's MetadataDelta), for the image's readers to act on only that.

    `topics`: per topic the partitions whose records were applied, or None for the whole topic (created,
    removed, its configs changed); `brokers`: the brokers whose registration or fencing changed."""

    topics: dict[str, set[int] | None] = field(default_factory=dict)
    brokers: set[int] = field(default_factory=set)

    def topic_changed(self, name: str) -> None:
        self.topics[name] = None

    def partition_changed(self, topic: str, partition: int) -> None:
        parts = self.topics.get(topic, set())
        if parts is not None:
            parts.add(partition)
            self.topics[topic] = parts

    def broker_changed(self, broker_id: int) -> None:
        self.brokers.add(broker_id)


class UntrackedDelta(MetadataDelta):
    """The delta of an apply nobody asks what it changed (tools, tests): notes nothing."""

    def topic_changed(self, name: str) -> None:
        pass

    def partition_changed(self, topic: str, partition: int) -> None:
        pass

    def broker_changed(self, broker_id: int) -> None:
        pass
