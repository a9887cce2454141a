"""net/messages.py: every Kafka message kio declares, at every version, survives the native msgpack codec
unchanged; a field outside its schema type is refused with its path, before any handler could see it."""

from __future__ import annotations

import dataclasses
import datetime
import uuid

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema, load_response_schema
from kio.schema import types as kio_types
from kio.schema.api_versions.v3.response import ApiVersionsResponse
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v16.request import FetchRequest, ReplicaState
from kio.schema.index import api_key_map, schema_name_map
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.static import primitive as kio_primitive
from kio.static.constants import EntityType
from kio.static.primitive import PhantomStr, Records, i8, i32, i64

from net.messages import MessageError, _encode_slowly, _fast_decoder, _Refused, decode, encode, fields_plan
from net.schema.convert import from_kio, to_kio
from net.schema.messages import MESSAGES

for _prim in vars(kio_primitive).values():  # kio's own strategies for its integer, float and time types
    if isinstance(_prim, type) and issubclass(_prim, kio_primitive.Interval) and _prim is not kio_primitive.Interval:
        st.register_type_strategy(_prim, st.integers(_prim.__low__, _prim.__high__))
    elif isinstance(_prim, type) and "__hypothesis_hook__" in vars(_prim):
        _prim.__hypothesis_hook__()
st.register_type_strategy(Records, st.binary(max_size=64).map(Records))
for _named in vars(kio_types).values():  # TopicName, GroupId, BrokerId, ProducerId...: kinds of str and int
    if isinstance(_named, type) and issubclass(_named, PhantomStr) and _named is not PhantomStr:
        st.register_type_strategy(_named, st.text(max_size=16))
    elif isinstance(_named, type) and issubclass(_named, kio_primitive.Interval):
        st.register_type_strategy(_named, st.integers(_named.__low__, _named.__high__))


def _classes(api_key: int) -> list[type]:
    name = api_key_map[api_key]
    out = []
    for version, kinds in schema_name_map[name].items():
        if EntityType.request in kinds:
            out.append(load_request_schema(api_key, version))
        if EntityType.response in kinds:
            out.append(load_response_schema(api_key, version))
    return out


def _wire(message: object) -> object:
    """What the other side decodes: the array through msgpack bytes and back."""
    return msgpack.unpackb(msgpack.packb(encode(message), use_bin_type=True), raw=False)


@pytest.mark.parametrize("api_key", sorted(api_key_map))
@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_every_kafka_message_round_trips(api_key, data):
    cls = data.draw(st.sampled_from(_classes(api_key)))
    message = data.draw(st.from_type(cls))
    assert decode(cls, _wire(message)) == message
    assert _fast_decoder(cls)(_wire(message)) == message  # the compiled path accepts all a valid message holds
    assert encode(message) == _encode_slowly(message)  # the compiled encoder writes what the field plan does


def test_fields_travel_in_schema_order_with_kafkas_wire_forms():
    cls = load_response_schema(0, 9)
    assert [name for name, *_ in fields_plan(cls)] == [f.name for f in dataclasses.fields(cls)]
    resp = cls(responses=(), throttle_time=datetime.timedelta(milliseconds=250))
    assert encode(resp) == [[], 250]  # a timedelta travels as int milliseconds
    topic_id = uuid.uuid4()
    req = MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=topic_id, name="t"),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=True,
    )
    assert encode(req) == [[[topic_id.bytes, "t"]], False, True]
    assert decode(MetadataRequest, _wire(req)) == req


