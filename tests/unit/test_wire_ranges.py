"""Issue 25 §3: every number read off the wire is checked against its Kafka type before use, and nothing out
of range is ever persisted (net/wire_types.py, broker/network/request_ranges.py, election/messages.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker.controller.quorum_driver import read_state, write_state
from broker.log.config import LogConfig
from broker.log.log import Log
from broker.metadata.metadata_log import DiskMetadataLog
from broker.network.native_legacy import LEGACY
from broker.network.request_ranges import check_request
from broker.security.config import SECRET_USER
from broker.security.inter_broker import secret_credential, secret_lookup
from broker.server.config import BrokerConfig
from election import QuorumConfig, QuorumNode
from election.log import InMemoryLog
from election.messages import BeginEpoch, FetchRequest, FetchResponse, Persist, from_wire
from net.errors import InvalidConfigError
from net.messages import decode, encode
from net.protocol import ApiKey
from net.schema.heartbeat import HeartbeatRequest
from net.wire_types import EPOCH, INT32_MAX, INT64_MAX, OFFSET, REPLICA_ID, WireRangeError, check_all_int64

HUGE = (2**31, 2**63 - 1, 2**63, 2**64 - 1, -(2**63) - 1)


def test_kafka_types_bound_their_values():
    assert EPOCH.check(INT32_MAX, "e") == INT32_MAX
    assert OFFSET.check(INT64_MAX, "o") == INT64_MAX
    assert REPLICA_ID.check(-1, "r") == -1
    for bad, t in [(2**31, EPOCH), (-1, EPOCH), (2**63, OFFSET), (-1, OFFSET), (-2, REPLICA_ID), (True, EPOCH)]:
        with pytest.raises(WireRangeError):
            t.check(bad, "field")
    with pytest.raises(WireRangeError, match="int64"):
        check_all_int64({"topics": [["t", [[0, 2**64 - 1]]]]}, "request")
    check_all_int64({"a": [1, -1, INT64_MAX, b"\xff" * 9, "x"]}, "request")


@pytest.mark.parametrize("bad", [2**63, -(2**63) - 1, 2**64 - 1])
def test_an_out_of_range_int_is_found_wherever_it_sits(bad):
    # The walk checks plain ints inline in lists and dict values (a fetch of thousands of rows, issue 25 §4),
    # and still everywhere else: a top-level number, a dict key, deep nesting, among strings and bytes.
    for body in (
        bad,
        [bad],
        ["t", b"x", None, 1.5, [0, 1, [2, bad]]],
        {"k": bad},
        {bad: "v"},
        {"topics": [["t", [[0, 5, 1024, -1, -1]] * 1000 + [[1, bad, 1024, -1, -1]]]]},
        {"a": {"b": {"c": [True, False, {"d": [bad]}]}}},
    ):
        with pytest.raises(WireRangeError, match="int64"):
            check_all_int64(body, "request")
    check_all_int64({"ok": [True, False, INT64_MAX, -(2**63), {7: [None, 1.5]}]}, "request")
    with pytest.raises(WireRangeError, match="nested too deeply"):
        deep: list = []
        for _ in range(40):
            deep = [deep]
        check_all_int64(deep, "request")


@pytest.mark.parametrize("epoch", HUGE)
def test_quorum_messages_refuse_epochs_beyond_int32(epoch):
    for wire in (
        ["be", epoch, 3],
        ["es", epoch, 1, 0, 0, 0],
        ["ev", epoch, 1, 2],
        ["fq", epoch, 1, 0, 0],
        ["fr", epoch, None, 1, [], 0, None, None, None, -1, -1],
    ):
        with pytest.raises(ValueError, match="out of range|must be an integer"):
            from_wire(wire)


def test_quorum_messages_type_every_field():
    assert from_wire(["be", INT32_MAX, 3]) == BeginEpoch(INT32_MAX, 3)
    assert from_wire(["fq", 2, 1, 10, 1, 99]) == FetchRequest(2, 1, 10, 1, 99)  # a node before long polls
    assert from_wire(["fq", 2, 1, 10, 1, 99, 500]) == FetchRequest(2, 1, 10, 1, 99, max_wait_ms=500)
    assert from_wire(FetchRequest(2, 1, 10, 1, 99, max_wait_ms=7).to_wire()).max_wait_ms == 7
    for wait in (-1, 2**31, "500", 1.5):
        with pytest.raises(ValueError, match="max_wait_ms"):
            from_wire(["fq", 2, 1, 10, 1, 99, wait])
    with pytest.raises(ValueError):
        from_wire(["be", 1, -3])  # a broker id is >= 0
    with pytest.raises(ValueError):
        from_wire(["fq", 2, 1, 2**63, 1])  # an offset is int64
    with pytest.raises(ValueError):
        from_wire(["fr", 2, 1, 1, [[0, 2**31, {}]], 0, None, None, None, -1, -1])  # a record's epoch
    ok = from_wire(["fr", 2, None, 1, [[0, 1, {"type": "x"}]], 1, None, None, None, 0, 0])
    assert isinstance(ok, FetchResponse) and ok.records == ((0, 1, {"type": "x"}),)


def test_a_node_at_the_last_epoch_never_moves_past_it():
    """Defence in depth: even a BeginEpoch at the int32 maximum (from a peer that logged in) cannot make the
    node persist an epoch the wire cannot carry when its election timer fires."""
    node = QuorumNode(1, [1, 2, 3], InMemoryLog(), QuorumConfig())
    node.receive(BeginEpoch(INT32_MAX, 3), 0)
    assert node.epoch == INT32_MAX
    for now in range(0, 60_000, 50):
        for out in node.tick(now):
            assert not isinstance(out, Persist) or out.epoch <= INT32_MAX
    assert node.epoch == INT32_MAX


def test_requests_are_refused_before_use_when_a_number_does_not_fit():
    ok = {"topic": "t", "partition": 0, "leader": 1, "leader_epoch": 3, "partition_epoch": 4, "isr": [1, 2]}
    check_request(ApiKey.ALTER_PARTITION, ok)
    for field, bad in [("leader_epoch", 2**31), ("partition_epoch", 2**63 - 1), ("leader", -1), ("partition", -1)]:
        with pytest.raises(WireRangeError, match=field):
            check_request(ApiKey.ALTER_PARTITION, dict(ok, **{field: bad}))
    with pytest.raises(WireRangeError, match="isr"):
        check_request(ApiKey.ALTER_PARTITION, dict(ok, isr=[1, 2**31]))
    with pytest.raises(WireRangeError):
        check_request(ApiKey.BROKER_REGISTRATION, {"broker_id": 2**32, "kafka_port": 9092})
    with pytest.raises(WireRangeError):
        check_request(ApiKey.BROKER_HEARTBEAT, {"broker_id": 1, "epoch": 2**31})
    # Fetch is typed: its native v0 map is checked as it is read into the typed request (native_legacy.py).
    read_fetch = LEGACY[ApiKey.FETCH][0]
    fetch = {"replica_id": -1, "max_wait_ms": 100, "topics": [["t", [[0, 5, 1024, -1, -1]]]]}
    read_fetch(fetch)
    read_fetch(dict(fetch, topics=[["t", [[-1, 5, 1024]]]]))  # answered per partition
    for row in (
        [0, 5, 2**31],
        [0, 2**63, 1024],
        [2**31, 0, 1],
        [-(2**31) - 1, 0, 1],
        [0, 0, 1, 2**31],
    ):
        with pytest.raises(WireRangeError):
            read_fetch(dict(fetch, topics=[["t", [row]]]))
    for bad_type in (True, 1.0, "0", None):  # a row field that is not an integer at all
        with pytest.raises(WireRangeError, match="of integers"):
            read_fetch(dict(fetch, topics=[["t", [[0, bad_type, 1024]]]]))
    with pytest.raises(WireRangeError):
        read_fetch(dict(fetch, replica_id=2**31))
    with pytest.raises(WireRangeError):  # Produce is typed: its native v0 map is checked as it is read
        LEGACY[ApiKey.PRODUCE][0]({"acks": 2**15, "topics": []})
    with pytest.raises(WireRangeError):
        check_request(ApiKey.LIST_OFFSETS, {"topics": [["t", [[0, -1, 2**31]]]]})
    # The group apis are typed: their ranges are checked as the message is decoded, and their native v0 maps' as
    # they are read into it (broker/network/native_legacy.py), before any handler.
    for api in (ApiKey.HEARTBEAT, ApiKey.SYNC_GROUP, ApiKey.OFFSET_COMMIT):
        body = {"group_id": "g", "generation_id": -5, "member_id": "m", "topics": []}
        LEGACY[api][0](body)  # ILLEGAL_GENERATION, or a simple commit
        with pytest.raises(WireRangeError, match="generation_id"):
            LEGACY[api][0](dict(body, generation_id=2**31))
    typed = encode(HeartbeatRequest(group_id="g", generation_id=-5, member_id="m"))
    typed[1] = 2**31
    with pytest.raises(WireRangeError, match="generation_id"):
        decode(HeartbeatRequest, typed)
    for session in (2**40, 10**400):  # out of int32; out of any duration (no OverflowError escapes)
        with pytest.raises(WireRangeError):
            LEGACY[ApiKey.JOIN_GROUP][0]({"group_id": "g", "session_timeout_ms": session, "protocols": []})
    with pytest.raises(WireRangeError, match="num_partitions"):
        check_request(ApiKey.CREATE_TOPICS, {"topics": [{"name": "t", "num_partitions": 2**31}]})
    check_request(ApiKey.CREATE_TOPICS, {"topics": [{"name": "t", "num_partitions": -1, "replication_factor": -1}]})
    with pytest.raises(WireRangeError, match="count"):
        check_request(ApiKey.CREATE_PARTITIONS, {"topics": [{"name": "t", "count": 2**31}]})
    with pytest.raises(WireRangeError):
        LEGACY[ApiKey.OFFSET_FETCH][0]({"group_id": "g", "topics": [["t", [2**31]]]})
    with pytest.raises(WireRangeError, match="int64"):
        check_request(ApiKey.METADATA, {"topics": None, "anything": 2**64 - 1})


def test_quorum_state_never_holds_an_out_of_range_epoch(tmp_path):
    path = tmp_path / "quorum-state"
    write_state(path, INT32_MAX, 3)
    assert read_state(path) == (INT32_MAX, 3)
    for epoch, voted in [(2**31, None), (2**63, None), (-1, None), (1, 2**31)]:
        with pytest.raises(WireRangeError):
            write_state(path, epoch, voted)
    assert read_state(path) == (INT32_MAX, 3)  # the refused writes left the file as it was


def test_the_metadata_log_refuses_an_epoch_its_batches_cannot_carry(tmp_path):
    log = Log(tmp_path / "__cluster_metadata-0", "__cluster_metadata", 0, LogConfig.from_props({}))
    mlog = DiskMetadataLog(log)
    mlog.append([{"type": "x"}], 1)
    with pytest.raises(WireRangeError):
        mlog.append([{"type": "y"}], 2**31)
    with pytest.raises(WireRangeError):
        mlog.append_replicated([(1, 2**31, {"type": "z"})])
    assert mlog.end_offset == 1
    log.close()


def write_secret(path: Path, text: str, mode: int) -> Path:
    path.write_text(text)
    os.chmod(path, mode)
    return path


def test_the_cluster_secret_file_is_owner_only_and_turns_the_broker_listener_into_a_scram_login(tmp_path):
    secret = write_secret(tmp_path / "s", "a-long-enough-cluster-secret\n", 0o600)
    cfg = BrokerConfig.from_props({"inter.broker.secret.file": str(secret), "peers": "1@h:1,2@h:2"})
    assert cfg.cluster_secret() == "a-long-enough-cluster-secret"
    assert cfg.broker_protocol() == ("SASL_PLAINTEXT", True)
    client = cfg.inter_broker_security()
    assert (client.sasl_username, client.sasl_mechanism) == (SECRET_USER, "SCRAM-SHA-256")
    assert cfg.native_client_security().protocol == "PLAINTEXT"
    assert f"User:{SECRET_USER}" in cfg.super_user_set()
    # Every broker derives the same credential; only the secret's user and mechanism are known.
    lookup = secret_lookup("a-long-enough-cluster-secret")
    assert lookup(SECRET_USER, "SCRAM-SHA-256") == secret_credential("a-long-enough-cluster-secret")
    assert lookup("admin", "SCRAM-SHA-256") is None and lookup(SECRET_USER, "SCRAM-SHA-512") is None
    assert secret_credential("a-long-enough-cluster-secret").check_password("a-long-enough-cluster-secret")
    assert not secret_credential("a-long-enough-cluster-secret").check_password("another-secret-altogether")
    with pytest.raises(InvalidConfigError, match="chmod 600"):
        BrokerConfig.from_props({"inter.broker.secret.file": str(write_secret(tmp_path / "w", "x" * 20, 0o644))})
    with pytest.raises(InvalidConfigError, match="16 characters"):
        BrokerConfig.from_props({"inter.broker.secret.file": str(write_secret(tmp_path / "short", "abc", 0o600))})
    with pytest.raises(InvalidConfigError, match="No such file"):
        BrokerConfig.from_props({"inter.broker.secret.file": str(tmp_path / "missing")})
    # A SASL inter-broker listener keeps the brokers' own logins (secured mode), the secret unused.
    sasl = BrokerConfig.from_props(
        {"security.protocol": "SASL_PLAINTEXT", "inter.broker.secret.file": str(secret)}
        | {"sasl.jaas.config": 'x required username="broker" password="pw";'}
    )
    assert sasl.broker_protocol() == ("SASL_PLAINTEXT", False)
    assert sasl.inter_broker_security().sasl_username == "broker"
