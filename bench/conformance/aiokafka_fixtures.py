"""aiokafka's docker-bound test fixtures, backed by a Kafka Lite cluster instead (bench/conformance/aiokafka.py).

Not imported by Kafka Lite: bench/conformance/aiokafka.py copies this file into aiokafka's checkout as
tests/_kafkalite_fixtures.py and appends `from ._kafkalite_fixtures import *` to tests/conftest.py. A later
binding of a name in a module replaces the earlier one, so pytest finds these fixtures in place of the conftest's
own `docker`, `kafka_image`, `ssl_folder`, `kafka_server`, `acl_manager`, `kafka_config` and `kerberos_utils`;
every other fixture and every test is aiokafka's, unchanged.

It runs in aiokafka's own venv, inside aiokafka's `tests` package: only the standard library, pytest and
aiokafka's tests/_testutil.py. The cluster it serves was started by the harness, which describes it in the JSON
file named by $KAFKALITE_AIOKAFKA_CLUSTER (ports, the certificates' folder, how to run Kafka Lite's CLIs).
"""

from __future__ import annotations

import importlib
import json
import os
import pathlib
import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NoReturn

import pytest

__all__ = ["acl_manager", "docker", "kafka_config", "kafka_image", "kafka_server", "kerberos_utils", "ssl_folder"]

CLUSTER_ENV = "KAFKALITE_AIOKAFKA_CLUSTER"
GSSAPI_SKIP = (
    "GSSAPI/Kerberos: Kafka Lite serves SASL PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 only (docs/SECURITY.md), "
    "and there is no KDC (aiokafka's docker image runs one)"
)

# aiokafka's tests/_testutil.py, as a sibling module of this one once copied into aiokafka's `tests` package.
# Imported by name at run time: in Kafka Lite's own tree `tests` is Kafka Lite's test suite, which bench/ may not
# import (setup.cfg [importlinter]).
_testutil: Any = importlib.import_module("._testutil", __package__)


def _cluster() -> dict[str, Any]:
    path = os.environ.get(CLUSTER_ENV)
    if not path:
        pytest.exit(f"${CLUSTER_ENV} is not set: run this suite with python -m bench.conformance.aiokafka", 2)
    return dict(json.loads(pathlib.Path(path).read_text()))


def _run_tool(module: str, args: list[str], what: str) -> bytes:
    """One of Kafka Lite's CLIs (client/cli/MODULE.py) in Kafka Lite's own venv, logged in as the super user on
    the cluster's admin listener; exit code and output as aiokafka's docker `exec_run` gives them back."""
    tool = _cluster()["tool"]
    cmd = [tool["python"], "-m", module, "--bootstrap-server", tool["bootstrap"], "--command-config",
           tool["command_config"], *args]  # fmt: skip
    proc = subprocess.run(cmd, env={**os.environ, **tool["env"]}, capture_output=True, timeout=120, check=False)
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise RuntimeError(f"Failed to apply {what}: {shlex.join(cmd[1:])}: {output.decode(errors='replace')}")
    return output


# --- the fixtures -------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def docker() -> Iterator[None]:
    """No docker daemon: the cluster runs as local processes (the conftest's docker client is used only by the
    fixtures replaced here)."""
    yield None


@pytest.fixture(scope="session")
def kafka_image(request: pytest.FixtureRequest) -> str:
    """As the conftest's: `--docker-image` (which names the Kafka version the tests gate on) or skip; nothing
    is pulled."""
    image = request.config.getoption("--docker-image")
    if not image:
        pytest.skip("Skipping functional test as `--docker-image` not provided")
    return str(image)


@pytest.fixture(scope="session")
def ssl_folder(docker: None, kafka_image: str) -> pathlib.Path:
    """gen-ssl-certs.sh's files (ca.crt, client.crt, client.key, server.*), made by the harness before the broker
    started, since the broker serves server.crt; the conftest's path, tests/ssl_cert."""
    return pathlib.Path(_cluster()["ssl_folder"])


@dataclass
class KafkaServer:
    """The conftest's KafkaServer, with no container."""

    host: str
    port: int
    ssl_port: int
    sasl_plain_port: int
    sasl_ssl_port: int
    container: None = None

    @property
    def hosts(self) -> list[str]:
        return [f"{self.host}:{self.port}"]


@pytest.fixture(scope="session")
def kafka_server(kafka_image: str, docker: None, ssl_folder: pathlib.Path) -> Iterator[KafkaServer]:
    """The harness's broker, with the four listeners the docker image's start-kafka.sh opens; waited for as the
    conftest waits for its container (tests/_testutil.py wait_kafka)."""
    c = _cluster()
    if not _testutil.wait_kafka(c["host"], c["port"]):
        pytest.exit(f"Could not reach Kafka Lite at {c['host']}:{c['port']}; see the broker log in {c['work_dir']}")
    yield KafkaServer(c["host"], c["port"], c["ssl_port"], c["sasl_plain_port"], c["sasl_ssl_port"])


class KafkaLiteACLManager(_testutil.ACLManager):  # type: ignore[misc]
    """aiokafka's ACLManager (its add/remove/list/cleanup and flag building), with kafka-acls.sh replaced by
    kl-acls, which takes the same flags. kafka-acls.sh wrote to ZooKeeper directly
    (`--authorizer-properties zookeeper.connect=...`, bypassing the broker's authorizer); kl-acls goes through
    the broker's CreateAcls/DeleteAcls/DescribeAcls as the super user admin, so that an ACL a test adds on the
    cluster cannot lock the harness out."""

    def __init__(self) -> None:
        super().__init__(None, "kafkalite")

    @property
    def cmd(self) -> str:
        return "kl-acls"

    def _exec(self, *cmd_options: str) -> bytes:
        # _format_params gives "--topic NAME"-style words, split by the docker SDK as by shlex
        args = ["--force", *shlex.split(" ".join(cmd_options))]
        return _run_tool("client.cli.acls", args, "ACL")


class KafkaLiteConfig(_testutil.KafkaConfig):  # type: ignore[misc]
    """aiokafka's KafkaConfig (add_scram_user) with kafka-configs.sh --zookeeper replaced by kl-configs, which
    sets SCRAM credentials through the broker (AlterUserScramCredentials) with the same flags."""

    def __init__(self) -> None:
        super().__init__(None, "kafkalite")

    @property
    def cmd(self) -> str:
        return "kl-configs"

    def _exec(self, *cmd_options: str) -> bytes:
        return _run_tool("client.cli.configs", list(cmd_options), "Config")


class NoKerberos:
    """In place of KerberosUtils: setup_test_class asks every integration class for it, so the fixture itself
    must not skip; each GSSAPI test skips when it first uses it."""

    keytab = None

    def create_keytab(self, *args: Any, **kwargs: Any) -> NoReturn:
        pytest.skip(GSSAPI_SKIP)

    def kinit(self, principal: str) -> NoReturn:
        pytest.skip(GSSAPI_SKIP)

    def kdestroy(self) -> NoReturn:
        pytest.skip(GSSAPI_SKIP)


@pytest.fixture(scope="class")
def acl_manager(kafka_server: KafkaServer, request: pytest.FixtureRequest) -> KafkaLiteACLManager:
    return KafkaLiteACLManager()


@pytest.fixture(scope="class")
def kafka_config(kafka_server: KafkaServer, request: pytest.FixtureRequest) -> KafkaLiteConfig:
    return KafkaLiteConfig()


@pytest.fixture(scope="class")
def kerberos_utils(kafka_server: KafkaServer) -> NoKerberos:
    return NoKerberos()