@pytest.mark.parametrize(
    ("wire", "error"),
    [
        ([[[b"\0" * 16, "t"]], False], "has 2 fields, MetadataRequest has 3"),
        ([[[b"\0" * 15, "t"]], False, True], r"topics\[0\]\.topic_id must be a 16-byte uuid"),
        ([[[b"\0" * 16, 7]], False, True], r"topics\[0\]\.name must be a string"),
        ([[[b"\0" * 16, "t"]], 1, True], "allow_auto_topic_creation must be a boolean"),
        ([{"topics": []}, False, True], "topics must be an array"),
        ("MetadataRequest", "must be an array of 3 fields"),
    ],
)
def test_a_field_outside_its_type_is_refused_with_its_path(wire, error):
    with pytest.raises(MessageError, match=error):
        decode(MetadataRequest, wire)
    with pytest.raises((_Refused, MessageError)):  # the compiled path refuses it too (the slow one names it)
        _fast_decoder(MetadataRequest)(wire)


def _fetch_request() -> FetchRequest:
    return FetchRequest(
        cluster_id=None,
        replica_state=ReplicaState(replica_id=kio_types.BrokerId(-1), replica_epoch=i64(-1)),
        max_wait=datetime.timedelta(milliseconds=500),
        min_bytes=i32(1),
        max_bytes=i32(1 << 20),
        isolation_level=i8(0),
        session_id=i32(0),
        session_epoch=i32(-1),
        topics=(),
        forgotten_topics_data=(),
        rack_id="",
    )


@pytest.mark.parametrize(
    ("field", "bad", "error"),
    [
        ("min_bytes", 2**31, "min_bytes 2147483648 is out of range for int32"),
        ("max_wait", -(2**31) - 1, "out of range for int32"),
        ("isolation_level", 128, "out of range for int8"),
        ("session_epoch", True, "session_epoch must be an integer"),
        ("topics", None, "topics may not be null"),
        ("replica_state", [1], "replica_state has 1 fields"),
    ],
)
def test_integer_widths_and_nullability_are_checked(field, bad, error):
    wire = encode(_fetch_request())
    assert decode(FetchRequest, wire) == _fetch_request()
    wire[[name for name, *_ in fields_plan(FetchRequest)].index(field)] = bad
    with pytest.raises(MessageError, match=error):
        decode(FetchRequest, wire)
    with pytest.raises((_Refused, MessageError)):
        _fast_decoder(FetchRequest)(wire)


def test_an_error_code_must_be_one_kafka_knows():
    resp = ApiVersionsResponse(error_code=ErrorCode.none, api_keys=(), throttle_time=datetime.timedelta(0))
    row = encode(resp)
    assert decode(ApiVersionsResponse, row) == resp
    row[0] = 30_000  # fits int16, but is no Kafka error code
    with pytest.raises(MessageError, match="error_code 30000 is not a known ErrorCode"):
        decode(ApiVersionsResponse, row)


# --- net/schema/: one class per API over the served versions ----------------------------------------------------


@pytest.mark.parametrize("api_key", sorted(MESSAGES))
@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_every_served_version_converts_to_its_api_class_and_back(api_key, data):
    req_cls, resp_cls = MESSAGES[api_key]
    version = data.draw(st.integers(*req_cls.VERSIONS))
    for cls, load in ((req_cls, load_request_schema), (resp_cls, load_response_schema)):
        kio_cls = load(api_key, version)
        message = data.draw(st.from_type(kio_cls))
        typed = from_kio(message, cls)
        assert to_kio(typed, kio_cls) == message  # nothing a version carries is lost on the way
        assert decode(cls, _wire(typed)) == typed  # and the native codec carries the same object
        assert encode(typed) == _encode_slowly(typed)


def test_a_field_a_version_lacks_takes_its_schema_default():
    from kio.schema.metadata.v0.request import MetadataRequest as MetadataRequestV0
    from kio.schema.metadata.v0.request import MetadataRequestTopic as TopicV0

    from net.schema.metadata import MetadataRequest as Typed

    typed = from_kio(MetadataRequestV0(topics=(TopicV0(name="t"),)), Typed)
    assert typed.allow_auto_topic_creation is True  # Kafka's default where v0 had no such field
    assert typed.topics is not None and typed.topics[0].name == "t" and typed.topics[0].topic_id is None
    assert to_kio(typed, MetadataRequestV0) == MetadataRequestV0(topics=(TopicV0(name="t"),))
    assert Typed.VERSIONS == (0, 12) and Typed.API_KEY == 3


