"""Kafka's named listeners (docs/SECURITY.md "Listeners"), sans-IO: the keys `listeners`,
`advertised.listeners`, `listener.security.protocol.map` and Kafka Lite's `listener.wire.map`, parsed into
one `Listener` per name.

Three names are built in and keep their short forms: NATIVE (`host`/`port`, msgpack), KAFKA (`kafka.port`,
Kafka's binary protocol) and BROKER (`inter.broker.port`, the inter-broker listener). Naming one of them in
`listeners` sets its address; any other name (`PLAINTEXT://:9092,SSL://:9093`) adds a listener, Kafka's
wire unless `listener.wire.map` says native. Each listener has its own security protocol and wire;
Metadata answers a client with the advertised endpoints of the listener it came in on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import Field

from net.config_def import ConfigDef, Str, key
from net.errors import InvalidConfigError
from net.security import SECURITY_PROTOCOLS

NATIVE, KAFKA, BROKER = "NATIVE", "KAFKA", "BROKER"
BUILT_IN = (NATIVE, KAFKA, BROKER)
# Not a listener: the name of AlterPartition requests relayed through ZooKeeper (from a broker).
RELAY = "relay"
WIRES = ("native", "kafka")
LISTENER_MECHANISMS = re.compile(r"^listener\.name\.([A-Za-z0-9_-]+)\.sasl\.enabled\.mechanisms$")
_ENDPOINT = re.compile(r"^([A-Za-z0-9_-]+)://(\[[0-9A-Fa-f:.]+\]|[^:/\[\]]*):(\d+)$")


class ArrivedOn(Protocol):
    """What a request's connection says of its listener (broker/network/server.py ConnectionContext)."""

    listener: str
    wire: str


@dataclass(frozen=True)
class Listener:
    """One listener: where it binds, what it tells clients, how it is secured and which wire it speaks."""

    name: str
    host: str
    port: int  # 0: any free port, known once bound
    protocol: str
    wire: str  # "native" (msgpack) or "kafka" (Kafka's binary protocol)
    advertised_host: str
    advertised_port: int  # 0: the bound port

    @property
    def inter_broker(self) -> bool:
        return self.name == BROKER


class ListenerKeys(ConfigDef):
    """Mixed into the broker's security keys: the listener set beyond the three built-in ones."""

    # Kafka's per-listener prefix, for the one key read per listener: listener.name.<name>.sasl.enabled.mechanisms
    # (BrokerConfig.from_props takes them out of the properties; not a key of its own in the schema).
    listener_mechanisms: dict[str, str] = Field(default_factory=dict)

    listeners: Str = key(
        "listeners",
        "",
        "NAME://HOST:PORT,... (Kafka's format): the broker's listeners. NATIVE, KAFKA and BROKER set the "
        "built-in ones (else port, kafka.port, inter.broker.port); any other name adds a listener, e.g. "
        "PLAINTEXT://:9092,SSL://:9093,SASL_SSL://:9094. An empty HOST is host; port 0 is any free port.",
    )
    advertised_listeners: Str = key(
        "advertised.listeners",
        "",
        "NAME://HOST:PORT,...: what Metadata tells the clients of each listener (internal and external "
        "addresses); a listener not named here advertises its own host (advertised.host, kafka.advertised.host "
        "for the built-in ones) and bound port. Every name must be a listener.",
    )
    listener_wire_map: Str = key(
        "listener.wire.map",
        "",
        "NAME:WIRE,... (Kafka Lite), WIRE native or kafka: the wire each listener speaks, msgpack (native) or "
        "Kafka's binary protocol (kafka). Default: native for NATIVE and BROKER (which must stay native), kafka "
        "for every other.",
    )


def parse_endpoints(key_name: str, value: str) -> dict[str, tuple[str, int]]:
    """`NAME://HOST:PORT,...` → {NAME: (host, port)}; one clear INVALID_CONFIG naming the key otherwise."""
    out: dict[str, tuple[str, int]] = {}
    for item in (i.strip() for i in value.split(",")):
        if not item:
            continue
        m = _ENDPOINT.match(item)
        if m is None or int(m.group(3)) > 65535:
            raise InvalidConfigError(f"{key_name} entry {item!r} is not NAME://HOST:PORT (port 0-65535)")
        name = m.group(1).upper()
        if name in out:
            raise InvalidConfigError(f"{key_name} names listener {name} twice")
        out[name] = (m.group(2).strip("[]"), int(m.group(3)))
    return out


