"""docs/COMPATIBILITY.md's table of versions per listener is what the two listeners serve: every api key of the
Kafka listener (broker/network/kafka/codec.py SERVED, ApiVersions) and of the native one (net/protocol.py
SUPPORTED_VERSIONS), with their version ranges. On a mismatch the expected table is printed: paste it in."""

from __future__ import annotations

import re
from pathlib import Path

from kio.schema.index import api_key_map

from broker.network.kafka.codec import SERVED
from net.protocol import SUPPORTED_VERSIONS, ApiKey

ROOT = Path(__file__).resolve().parents[2]
SECTION = re.compile(r"<!-- listener-versions -->\n(.*?)<!-- /listener-versions -->", re.S)
API_VERSIONS = 18


# Broker-only apis of the native listener: Kafka names 52 Vote, and serves the others to its controllers only.
BROKER_ONLY = {
    ApiKey.QUORUM: "Quorum (broker to broker, Kafka Lite's own)",
    ApiKey.ALTER_PARTITION: "AlterPartition (broker to controller)",
    ApiKey.BROKER_REGISTRATION: "BrokerRegistration (broker to controller)",
    ApiKey.BROKER_HEARTBEAT: "BrokerHeartbeat (broker to broker)",
    ApiKey.UPDATE_METADATA: "UpdateMetadata (controller to broker)",
    ApiKey.ENVELOPE: "Envelope (broker to controller)",
}


def _name(key: int) -> str:
    if key in BROKER_ONLY:
        return BROKER_ONLY[key]  # type: ignore[index]
    return "".join(part.title() for part in api_key_map[key].split("_"))


def _range(r: tuple[int, int] | None) -> str:
    if r is None:
        return "—"
    return f"{r[0]}" if r[0] == r[1] else f"{r[0]}–{r[1]}"


def expected_table() -> str:
    kafka = {**SERVED, API_VERSIONS: (0, 4)}  # ApiVersions is answered by the codec itself
    native = {int(k): v for k, v in SUPPORTED_VERSIONS.items()}
    lines = ["| Key | API | Kafka listener | Native listener |", "|---:|---|---|---|"]
    for key in sorted(set(kafka) | set(native)):
        lines.append(f"| {key} | {_name(key)} | {_range(kafka.get(key))} | {_range(native.get(key))} |")
    return "\n".join(lines) + "\n"


def test_the_listener_versions_table_is_what_the_listeners_serve():
    doc = (ROOT / "docs" / "COMPATIBILITY.md").read_text()
    found = SECTION.search(doc)
    assert found is not None, "docs/COMPATIBILITY.md lacks its <!-- listener-versions --> section"
    want = expected_table()
    assert found.group(1) == want, "docs/COMPATIBILITY.md's versions table is stale; it should read:\n" + want