def test_the_generated_classes_are_what_the_installed_kio_gives():
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "scripts/generate_messages.py", "--check"], cwd=root, capture_output=True)
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()


def test_a_whole_request_error_answers_every_item_asked_even_under_another_name():
    """Kafka's getErrorResponse answers each item of the request: CreateAcls' `creations` in `results`, DeleteAcls'
    `filters` in `filter_results`, AlterUserScramCredentials' deletions and upsertions by user, AlterClientQuotas'
    entries with their entities."""
    from net.schema.alter_client_quotas import (
        AlterClientQuotasRequest,
        AlterClientQuotasResponse,
        EntityData,
        EntryData,
    )
    from net.schema.alter_user_scram_credentials import (
        AlterUserScramCredentialsRequest,
        AlterUserScramCredentialsResponse,
        ScramCredentialDeletion,
        ScramCredentialUpsertion,
    )
    from net.schema.convert import error_response
    from net.schema.create_acls import AclCreation, CreateAclsRequest, CreateAclsResponse
    from net.schema.delete_acls import DeleteAclsFilter, DeleteAclsRequest, DeleteAclsResponse

    denied = 31  # CLUSTER_AUTHORIZATION_FAILED
    created = error_response(CreateAclsRequest(creations=(AclCreation(), AclCreation())), CreateAclsResponse, denied)
    assert [r.error_code for r in created.results] == [denied, denied]
    deleted = error_response(DeleteAclsRequest(filters=(DeleteAclsFilter(),)), DeleteAclsResponse, denied, "no")
    assert [(r.error_code, r.error_message, r.matching_acls) for r in deleted.filter_results] == [(denied, "no", ())]
    scram = AlterUserScramCredentialsRequest(
        deletions=(ScramCredentialDeletion(name="a"),), upsertions=(ScramCredentialUpsertion(name="b"),)
    )
    altered = error_response(scram, AlterUserScramCredentialsResponse, denied)
    assert [(r.user, r.error_code) for r in altered.results] == [("a", denied), ("b", denied)]
    quotas = AlterClientQuotasRequest(entries=(EntryData(entity=(EntityData(entity_type="user", entity_name="x"),)),))
    (entry,) = error_response(quotas, AlterClientQuotasResponse, denied).entries
    assert entry.error_code == denied and [(e.entity_type, e.entity_name) for e in entry.entity] == [("user", "x")]


