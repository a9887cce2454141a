"""A pytest plugin for kafka-python's own suite (bench/conformance/kafka_python.py loads it with `-p`): where a
test asks kafka-python's fixtures for a broker of its own, it gets a listener of the Kafka Lite broker instead.

kafka-python's fixtures take an external broker (KAFKA_URI), but only for the plain one: `KafkaFixture.instance`
with `transport='SSL'` (test_ssl_integration.py) or `'SASL_PLAINTEXT'` and a `sasl_mechanism`
(test_sasl_integration.py, through kafka_broker_factory) starts a Kafka of its own with those settings. Here it
returns the same fixture object in its external form (running, nothing to stop) at the Kafka Lite listener that
serves that transport and mechanism, with what the tests read off it: `port`, `ssl_dir/ca-cert`, the SASL user
(`alice`/`alice-secret`, KafkaFixture.broker_user/broker_password) and the JAAS line its `sasl_command.conf`
template renders. Nothing else in the suite changes: the exported checkout stays at its pinned commit.

Runs inside kafka-python's venv (no Kafka Lite import); the harness passes the listeners in the environment:
KAFKA_LITE_LISTENERS, a JSON map from "PLAINTEXT", "SSL" or "SASL_PLAINTEXT:<MECHANISM>" to a port, and
KAFKA_LITE_SSL_DIR, the directory of the CA certificate (`ca-cert`, the name gen_ssl_resources gives it).
Without KAFKA_LITE_LISTENERS the plugin does nothing (a run of the unit tests alone).
"""

from __future__ import annotations

import json
import os
from typing import Any

LISTENERS_ENV = "KAFKA_LITE_LISTENERS"
SSL_DIR_ENV = "KAFKA_LITE_SSL_DIR"


def listener_key(transport: str, sasl_mechanism: str | None) -> str:
    return transport.upper() if sasl_mechanism is None else f"{transport.upper()}:{sasl_mechanism.upper()}"


def pytest_configure(config: Any) -> None:
    if LISTENERS_ENV not in os.environ:
        return
    listeners: dict[str, int] = json.loads(os.environ[LISTENERS_ENV])
    ssl_dir = os.environ.get(SSL_DIR_ENV)

    import py  # kafka-python's fixtures' own dependency (py.path.local temp dirs)
    from test.integration.fixtures import KafkaFixture  # the suite's package: its root is on PYTHONPATH

    started = KafkaFixture.instance.__func__  # the classmethod's function: it is called with our cls below

    def instance(cls: Any, broker_id: int, **kw: Any) -> Any:
        if kw.get("external"):  # kafka_broker_factory's KAFKA_URI branch: already ours
            return started(cls, broker_id, **kw)
        transport = kw.get("transport", "PLAINTEXT")
        mechanism = kw.get("sasl_mechanism")
        key = listener_key(transport, mechanism)
        if key not in listeners:
            raise RuntimeError(f"the Kafka Lite harness has no listener for {key} (it has {sorted(listeners)})")
        fixture = cls(
            kw.get("host", "localhost"),
            listeners[key],
            broker_id,
            replicas=kw.get("replicas", 1),
            partitions=kw.get("partitions", 4),
            transport=transport,
            sasl_mechanism=mechanism,
            auto_create_topic=kw.get("auto_create_topic", True),
            external=True,
        )
        # KafkaFixture.open() would render these; the external form skips open(), so they are set here: a temp
        # dir for _cli_connect_args' sasl_command.conf (removed by close(), as the fixture's own), the CA's
        # directory, and the JAAS line (PLAIN: user_alice; SCRAM: alice's credential, --add-scram at start).
        fixture.tmp_dir = kw.get("tmp_dir") or py.path.local.mkdtemp()
        if fixture.ssl_enabled:
            if not ssl_dir:
                raise RuntimeError(f"the Kafka Lite harness set no {SSL_DIR_ENV}")
            fixture.ssl_dir = ssl_dir
        fixture.jaas_config = fixture._jaas_config()
        return fixture

    KafkaFixture.instance = classmethod(instance)
