"""The client config families: Kafka's names, defaults and bounds declared once; the clients take their
keyword arguments through them."""

from __future__ import annotations

import pytest

from client.config import AdminConfig, ClientConfigError, ConsumerConfig, ProducerConfig
from client.consumer import AsyncConsumer
from client.producer import AsyncProducer


def test_defaults_are_kafkas_where_kafka_has_them():
    p = ProducerConfig()
    assert (p.acks, p.linger_ms, p.enable_idempotence, p.max_in_flight_requests_per_connection) == ("all", 5, True, 5)
    assert (p.delivery_timeout_ms, p.request_timeout_ms, p.retry_backoff_ms, p.retry_backoff_max_ms) == (
        120000, 30000, 100, 1000,
    )  # fmt: skip
    c = ConsumerConfig()
    assert (c.auto_offset_reset, c.session_timeout_ms, c.heartbeat_interval_ms, c.max_poll_records) == (
        "latest", 45000, 3000, 500,
    )  # fmt: skip
    assert c.partition_assignment_strategy == ["range", "cooperative-sticky"]
    assert AdminConfig().client_id == "kl-admin"


def test_properties_strings_are_parsed_and_bad_values_name_the_key():
    c = ConsumerConfig.from_properties(
        {"enable.auto.commit": "false", "partition.assignment.strategy": "roundrobin, range"}
    )
    assert c.enable_auto_commit is False and c.partition_assignment_strategy == ["roundrobin", "range"]
    with pytest.raises(ClientConfigError, match="'fetch.max.wait.ms'"):
        ConsumerConfig.from_properties({"fetch.max.wait.ms": "-5"})
    with pytest.raises(ClientConfigError, match="heartbeat.interval.ms must be lower"):
        ConsumerConfig.from_properties({"session.timeout.ms": "1000", "heartbeat.interval.ms": "2000"})
    with pytest.raises(ClientConfigError) as rule:  # a rule between keys: its own message, not "value None for '?'"
        ConsumerConfig.from_properties({"group.instance.id": "i-1"})
    assert str(rule.value) == "group.instance.id is set without group.id: a static member needs a group"
    assert ConsumerConfig.from_properties({"group.id": "g", "group.instance.id": "i-1"}).group_instance_id == "i-1"
    assert ConsumerConfig.from_properties({"group.id": "g", "group.instance.id": " "}).group_instance_id is None
    with pytest.raises(ClientConfigError, match="'acks'"):
        ProducerConfig.from_properties({"acks": "2"})


def test_clients_take_keyword_arguments_through_the_schema():
    p = AsyncProducer("127.0.0.1:1", linger_ms=7, acks=1, compression_type="gzip")
    assert (p.sender.linger, p.acks, p.sender.codec, p.config.batch_size) == (0.007, 1, 1, 131072)
    with pytest.raises(ValueError, match="unknown producer config 'lingerms'"):
        AsyncProducer("127.0.0.1:1", lingerms=7)
    with pytest.raises(ValueError, match="'compression.type'"):
        AsyncProducer("127.0.0.1:1", compression_type="brotli")
    c = AsyncConsumer("127.0.0.1:1", group_id="g", max_poll_records=9)
    assert (c.group_id, c.max_poll_records, c.auto_offset_reset) == ("g", 9, "latest")