def test_a_whole_request_error_answers_every_topic_and_config_resource_asked():
    """The topic and config apis' error answers (issue 26 §1): DeleteTopics' bare topic_names and v6 topics,
    CreatePartitions' topics in `results`, the config apis' resources in `results` / `responses`; a created topic's
    `configs` (which describe it, not answer the request) stay empty."""
    from net.schema.alter_configs import AlterConfigsRequest, AlterConfigsResource, AlterConfigsResponse
    from net.schema.convert import error_response
    from net.schema.create_partitions import CreatePartitionsRequest, CreatePartitionsResponse, CreatePartitionsTopic
    from net.schema.create_topics import CreatableTopic, CreatableTopicConfig, CreateTopicsRequest, CreateTopicsResponse
    from net.schema.delete_topics import DeleteTopicsRequest, DeleteTopicsResponse, DeleteTopicState
    from net.schema.describe_configs import DescribeConfigsRequest, DescribeConfigsResource, DescribeConfigsResponse

    denied = 29  # TOPIC_AUTHORIZATION_FAILED
    by_name = error_response(DeleteTopicsRequest(topic_names=("a", "b")), DeleteTopicsResponse, denied, "no")
    assert [(r.name, r.error_code, r.error_message) for r in by_name.responses] == [
        ("a", denied, "no"),
        ("b", denied, "no"),
    ]
    v6 = error_response(DeleteTopicsRequest(topics=(DeleteTopicState(name="c"),)), DeleteTopicsResponse, denied)
    assert [(r.name, r.error_code) for r in v6.responses] == [("c", denied)]
    grown = CreatePartitionsRequest(topics=(CreatePartitionsTopic(name="d", count=3),))
    assert [(r.name, r.error_code) for r in error_response(grown, CreatePartitionsResponse, denied).results] == [
        ("d", denied)
    ]
    topic = CreatableTopic(name="e", num_partitions=3, configs=(CreatableTopicConfig(name="retention.ms", value="1"),))
    (row,) = error_response(CreateTopicsRequest(topics=(topic,)), CreateTopicsResponse, denied).topics
    assert (row.name, row.error_code, row.num_partitions, row.configs) == ("e", denied, -1, None)
    asked = DescribeConfigsRequest(resources=(DescribeConfigsResource(resource_type=2, resource_name="f"),))
    (result,) = error_response(asked, DescribeConfigsResponse, denied).results
    assert (result.resource_type, result.resource_name, result.error_code, result.configs) == (2, "f", denied, ())
    altered = AlterConfigsRequest(resources=(AlterConfigsResource(resource_type=4, resource_name="1"),))
    (response,) = error_response(altered, AlterConfigsResponse, denied).responses
    assert (response.resource_type, response.resource_name, response.error_code) == (4, "1", denied)


def test_a_whole_request_error_answers_every_marker_partition_of_write_txn_markers():
    """WriteTxnMarkers names its partitions by bare index and answers per producer id: an error answer (a refusal as
    a whole, CLUSTER_AUTHORIZATION_FAILED) names each producer id and each partition asked, as Kafka's
    getErrorResponse; it answered producer id 0 and no partition, which a coordinator cannot read."""
    from net.schema.convert import error_response
    from net.schema.write_txn_markers import (
        WritableTxnMarker,
        WritableTxnMarkerTopic,
        WriteTxnMarkersRequest,
        WriteTxnMarkersResponse,
    )

    topics = (
        WritableTxnMarkerTopic(name="a", partition_indexes=(0, 2)),
        WritableTxnMarkerTopic(name="b", partition_indexes=(1,)),
    )
    marker = WritableTxnMarker(
        producer_id=7, producer_epoch=1, transaction_result=True, topics=topics, coordinator_epoch=3
    )
    (m,) = error_response(WriteTxnMarkersRequest(markers=(marker,)), WriteTxnMarkersResponse, 31).markers
    assert m.producer_id == 7
    assert [(t.name, p.partition_index, p.error_code) for t in m.topics for p in t.partitions] == [
        ("a", 0, 31),
        ("a", 2, 31),
        ("b", 1, 31),
    ]


