"""Topic metadata: partitions, replica assignment, leader, leader epoch, ISR, configs.

On a single broker this is a JSON file written atomically in the first log dir.
The cluster issue replaces the store behind the same `MetadataCache` interface.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from net.errors import InvalidTopicError

LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_LEN = 249


def validate_topic_name(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidTopicError("topic name must be a non-empty string")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_LEN:
        raise InvalidTopicError(f"topic name is longer than {MAX_TOPIC_LEN} characters")
    if not LEGAL_TOPIC.match(name):
        raise InvalidTopicError(f"topic name {name!r} has characters other than ASCII alphanumerics, '.', '_', '-'")
    return name


@dataclass
class PartitionState:
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]


@dataclass
class TopicInfo:
    name: str
    topic_id: str
    partitions: dict[int, PartitionState]
    configs: dict[str, str] = field(default_factory=dict)  # overrides only; defaults come from the broker

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0

    def to_json(self) -> dict:
        d = asdict(self)
        d["partitions"] = [asdict(p) for p in self.partitions.values()]
        return d

    @classmethod
    def from_json(cls, d: dict) -> "TopicInfo":
        parts = {p["partition"]: PartitionState(**p) for p in d["partitions"]}
        return cls(d["name"], d["topic_id"], parts, dict(d.get("configs", {})))


class MetadataCache:
    """What this broker knows about topics, persisted to `path`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.topics: dict[str, TopicInfo] = {}
        self.cluster_id = ""

    def load(self) -> None:
        if self.path.exists():
            data = json.loads(self.path.read_text())
            self.cluster_id = data.get("cluster_id", "")
            self.topics = {t["name"]: TopicInfo.from_json(t) for t in data.get("topics", [])}
        if not self.cluster_id:
            self.cluster_id = uuid.uuid4().hex[:22]
            self.save()

    def save(self) -> None:
        data = {"version": 1, "cluster_id": self.cluster_id, "topics": [t.to_json() for t in self.topics.values()]}
        tmp = self.path.with_suffix(".tmp")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def add_topic(
        self, name: str, num_partitions: int, replicas: list[list[int]], configs: dict[str, str]
    ) -> TopicInfo:
        parts = {
            p: PartitionState(
                p, leader=replicas[p][0], leader_epoch=0, replicas=list(replicas[p]), isr=list(replicas[p])
            )
            for p in range(num_partitions)
        }
        info = TopicInfo(name, uuid.uuid4().hex, parts, dict(configs))
        self.topics[name] = info
        self.save()
        return info

    def remove_topic(self, name: str) -> None:
        self.topics.pop(name, None)
        self.save()

    def set_configs(self, name: str, configs: dict[str, str]) -> None:
        self.topics[name].configs = dict(configs)
        self.save()
