"""Kafka's listener keys (broker/security/listeners.py): the set a config makes, its short forms, what each
client of a listener is told, the registration record, and one clear INVALID_CONFIG line per bad entry."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from broker.controller.logic import ControllerLogic
from broker.metadata.image import MetadataImage
from broker.network.server import BadRequest, ConnectionContext
from broker.security.listeners import metadata_listener
from broker.server.config import BrokerConfig
from broker.server.kafka_apis import registered_listeners
from net.errors import InvalidConfigError

KAFKAJS = {
    "listeners": "PLAINTEXT://:29092,PLAINTEXT_HOST://:9092,SSL_HOST://:9093,SASL_SSL_HOST://:9094",
    "advertised.listeners": "PLAINTEXT://kafka1:29092,PLAINTEXT_HOST://localhost:9092",
    "listener.security.protocol.map": "PLAINTEXT_HOST:PLAINTEXT,SSL_HOST:SSL,SASL_SSL_HOST:SASL_SSL",
    "ssl.keystore.location": "/dev/null",
    "port": "9500",
}


def listeners(props: dict[str, str]) -> dict[str, tuple]:
    cfg = BrokerConfig.from_props(props)
    return {lst.name: (lst.host, lst.port, lst.protocol, lst.wire, lst.advertised_host) for lst in cfg.listener_list()}


def test_the_short_forms_alone_make_the_three_built_in_listeners():
    assert listeners({"port": "9092", "kafka.port": "9093", "inter.broker.port": "9094"}) == {
        "NATIVE": ("127.0.0.1", 9092, "PLAINTEXT", "native", "127.0.0.1"),
        "KAFKA": ("127.0.0.1", 9093, "PLAINTEXT", "kafka", "127.0.0.1"),
        "BROKER": ("127.0.0.1", 9094, "PLAINTEXT", "native", "127.0.0.1"),
    }
    assert "KAFKA" not in listeners({})  # kafka.port -1: no Kafka listener


def test_kafkajs_layout_is_a_config():
    got = listeners(KAFKAJS)
    assert got["PLAINTEXT"] == ("127.0.0.1", 29092, "PLAINTEXT", "kafka", "kafka1")
    assert got["PLAINTEXT_HOST"] == ("127.0.0.1", 9092, "PLAINTEXT", "kafka", "localhost")
    assert got["SSL_HOST"][1:4] == (9093, "SSL", "kafka")
    assert got["SASL_SSL_HOST"][1:4] == (9094, "SASL_SSL", "kafka")
    assert got["NATIVE"][1] == 9500 and got["BROKER"][3] == "native"


def test_listeners_naming_the_built_in_ones_set_their_short_forms():
    cfg = BrokerConfig.from_props(
        {
            "listeners": "NATIVE://:9100,KAFKA://0.0.0.0:9101,BROKER://:9102,EXTERNAL://:0",
            "advertised.listeners": "KAFKA://kafka.example:19101,EXTERNAL://ext.example:0",
            "listener.security.protocol.map": "EXTERNAL:PLAINTEXT",
            "listener.wire.map": "EXTERNAL:native",
        }
    )
    assert (cfg.port, cfg.kafka_port, cfg.kafka_host, cfg.inter_broker_port) == (9100, 9101, "0.0.0.0", 9102)
    cfg.bind_ports({"NATIVE": 9100, "KAFKA": 9101, "BROKER": 9102, "EXTERNAL": 40001})
    # What clients are told: advertised host and port (0: the bound one); BROKER is never advertised.
    assert cfg.advertised_endpoints() == {
        "NATIVE": ("127.0.0.1", 9100, "native"),
        "KAFKA": ("kafka.example", 19101, "kafka"),
        "EXTERNAL": ("ext.example", 40001, "native"),
    }
    assert cfg.kafka_endpoint() == ("kafka.example", 19101)


@pytest.mark.parametrize(
    "props, key",
    [
        ({"listeners": "PLAINTEXT:9092"}, "listeners entry 'PLAINTEXT:9092'"),
        ({"listeners": "PLAINTEXT://:70000"}, "listeners entry"),
        ({"listeners": "PLAINTEXT://:1,PLAINTEXT://:2"}, "listeners names listener PLAINTEXT twice"),
        ({"listeners": "PLAINTEXT://:9300,ssl://:9300", "ssl.keystore.location": "/x"}, "port 9300 is used by both"),
        ({"listeners": "PLAINTEXT://:9092"}, "port 9092 is used by both NATIVE and PLAINTEXT"),
        ({"advertised.listeners": "EXTERNAL://h:1"}, "advertised.listeners names EXTERNAL, which is not in listeners"),
        ({"advertised.listeners": "KAFKA://h:1"}, "advertised.listeners names KAFKA"),  # no kafka.port
        ({"listeners": "EXTERNAL://:0"}, "listener.security.protocol.map has no protocol for listener EXTERNAL"),
        ({"listener.security.protocol.map": "OTHER:SSL"}, "listener.security.protocol.map names OTHER"),
        ({"listener.security.protocol.map": "NATIVE:TLS"}, "listener.security.protocol.map entry 'NATIVE:TLS'"),
        ({"listener.wire.map": "BROKER:kafka"}, "listener.wire.map: BROKER"),
        ({"listener.wire.map": "NATIVE:http"}, "listener.wire.map entry 'NATIVE:http'"),
        ({"listener.wire.map": "EXTERNAL:kafka"}, "listener.wire.map names EXTERNAL"),
        ({"listeners": "PLAINTEXT://:0", "advertised.listeners": "PLAINTEXT://0.0.0.0:0"}, "cannot advertise 0.0.0.0"),
        ({"advertised.listeners": "NATIVE://h:1"}, "NATIVE advertises its own port"),
        ({"listeners": "BROKER://:0", "advertised.listeners": "BROKER://h:0"}, "BROKER is not advertised"),
    ],
)
def test_bad_entries_are_one_invalid_config_naming_the_key(props, key):
    with pytest.raises(InvalidConfigError) as e:
        BrokerConfig.from_props(props)
    assert key in str(e.value)
    assert "\n" not in str(e.value)


def test_kl_broker_start_prints_one_line_for_a_bad_listener(tmp_path):
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "broker.cli",
            "start",
            "--data-dir",
            str(tmp_path),
            "--override",
            "listeners=X://:1,X://:2",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode != 0
    assert run.stderr.strip() == "Error: listeners names listener X twice"


def test_the_registration_record_carries_every_listener_and_old_records_still_read():
    image = MetadataImage()
    image.apply(0, {"type": "broker", "id": 1, "host": "h", "port": 9092, "fenced": False})  # an old record
    assert image.brokers[1].listeners == {}
    logic = ControllerLogic(image)
    eps = {"PLAINTEXT": ("localhost", 9200, "kafka"), "CLIENTS": ("10.0.0.1", 9201, "native")}
    records = logic.set_kafka_endpoint(1, "h", 9093, eps)
    assert records[0].to_dict()["listeners"] == [  # on the log: rows sorted by name
        ["CLIENTS", "10.0.0.1", 9201, "native"],
        ["PLAINTEXT", "localhost", 9200, "kafka"],
    ]
    image.apply(1, records[0].to_dict())
    assert image.brokers[1].listeners == eps and image.brokers[1].kafka_port == 9093
    assert logic.set_kafka_endpoint(1, "h", 9093, eps) == []  # unchanged: nothing to write
    # Fencing and unfencing keep them; an older broker's registration (no listeners) keeps them too.
    for record in logic.fence_broker(1)[:1] + logic.set_kafka_endpoint(1, "h", 9094, None):
        image.apply(2, record.to_dict())
        assert image.brokers[1].listeners == eps
    cfg = BrokerConfig.from_props({"broker.id": 2})
    b = image.brokers[1]
    assert cfg.endpoint_of(b, "PLAINTEXT") == ("localhost", 9200)
    assert cfg.endpoint_of(b, "NATIVE") == ("h", 9092)
    assert cfg.endpoint_of(b, "SSL") is None  # a broker without that listener is left out (Kafka's rule)


def test_whose_endpoints_a_request_is_answered_with():
    on = ConnectionContext
    assert metadata_listener({}, on("p", "PLAINTEXT", wire="kafka")) == "PLAINTEXT"
    assert metadata_listener({"listener": "kafka"}, on("p", "SSL", wire="kafka")) == "SSL"  # the Kafka wire: its own
    assert metadata_listener({}, on("p", "CLIENTS")) == "CLIENTS"
    assert metadata_listener({"listener": "kafka"}, on("p")) == "KAFKA"  # a native tool asking for the Kafka ports
    assert metadata_listener({}, on("p", "BROKER")) == "NATIVE"


def test_a_registration_with_bad_listener_rows_is_refused():
    assert registered_listeners([["A", "h", 1, "kafka"]]) == {"A": ("h", 1, "kafka")}
    for bad in ([["A", "h", 1]], [["A", "h", 70000, "kafka"]], [["A", "h", 1, "http"]], [[1, "h", 1, "kafka"]], "x"):
        with pytest.raises(BadRequest):
            registered_listeners(bad)


def test_a_listener_that_cannot_bind_is_named_in_one_line(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        run = subprocess.run(
            [sys.executable, "-m", "broker.cli", "start", "--port", "0", "--data-dir", str(tmp_path)]
            + [
                "--override",
                f"listeners=EXTERNAL://:{port}",
                "--override",
                "listener.security.protocol.map=EXTERNAL:PLAINTEXT",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert run.returncode != 0
    assert run.stderr.strip().splitlines()[-1] == f"Error: Address already in use (listener EXTERNAL 127.0.0.1:{port})"


def test_a_listener_may_have_its_own_sasl_mechanisms_with_kafkas_prefix():
    cfg = BrokerConfig.from_props(
        {
            "listeners": "SASL_PLAINTEXT://:0,SASL_SSL://:0",
            "ssl.keystore.location": "/dev/null",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        }
    )
    assert cfg.enabled_mechanisms("SASL_SSL") == ["PLAIN", "SCRAM-SHA-256"]
    assert cfg.enabled_mechanisms("SASL_PLAINTEXT") == ["SCRAM-SHA-512"]  # the broker-wide setting
    cfg.to_props()  # the effective config (kl-broker configs) still prints
    bad = {"listener.name.sasl_ssl.sasl.enabled.mechanisms": "GSSAPI", "listeners": "SASL_SSL://:0"}
    with pytest.raises(InvalidConfigError, match="listener.name.sasl_ssl.sasl.enabled.mechanisms: GSSAPI"):
        BrokerConfig.from_props(dict(bad, **{"ssl.keystore.location": "/dev/null"}))
    with pytest.raises(InvalidConfigError, match="listener.name.other.sasl.enabled.mechanisms: no listener OTHER"):
        BrokerConfig.from_props({"listener.name.other.sasl.enabled.mechanisms": "PLAIN"})