def test_the_topic_and_config_apis_v0_maps_read_into_their_typed_requests():
    """native_legacy: AlterConfigs v0 with "replace" is an AlterConfigs, without an IncrementalAlterConfigs (a value
    SET, nil DELETE, ["append" | "subtract", v]); CreateTopics' -1 defaults; a map marked forwarded is refused."""
    from broker.network.native_legacy import LEGACY
    from net.protocol import ApiKey
    from net.schema.alter_configs import AlterConfigsRequest
    from net.schema.incremental_alter_configs import IncrementalAlterConfigsRequest

    to_typed = {api: LEGACY[api][0] for api in (ApiKey.CREATE_TOPICS, ApiKey.ALTER_CONFIGS, ApiKey.DESCRIBE_CONFIGS)}
    created = to_typed[ApiKey.CREATE_TOPICS]({"topics": [{"name": "t", "configs": {"retention.ms": 5}}]})
    (t,) = created.topics
    assert (t.num_partitions, t.replication_factor, [(c.name, c.value) for c in t.configs]) == (
        -1,
        -1,
        [("retention.ms", "5")],
    )
    changes = {"a": "1", "b": None, "c": ["append", "x"], "d": ["subtract", "y"]}
    incremental = to_typed[ApiKey.ALTER_CONFIGS]({"topics": [["t", changes]], "brokers": [[1, {"a": "2"}]]})
    assert isinstance(incremental, IncrementalAlterConfigsRequest)
    topic, broker = incremental.resources
    assert [(c.name, c.config_operation, c.value) for c in topic.configs] == [
        ("a", 0, "1"),
        ("b", 1, None),
        ("c", 2, "x"),
        ("d", 3, "y"),
    ]
    assert (broker.resource_type, broker.resource_name) == (4, "1")
    replaced = to_typed[ApiKey.ALTER_CONFIGS]({"topics": [["t", {"a": "1"}]], "replace": True})
    assert isinstance(replaced, AlterConfigsRequest) and replaced.resources[0].configs[0].value == "1"
    described = to_typed[ApiKey.DESCRIBE_CONFIGS]({"topics": ["t"], "brokers": [1], "groups": ["g"]})
    assert [(r.resource_type, r.resource_name) for r in described.resources] == [(2, "t"), (4, "1"), (32, "g")]
    assert described.include_synonyms and described.include_documentation
    for bad in ({"topics": [["t", {"a": ["append"]}]]}, {"topics": [["t", "a=1"]]}):
        with pytest.raises(MessageError):
            to_typed[ApiKey.ALTER_CONFIGS](bad)
    with pytest.raises(MessageError, match="ENVELOPE"):
        to_typed[ApiKey.CREATE_TOPICS]({"topics": [], "forwarded": True})


def test_metadata_v0_maps_become_the_typed_request_and_the_typed_answer_the_map():
    """Native Metadata v0 (one more release): nil asks for every topic, `topic_ids` add topics by id, creation only
    when asked for (the native default, unlike Kafka's); a map of the wrong shape is refused field by field; the
    typed answer reads back as the map of before (topic ids as 32 hex digits, partitions as rows)."""
    import uuid

    from broker.network.native_legacy import metadata_request, metadata_response
    from net.messages import MessageError
    from net.schema.metadata import (
        MetadataResponse,
        MetadataResponseBroker,
        MetadataResponsePartition,
        MetadataResponseTopic,
    )

    everything = metadata_request({"topics": None, "topic_ids": ["ab" * 16]})
    assert everything.topics is None and not everything.allow_auto_topic_creation
    topic_id = uuid.uuid4()
    asked = metadata_request(
        {
            "topics": ["a"],
            "topic_ids": [topic_id.hex],
            "allow_auto_topic_creation": True,
            "include_topic_authorized_operations": True,
        }
    )
    assert [(t.name, t.topic_id) for t in asked.topics] == [("a", None), (None, topic_id)]
    assert asked.allow_auto_topic_creation and asked.include_topic_authorized_operations
    assert not asked.include_cluster_authorized_operations
    bad_maps = ({"topics": "a"}, {"topics": [5]}, {"topics": [], "topic_ids": ["zz"]}, {"topics": [], "topic_ids": 1})
    for bad in bad_maps:
        with pytest.raises(MessageError):
            metadata_request(bad)
    answer = MetadataResponse(
        brokers=(MetadataResponseBroker(node_id=1, host="h", port=9),),
        cluster_id="c",
        controller_id=1,
        topics=(
            MetadataResponseTopic(
                name="a",
                topic_id=topic_id,
                partitions=(
                    MetadataResponsePartition(
                        error_code=5, partition_index=0, leader_id=-1, leader_epoch=2, replica_nodes=(1, 2)
                    ),
                ),
                topic_authorized_operations=8,
            ),
            MetadataResponseTopic(error_code=3, name="b"),
        ),
    )
    assert metadata_response(answer) == {
        "error_code": 0,
        "cluster_id": "c",
        "controller_id": 1,
        "brokers": [[1, "h", 9]],
        "topics": [
            {
                "error_code": 0,
                "name": "a",
                "topic_id": topic_id.hex,
                "is_internal": False,
                "partitions": [[5, 0, -1, 2, [1, 2], [], []]],
                "topic_authorized_operations": 8,
            },
            {"error_code": 3, "name": "b", "is_internal": False, "partitions": []},
        ],
    }


