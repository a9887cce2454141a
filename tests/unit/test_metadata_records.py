"""broker/metadata/records.py: the typed metadata records the controller makes are written to the metadata log as
the very dicts it wrote before the classes existed (same keys, same order, optional keys left out alike), so a
data directory written by an older broker recovers, and a new log is byte for byte what the old code wrote."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgpack
import pytest

from broker.controller.logic import ControllerLogic
from broker.log.config import LogConfig
from broker.log.log import Log
from broker.metadata.image import MetadataImage
from broker.metadata.metadata_log import METADATA_TOPIC, DiskMetadataLog
from broker.metadata.records import (
    REGISTRY,
    LeaderChangeRecord,
    MetadataRecord,
    TopicRecord,
    decode,
)
from broker.security.scram import ScramCredential
from net.acl import AclBinding, AclBindingFilter, AclOperation, AclPermission, PatternType, ResourceType

BINDING = AclBinding(
    ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:alice", "*", AclOperation.READ, AclPermission.ALLOW
)
CREDENTIAL = ScramCredential("SCRAM-SHA-256", b"salt", b"stored", b"server", 4096)
LISTENERS = {"PLAINTEXT": ("k2", 19002, "kafka"), "CLIENTS": ("10.0.0.2", 9202, "native")}
KAFKA_2 = {
    "kafka_host": "k2",
    "kafka_port": 19002,
    "listeners": [["CLIENTS", "10.0.0.2", 9202, "native"], ["PLAINTEXT", "k2", 19002, "kafka"]],
}

# One record of every type, each variant of the optional keys, literally as the dict-making code wrote them
# (docs/FORMAT.md §5): what the metadata logs of existing data directories hold.
OLD_FORM: list[dict[str, Any]] = [
    {"type": "leader_change", "epoch": 1, "leader": 1, "voters": [1, 2, 3]},
    {"type": "cluster", "cluster_id": "e781fe5a54c748ab81bab2"},
    {"type": "broker", "id": 1, "host": "127.0.0.1", "port": 9001, "fenced": False},
    {"type": "broker", "id": 2, "host": "127.0.0.1", "port": 9002, "fenced": True, **KAFKA_2},
    {"type": "broker", "id": 3, "host": "h3", "port": 9003, "fenced": False, "kafka_host": None, "kafka_port": 9},
    {"type": "topic", "name": "orders", "topic_id": "35a4c06f", "configs": {"cleanup.policy": "compact"}},
    {
        "type": "partition",
        "topic": "orders",
        "partition": 0,
        "leader": 1,
        "leader_epoch": 0,
        "replicas": [1, 3],
        "isr": [1, 3],
        "partition_epoch": 0,
    },
    {
        "type": "partition",
        "topic": "orders",
        "partition": 1,
        "leader": -1,
        "leader_epoch": 4,
        "replicas": [3, 2, 1],
        "isr": [1],
        "partition_epoch": 7,
        "adding_replicas": [3],
        "removing_replicas": [],
    },
    {"type": "config", "topic": "orders", "configs": {"retention.ms": "1000"}},
    {"type": "group_config", "group": "g", "configs": {"share.record.lock.duration.ms": "15000"}},
    {"type": "broker_config", "broker": "", "configs": {"leader.replication.throttled.rate": "1000"}},
    {
        "type": "user_scram_credential",
        "name": "alice",
        "mechanism": "SCRAM-SHA-256",
        "salt": "c2FsdA==",
        "stored_key": "c3RvcmVk",
        "server_key": "c2VydmVy",
        "iterations": 4096,
    },
    {"type": "remove_user_scram_credential", "name": "bob", "mechanism": "SCRAM-SHA-512"},
    {"type": "acl", "binding": [2, "orders", 3, "User:alice", "*", 3, 3]},
    {"type": "remove_acl", "binding": [2, "orders", 3, "User:bob", "*", 4, 2]},
    {"type": "client_quota", "entity": [["user", "alice"], ["client-id", None]], "values": {"producer_byte_rate": 1e3}},
    {"type": "remove_topic", "name": "gone"},
]


def typed(record: dict[str, Any]) -> MetadataRecord:
    r = decode(record)
    assert r is not None
    return r


def packed(record: dict[str, Any]) -> bytes:
    return msgpack.packb(record, use_bin_type=True)  # as DiskMetadataLog and the ZooKeeper proposals pack it


def test_every_record_type_reads_from_its_old_dict_and_writes_it_back_byte_for_byte():
    assert {d["type"] for d in OLD_FORM} == set(REGISTRY), "a record type without its old form here"
    for old in OLD_FORM:
        typed = decode(old)
        assert typed is not None and typed.TYPE == old["type"]
        again = typed.to_dict()
        assert list(again) == list(old) and packed(again) == packed(old), old["type"]
        assert decode(again) == typed
    # A field added later reads as its default from an older record; a required one missing is an error; a
    # type this broker does not know is skipped.
    assert decode({"type": "leader_change", "epoch": 3}) == LeaderChangeRecord(epoch=3, leader=-1, voters=[])
    with pytest.raises(KeyError, match="topic_id"):
        decode({"type": "topic", "name": "t", "configs": {}})
    image = MetadataImage()
    image.apply(7, {"type": "from_a_newer_broker", "x": 1})
    assert image.offset == 7 and decode({"type": "from_a_newer_broker"}) is None


def test_the_controller_writes_what_the_dict_making_code_wrote():
    image = MetadataImage()
    logic = ControllerLogic(image)
    written: list[tuple[list[MetadataRecord], list[dict[str, Any]]]] = []

    def commit(records: list[MetadataRecord], *old: dict[str, Any]) -> list[MetadataRecord]:
        written.append((records, list(old)))
        for r in records:
            image.apply(image.offset + 1, r.to_dict())
        return records

    def broker(b: int, fenced: bool = False, **kafka: Any) -> dict[str, Any]:
        return {"type": "broker", "id": b, "host": "127.0.0.1", "port": 9000 + b, "fenced": fenced, **kafka}

    for b in (1, 2, 3):
        commit(logic.register_broker(b, "127.0.0.1", 9000 + b), broker(b))
    commit(logic.set_kafka_endpoint(2, "k2", 19002, LISTENERS), broker(2, **KAFKA_2))
    commit(logic.fence_broker(2), broker(2, True, **KAFKA_2))
    commit(logic.register_broker(2, "127.0.0.1", 9002), broker(2, **KAFKA_2))
    created = logic.create_topic("orders", -1, -1, {"cleanup.policy": "compact"}, [[0, [1, 2]], [1, [2, 3]]])
    assert isinstance(created[0], TopicRecord)
    topic_id = created[0].topic_id  # a fresh uuid4
    commit(
        created,
        {"type": "topic", "name": "orders", "topic_id": topic_id, "configs": {"cleanup.policy": "compact"}},
        partition(0, 1, 0, [1, 2], [1, 2], 0),
        partition(1, 2, 0, [2, 3], [2, 3], 0),
    )
    commit(logic.set_configs("orders", {"retention.ms": "1000"}), OLD_FORM[8])
    moving = partition(0, 1, 1, [3, 2, 1], [1, 2], 1)
    moving["adding_replicas"], moving["removing_replicas"] = [3], [1]
    commit(logic.reassign("orders", 0, [3, 2]), moving)
    commit(logic.alter_partition("orders", 0, 1, 1, 1, [1, 2, 3]), partition(0, 3, 2, [3, 2], [2, 3], 3))
    commit(logic.set_group_configs("g", {"share.record.lock.duration.ms": "15000"}), OLD_FORM[9])
    commit(logic.set_broker_configs("", {"leader.replication.throttled.rate": "1000"}), OLD_FORM[10])
    commit(logic.alter_scram([("alice", CREDENTIAL)], []), OLD_FORM[11])
    removed = {"type": "remove_user_scram_credential", "name": "alice", "mechanism": "SCRAM-SHA-256"}
    commit(logic.alter_scram([], [("alice", "SCRAM-SHA-256")]), removed)
    commit(logic.create_acls([BINDING]), OLD_FORM[13])
    unbound = {"type": "remove_acl", "binding": OLD_FORM[13]["binding"]}
    commit(logic.delete_acls([AclBindingFilter(principal="User:alice")]), unbound)
    quota = logic.alter_client_quota([("user", "alice"), ("client-id", None)], {"producer_byte_rate": 1e3})
    commit(quota, OLD_FORM[15])
    commit(logic.delete_topic("orders"), {"type": "remove_topic", "name": "orders"})
    for records, old in written:
        assert [packed(r.to_dict()) for r in records] == [packed(d) for d in old], old
    # What they made of the image: the same as the old dicts' (each was applied as the log holds it).
    assert image.brokers[2].listeners == LISTENERS and not image.brokers[2].fenced and not image.topics
    assert not image.scram_credentials and not image.acls and image.group_configs == {"g": OLD_FORM[9]["configs"]}
    assert image.client_quotas == {(("user", "alice"), ("client-id", None)): {"producer_byte_rate": 1e3}}


def partition(p: int, leader: int, epoch: int, replicas: list[int], isr: list[int], pe: int) -> dict[str, Any]:
    return {
        "type": "partition",
        "topic": "orders",
        "partition": p,
        "leader": leader,
        "leader_epoch": epoch,
        "replicas": replicas,
        "isr": isr,
        "partition_epoch": pe,
    }


def metadata_log(root: Path) -> Log:
    return Log(root / f"{METADATA_TOPIC}-0", METADATA_TOPIC, 0, LogConfig.from_props({}))


def test_a_metadata_log_written_in_the_old_dict_form_recovers_and_a_new_one_is_the_same_bytes(tmp_path: Path):
    old_dir, new_dir = tmp_path / "old", tmp_path / "new"
    for root, records in ((old_dir, OLD_FORM), (new_dir, [typed(d).to_dict() for d in OLD_FORM])):
        log = metadata_log(root)
        DiskMetadataLog(log).append(records[:5], 1)
        DiskMetadataLog(log).append(records[5:], 2)
        log.close()
    segments = sorted(p.name for p in (old_dir / f"{METADATA_TOPIC}-0").iterdir() if p.suffix == ".log")
    assert segments
    for name in [*segments, "leader-epoch-checkpoint"]:
        old = (old_dir / f"{METADATA_TOPIC}-0" / name).read_bytes()
        assert old and old == (new_dir / f"{METADATA_TOPIC}-0" / name).read_bytes(), name
    # A broker starting on the old directory: the log reopened, read and applied in order.
    log = metadata_log(old_dir)
    entries = DiskMetadataLog(log).read(0, 1000)
    log.close()
    assert [r for _, _, r in entries] == OLD_FORM and [e for _, e, _ in entries] == [1] * 5 + [2] * 12
    image = MetadataImage()
    for offset, _, record in entries:
        image.apply(offset, record)
    assert image.controller_id == 1 and image.cluster_id == OLD_FORM[1]["cluster_id"]
    assert image.brokers[2].fenced and image.brokers[2].listeners == LISTENERS and image.brokers[3].kafka_port == 9
    st = image.topics["orders"].partitions[1]
    assert (st.leader, st.replicas, st.adding_replicas, st.partition_epoch) == (-1, [3, 2, 1], [3], 7)
    assert image.topics["orders"].configs == {"retention.ms": "1000"}
    assert image.scram_credentials[("alice", "SCRAM-SHA-256")] == CREDENTIAL and image.acls == {BINDING}
    assert image.client_quotas == {(("user", "alice"), ("client-id", None)): {"producer_byte_rate": 1e3}}
    assert image.broker_configs == {"": {"leader.replication.throttled.rate": "1000"}} and image.offset == 16