def parse_map(key_name: str, value: str, allowed: tuple[str, ...], normalize: str = "upper") -> dict[str, str]:
    """`NAME:VALUE,...` → {NAME: VALUE} with VALUE one of `allowed`."""
    out: dict[str, str] = {}
    for item in (i.strip() for i in value.split(",")):
        if not item:
            continue
        name, sep, val = item.partition(":")
        name = name.strip().upper()
        val = val.strip().upper() if normalize == "upper" else val.strip().lower()
        if not sep or not name or val not in allowed:
            raise InvalidConfigError(f"{key_name} entry {item!r} is not NAME:{'|'.join(allowed)}")
        if name in out:
            raise InvalidConfigError(f"{key_name} names listener {name} twice")
        out[name] = val
    return out


def default_protocol(name: str, short_form: str) -> str | None:
    """A listener's protocol when listener.security.protocol.map does not name it: security.protocol for the
    built-in ones, the name itself for Kafka's defaults (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), else none."""
    if name in BUILT_IN:
        return short_form
    return name if name in SECURITY_PROTOCOLS else None


def build_listeners(
    declared: dict[str, tuple[str, int]],
    built_in: dict[str, tuple[str, int, str]],
    advertised: dict[str, tuple[str, int]],
    protocols: dict[str, str],
    wires: dict[str, str],
    default_host: str,
) -> list[Listener]:
    """Every listener: the built-in ones (`built_in`: name → (bind host, port, advertised host) from their short
    forms, a KAFKA of port -1 meaning none) overridden by `listeners`, then the other declared names. Checks
    what only the whole set can: advertised names are listeners, no port bound twice, BROKER speaks native."""
    for name in advertised:
        if name not in declared and not (name in built_in and built_in[name][1] >= 0):
            raise InvalidConfigError(f"advertised.listeners names {name}, which is not in listeners")
    for name in wires:
        if name not in declared and name not in built_in:
            raise InvalidConfigError(f"listener.wire.map names {name}, which is not in listeners")
    if wires.get(BROKER, "native") != "native":
        raise InvalidConfigError("listener.wire.map: BROKER (the inter-broker listener) speaks native only")
    out: list[Listener] = []
    names = [n for n in BUILT_IN if n in declared or built_in[n][1] >= 0] + [n for n in declared if n not in BUILT_IN]
    for name in names:
        if name in declared:
            host, port = declared[name]
            host = host or default_host
            adv_default = host if name not in built_in else built_in[name][2]
        else:
            host, port, adv_default = built_in[name]
        adv_host, adv_port = advertised.get(name, ("", 0))
        adv_host = adv_host or adv_default
        if adv_host in ("0.0.0.0", "::"):
            raise InvalidConfigError(f"advertised.listeners: {name} cannot advertise {adv_host} (name a host)")
        protocol = protocols.get(name)
        if protocol is None:
            raise InvalidConfigError(
                f"listener.security.protocol.map has no protocol for listener {name} (add {name}:PROTOCOL)"
            )
        wire = wires.get(name, "native" if name in (NATIVE, BROKER) else "kafka")
        out.append(Listener(name, host, port, protocol, wire, adv_host, adv_port))
    seen: dict[tuple[str, int], str] = {}
    for lst in out:
        if lst.port == 0:
            continue
        for other_host in (lst.host, "0.0.0.0", "::"):
            other = seen.get((other_host, lst.port))
            if other is not None:
                raise InvalidConfigError(f"listeners: port {lst.port} is used by both {other} and {lst.name}")
        if lst.host in ("0.0.0.0", "::"):
            clash = next((n for (h, p), n in seen.items() if p == lst.port), None)
            if clash is not None:
                raise InvalidConfigError(f"listeners: port {lst.port} is used by both {clash} and {lst.name}")
        seen[(lst.host, lst.port)] = lst.name
    return out


def metadata_listener(body: dict[str, Any], ctx: "ArrivedOn") -> str:
    """Whose endpoints a Metadata (or FindCoordinator) answer names: the listener the request came in on, as
    Kafka answers. A native request may name another listener ("listener": "kafka" → KAFKA, for tools that
    print the Kafka ports); the inter-broker listener's peers are told the native endpoints."""
    if ctx.wire == "native":
        named = body.get("listener")
        if isinstance(named, str) and named:
            return named.upper()
        if ctx.listener in (BROKER, RELAY):
            return NATIVE
    return ctx.listener


def reachable_controller(controller: int | None, listed: set[int], me: int) -> int:
    """The controller a Kafka client is told of (Metadata, DescribeCluster) must be one it can reach: clients send
    admin requests to it, and librdkafka waits (up to the request timeout) for a controller missing from the broker
    list. Until the active controller's listener is registered, name the answering broker, which forwards admin
    requests to the controller (KIP-590); Kafka in KRaft mode names a random live broker for that reason."""
    if controller is not None and controller in listed:
        return controller
    return me if me in listed else -1