def test_produce_keeps_its_batches_opaque_and_its_native_v0_map_reads_into_the_typed_request():
    """Produce is typed since native v1 (issue 26 §1): the records are the bytes sent, in both directions; the v0
    map is read into the same request (its shape and ranges checked) and the typed answer written back as v0 rows;
    a whole-request error answers each partition asked with base_offset -1, as Kafka's getErrorResponse."""
    from broker.network.native_legacy import LEGACY
    from net.protocol import ApiKey
    from net.schema.convert import error_response
    from net.schema.produce import (
        PartitionProduceData,
        PartitionProduceResponse,
        ProduceRequest,
        ProduceResponse,
        TopicProduceData,
        TopicProduceResponse,
    )

    blob = bytes(range(256)) * 3  # not parsed on the way: any bytes
    typed = ProduceRequest(
        transactional_id="tx",
        acks=-1,
        timeout=datetime.timedelta(milliseconds=1500),
        topic_data=(TopicProduceData(name="t", partition_data=(PartitionProduceData(index=3, records=blob),)),),
    )
    wire = encode(typed)
    assert wire == ["tx", -1, 1500, [["t", [[3, blob]]]]]
    assert decode(ProduceRequest, wire) == typed
    read, answer = LEGACY[ApiKey.PRODUCE]
    legacy = read({"acks": -1, "timeout_ms": 1500, "transactional_id": "tx", "topics": [["t", [[3, blob]]]]})
    assert legacy == typed
    assert read({"topics": []}) == ProduceRequest(acks=-1, timeout=datetime.timedelta(seconds=30))  # v0's defaults
    for bad in ({"topics": [["t", [[3]]]]}, {"topics": [["t", [[3, "text"]]]]}, {"acks": 2**15, "topics": []}):
        with pytest.raises(MessageError):
            read(bad)
    stamped = datetime.datetime(2026, 11, 27, tzinfo=datetime.UTC)
    rows = (
        PartitionProduceResponse(index=3, base_offset=40, log_start_offset=0),
        PartitionProduceResponse(index=4, base_offset=9, log_append_time=stamped, log_start_offset=2),
        PartitionProduceResponse(index=5, error_code=6, base_offset=-1, error_message="not the leader"),
    )
    resp = ProduceResponse(responses=(TopicProduceResponse(name="t", partition_responses=rows),))
    stamped_ms = int(stamped.timestamp() * 1000)
    v0_rows = [[3, 0, 40, -1, 0, None], [4, 0, 9, stamped_ms, 2, None], [5, 6, -1, -1, -1, "not the leader"]]
    assert answer(resp) == {"topics": [["t", v0_rows]]}
    resp.throttle_time = datetime.timedelta(milliseconds=250)
    assert answer(resp)["throttle_time_ms"] == 250
    failed = error_response(typed, ProduceResponse, 87, "bad")
    [[row]] = [t.partition_responses for t in failed.responses]
    assert failed.responses[0].name == "t"
    assert (row.index, row.error_code, row.base_offset, row.error_message) == (3, 87, -1, "bad")


def test_the_compiled_encoder_writes_what_the_field_encoders_write():
    """`encode` runs one compiled function per class (the produce path encodes a message per request); it must write
    exactly the array the per-field encoders of `fields_plan` write, nested structs, nulls and conversions included."""
    from net.schema.produce import (
        BatchIndexAndErrorMessage,
        PartitionProduceResponse,
        ProduceResponse,
        TopicProduceResponse,
    )

    def by_fields(message):
        return [None if (v := getattr(message, n)) is None else enc(v) for n, enc, _ in fields_plan(type(message))]

    stamped = datetime.datetime(2026, 11, 27, tzinfo=datetime.UTC)
    row = PartitionProduceResponse(
        index=1,
        error_code=ErrorCode.not_leader_or_follower,  # kio's enum where a Kafka class holds one: its value
        base_offset=7,
        log_append_time=stamped,
        record_errors=(BatchIndexAndErrorMessage(batch_index=0, batch_index_error_message=None),),
        error_message="moved",
    )
    answer = ProduceResponse(
        responses=(TopicProduceResponse(name="t", partition_responses=(row, PartitionProduceResponse())),),
        throttle_time=datetime.timedelta(milliseconds=12),
    )
    assert encode(answer) == by_fields(answer)
    assert encode(row)[:4] == [1, 6, 7, int(stamped.timestamp() * 1000)]
    for request_cls, response_cls in MESSAGES.values():
        for cls in (request_cls, response_cls):
            assert encode(cls()) == by_fields(cls()), cls
    with pytest.raises(TypeError, match="not a message class"):
        encode({"a": 1})


def test_durations_and_timestamps_are_checked_on_the_fast_path_as_on_the_slow_one():
    """The fast decoder checks a produce's timeout (int32 ms) and a timestamp (int64 ms, not before the epoch)
    inline; whatever it refuses, the slow path refuses naming the field, whatever it accepts equals the slow path's."""
    from net.messages import _decode
    from net.schema.produce import PartitionProduceResponse, ProduceRequest

    wire = encode(ProduceRequest(acks=1, timeout=datetime.timedelta(seconds=30)))
    assert decode(ProduceRequest, wire) == _decode(ProduceRequest, wire, "")
    for bad in (True, 2**31, -(2**31) - 1, 1.0, None, "30000"):
        with pytest.raises(MessageError, match="timeout"):
            decode(ProduceRequest, [*wire[:2], bad, *wire[3:]])
    stamped = encode(PartitionProduceResponse(log_append_time=datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)))
    assert decode(PartitionProduceResponse, stamped).log_append_time.year == 2026
    assert decode(PartitionProduceResponse, [*stamped[:3], None, *stamped[4:]]).log_append_time is None  # nullable
    with pytest.raises(MessageError, match="log_append_time -5 is not a timestamp"):
        decode(PartitionProduceResponse, [*stamped[:3], -5, *stamped[4:]])


def test_fetch_keeps_its_records_opaque_and_its_native_v0_rows_read_into_the_typed_request():
    """Fetch is typed since native v1 (issue 26 §1): the records are the log's bytes in both directions, the
    messages msgpack arrays in schema field order. The v0 map (a follower's session fields and forgotten partitions
    included) is read into the same request, its shape and ranges checked, and the typed answer written back as the
    old 11-column rows: the diverging epoch and its end offset where they were, the error code's name as the message,
    the high watermark standing for the leader's log end (the typed answer has none; a follower asks ListOffsets)."""
    from broker.network.native_legacy import LEGACY
    from net.protocol import ApiKey
    from net.schema.fetch import (
        AbortedTransaction,
        EpochEndOffset,
        FetchableTopicResponse,
        FetchPartition,
        FetchRequest,
        FetchResponse,
        FetchTopic,
        ForgottenTopic,
        PartitionData,
    )

    blob = bytes(range(256)) * 3
    typed = FetchRequest(
        replica_id=2,
        max_wait=datetime.timedelta(milliseconds=500),
        min_bytes=1,
        max_bytes=1 << 24,
        session_id=7,
        session_epoch=3,
        topics=(
            FetchTopic(
                topic="t",
                partitions=(
                    FetchPartition(
                        partition=1,
                        current_leader_epoch=4,
                        fetch_offset=40,
                        last_fetched_epoch=3,
                        log_start_offset=5,
                        partition_max_bytes=1 << 20,
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(ForgottenTopic(topic="t", partitions=(0, 2)),),
    )
    assert decode(FetchRequest, encode(typed)) == typed
    read, answer = LEGACY[ApiKey.FETCH]
    v0 = {
        "replica_id": 2,
        "max_wait_ms": 500,
        "min_bytes": 1,
        "max_bytes": 1 << 24,
        "session_id": 7,
        "session_epoch": 3,
        "topics": [["t", [[1, 40, 1 << 20, 4, 3, 5]]]],
        "forgotten": [["t", [0, 2]]],
    }
    assert read(v0) == typed
    consumer = read({"topics": [["t", [[1, 40, 100]]]]})  # v0's defaults: a sessionless consumer's long poll
    assert (consumer.replica_id, consumer.session_epoch, consumer.max_wait) == (-1, -1, datetime.timedelta(seconds=0.5))
    for bad in (
        {"topics": [["t", [[1, 40]]]]},  # no max bytes
        {"topics": [["t", [[1, 40, 0]]]]},  # max bytes not positive
        {"topics": [["t", [[1, "40", 100]]]]},
        {"topics": [], "forgotten": [["t", [2**31]]]},
        {"topics": [], "session_id": 2**31},
    ):
        with pytest.raises(MessageError):
            read(bad)
    rows = (
        PartitionData(partition_index=1, high_watermark=50, last_stable_offset=45, log_start_offset=5, records=blob),
        PartitionData(
            partition_index=2,
            high_watermark=50,
            last_stable_offset=50,
            log_start_offset=5,
            diverging_epoch=EpochEndOffset(epoch=3, end_offset=38),
        ),
        PartitionData(partition_index=3, error_code=1, high_watermark=9, log_start_offset=2),
        PartitionData(
            partition_index=4, aborted_transactions=(AbortedTransaction(producer_id=8, first_offset=41),), records=b""
        ),
    )
    resp = FetchResponse(session_id=7, responses=(FetchableTopicResponse(topic="t", partitions=rows),))
    wire = encode(resp)
    assert wire[3][0][1][0][-1] is blob or wire[3][0][1][0][-1] == blob  # the records as they are, last field
    assert decode(FetchResponse, wire) == resp
    assert answer(resp) == {
        "session_id": 7,
        "topics": [
            [
                "t",
                [
                    [1, 0, 50, 45, 5, blob, None, -1, -1, 50, []],
                    [2, 0, 50, 50, 5, b"", None, 3, 38, 50, []],
                    [3, 1, 9, -1, 2, b"", "OFFSET_OUT_OF_RANGE", -1, -1, 9, []],
                    [4, 0, 0, -1, -1, b"", None, -1, -1, 0, [[8, 41]]],
                ],
            ]
        ],
    }
    resp.throttle_time = datetime.timedelta(milliseconds=250)
    assert answer(resp)["throttle_time_ms"] == 250
    assert answer(FetchResponse(error_code=71))["error_code"] == 71  # a session error, whole


def test_a_fetch_answer_row_built_slot_by_slot_has_every_field():
    """FetchResult.typed sets PartitionData's slots one by one (the hot path): a field the schema adds must be set
    too, or reading it would fail far from here."""
    import dataclasses

    from broker.replica.partition import FetchResult
    from net.schema.fetch import PartitionData

    row = FetchResult(0, 5, 0, b"x", aborted=[[7, 3]]).typed(2)
    assert all(hasattr(row, f.name) for f in dataclasses.fields(PartitionData))
    assert decode(PartitionData, encode(row)) == row
    assert (row.last_stable_offset, row.aborted_transactions[0].producer_id) == (5, 7)  # no LSO: the high watermark
