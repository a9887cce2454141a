"""DescribeConfigs' entries, as Kafka's ConfigHelper builds them: each config with its value, Kafka's ConfigType,
its ConfigSource, its synonyms (where else the value could come from, most specific first) and its documentation.

A topic config's synonyms are the topic's own override (DYNAMIC_TOPIC_CONFIG), then its broker-level default
under the broker's name (`log.retention.ms` for `retention.ms`; STATIC_BROKER_CONFIG when server.properties sets
it) and Kafka's default under that name (DEFAULT_CONFIG). A broker's configs are described under Kafka's names
where Kafka Lite's key is Kafka's concept: the listener keys (`host`, `port`, `kafka.port`, ...) as `listeners`
and `advertised.listeners`, `peers` as `controller.quorum.voters`, and the topic defaults as their `log.*` keys.
The dynamic broker configs (broker/server/dynamic_config.py: the replication throttle rates) are not read-only; their
source is the most specific of DYNAMIC_BROKER_CONFIG (this broker's), DYNAMIC_DEFAULT_BROKER_CONFIG (the cluster
default's), STATIC_BROKER_CONFIG and DEFAULT_CONFIG, each one present a synonym, as Kafka describes them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import IntEnum

from broker.group.group_configs import GROUP_KEYS, default_of
from broker.log.config import LogConfig
from broker.server.config import TOPIC_DEFAULT_KEYS, TOPIC_SYNONYMS, BrokerConfig
from broker.server.dynamic_config import DEFAULT_BROKER, DYNAMIC_BROKER_KEYS
from net.config_def import ConfigSource, KeyDoc


class ConfigType(IntEnum):
    """Kafka's DescribeConfigsResponse ConfigType (KIP-569)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


def config_type(type_name: str) -> ConfigType:
    """The ConfigType of a schema type name (net/config_def.py: boolean, int, long, double, string, list, password)."""
    return ConfigType[type_name.upper()] if type_name.upper() in ConfigType.__members__ else ConfigType.UNKNOWN


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None  # None for a secret (Kafka sends null)
    source: ConfigSource
    type: ConfigType
    sensitive: bool
    read_only: bool
    doc: str
    synonyms: tuple[tuple[str, str | None, ConfigSource], ...]


# Broker keys whose Kafka default is null, the value coming from a coarser key (`log.retention.hours`=168,
# `log.roll.hours`, `log.roll.jitter.hours`, `log.flush.scheduler.interval.ms`): Kafka's ConfigHelper lists a topic
# config's synonyms from its broker key on, so with none of them set the topic config has no DEFAULT_CONFIG synonym
# (retention.ms: `synonyms=[]`, where compression.type has `compression.type=producer`).
KAFKA_UNSET_BY_DEFAULT = frozenset({"log.retention.ms", "log.roll.ms", "log.roll.jitter.ms", "log.flush.interval.ms"})


def topic_entries(config: BrokerConfig, overrides: dict[str, str], effective: LogConfig) -> list[ConfigEntry]:
    """Every topic config of a topic with these `overrides` and `effective` values, in name order."""
    kafka_defaults = {d.name: d for d in LogConfig.describe_keys()}
    out = []
    for name, value in sorted(effective.to_props().items()):
        doc = kafka_defaults[name]
        synonyms: list[tuple[str, str | None, ConfigSource]] = []
        if name in overrides:
            synonyms.append((name, value, ConfigSource.DYNAMIC_TOPIC_CONFIG))
        broker_name = TOPIC_SYNONYMS.get(name)
        if broker_name is not None:
            if name in config.topic_defaults:
                synonyms.append((broker_name, config.topic_defaults[name], ConfigSource.STATIC_BROKER_CONFIG))
            if broker_name not in KAFKA_UNSET_BY_DEFAULT:
                synonyms.append((broker_name, doc.default, ConfigSource.DEFAULT_CONFIG))
        source = synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG
        out.append(ConfigEntry(name, value, source, config_type(doc.type), False, False, doc.doc, tuple(synonyms)))
    return out


def broker_entries(config: BrokerConfig, dynamic: dict[str, dict[str, str]] | None = None) -> list[ConfigEntry]:
    """This broker's configs under Kafka's names, in name order: read-only (static: server.properties) but for
    the dynamic ones, which `dynamic` (the metadata image's broker_configs) may set."""
    static_entries = _static_broker_entries(config)
    own = (dynamic or {}).get(str(config.broker_id), {})
    default = (dynamic or {}).get(DEFAULT_BROKER, {})
    out = [_dynamic_entry(e, own, default) if e.name in DYNAMIC_BROKER_KEYS else e for e in static_entries]
    # Keys that are no broker config, stored as Kafka stores them (broker/server/dynamic_config.py): described too.
    known = {e.name for e in out}
    extra = {**{k: v for k, v in default.items() if k not in known}, **{k: v for k, v in own.items() if k not in known}}
    for name in sorted(extra):
        empty = ConfigEntry(name, None, ConfigSource.UNKNOWN, ConfigType.STRING, False, True, "", ())
        out.append(_dynamic_entry(empty, own, default))
    return sorted(out, key=lambda e: e.name)


def default_broker_entries(default: dict[str, str]) -> list[ConfigEntry]:
    """The cluster default broker resource (""): the dynamic configs set on it, as Kafka describes it."""
    docs = {d.name: d for d in BrokerConfig.describe_keys()}
    out = []
    for name, value in sorted(default.items()):
        source = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        kind = config_type(docs[name].type) if name in docs else ConfigType.STRING
        doc = docs[name].doc if name in docs else ""
        out.append(ConfigEntry(name, value, source, kind, False, False, doc, ((name, value, source),)))
    return out


def _dynamic_entry(static: ConfigEntry, own: dict[str, str], default: dict[str, str]) -> ConfigEntry:
    """A dynamic key's entry: its dynamic values in front of the static synonyms, the first one its value."""
    synonyms: list[tuple[str, str | None, ConfigSource]] = (
        [(static.name, own[static.name], ConfigSource.DYNAMIC_BROKER_CONFIG)] if static.name in own else []
    )
    if static.name in default:
        synonyms.append((static.name, default[static.name], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG))
    synonyms += static.synonyms
    value, source = (synonyms[0][1], synonyms[0][2]) if synonyms else (static.value, static.source)
    return replace(static, value=value, source=source, read_only=False, synonyms=tuple(synonyms))


def _static_broker_entries(config: BrokerConfig) -> list[ConfigEntry]:
    docs = {d.name: d for d in BrokerConfig.describe_keys()}
    secret = config.sensitive_keys()
    values = config.to_props()
    rows: dict[str, tuple[str, bool, KeyDoc]] = {}  # name -> (value, set statically, doc)
    for name, value in values.items():
        if name not in _RENAMED:
            rows[name] = (value, value != docs[name].default, docs[name])
    topic_defaults = config.topic_config_defaults().to_props()
    for broker_name, topic_name in TOPIC_DEFAULT_KEYS.items():
        rows[broker_name] = (topic_defaults[topic_name], topic_name in config.topic_defaults, docs[broker_name])
    for name, (value, text) in _listener_keys(config).items():
        rows[name] = (value, True, KeyDoc(name, "list", "", "", text))
    voters = docs["peers"]
    rows["controller.quorum.voters"] = (
        config.peers,
        bool(config.peers),
        KeyDoc("controller.quorum.voters", "list", "", "", voters.doc),
    )
    out = []
    for name, (value, static, key_doc) in sorted(rows.items()):
        shown = None if name in secret else value
        synonyms: list[tuple[str, str | None, ConfigSource]] = []
        if static:
            synonyms.append((name, shown, ConfigSource.STATIC_BROKER_CONFIG))
        if key_doc.default or not static:
            synonyms.append((name, None if name in secret else key_doc.default, ConfigSource.DEFAULT_CONFIG))
        source = ConfigSource.STATIC_BROKER_CONFIG if static else ConfigSource.DEFAULT_CONFIG
        kind = config_type(key_doc.type)
        out.append(ConfigEntry(name, shown, source, kind, name in secret, True, key_doc.doc, tuple(synonyms)))
    return out


# Kafka Lite's listener keys, described as Kafka's listeners / advertised.listeners instead.
_RENAMED = frozenset(
    {"host", "port", "advertised.host", "kafka.port", "kafka.host", "kafka.advertised.host", "inter.broker.port"}
    | {"peers", "listeners", "advertised.listeners"}
)


def _listener_keys(config: BrokerConfig) -> dict[str, tuple[str, str]]:
    """`listeners` and `advertised.listeners` in Kafka's NAME://host:port form: every listener of the broker,
    named ones and the built-in NATIVE (port), KAFKA (kafka.port) and BROKER (inter.broker.port) of the short
    forms (broker/security/listeners.py); the inter-broker listener is not advertised to clients."""
    listeners = config.listener_list()
    bound = ",".join(f"{lst.name}://{lst.host}:{lst.port}" for lst in listeners)
    advertised = ",".join(
        f"{lst.name}://{lst.advertised_host}:{lst.advertised_port or lst.port}"
        for lst in listeners
        if not lst.inter_broker
    )
    return {
        "listeners": (
            bound,
            "The broker's listeners as NAME://host:port (with the short forms host, port, "
            "kafka.host, kafka.port, inter.broker.port).",
        ),
        "advertised.listeners": (advertised, "The addresses clients are told to use, per listener."),
    }


# The topic configs of Kafka's list type: the only ones IncrementalAlterConfigs may APPEND to or SUBTRACT from.
LIST_KEYS = frozenset(d.name for d in LogConfig.describe_keys() if d.type == "list")


def group_entries(config: BrokerConfig, overrides: dict[str, str]) -> list[ConfigEntry]:
    """A group's configs (broker/group/group_configs.py), in name order: its own override (DYNAMIC_GROUP_CONFIG,
    Kafka's source 8), else the broker's value of the same meaning (its synonym)."""
    props = config.to_props()
    out = []
    for name, key in sorted(GROUP_KEYS.items()):
        default = default_of(key, props)
        synonyms: list[tuple[str, str | None, ConfigSource]] = []
        if name in overrides:
            synonyms.append((name, overrides[name], ConfigSource.DYNAMIC_GROUP_CONFIG))
        synonyms.append((key.broker_key or name, default, ConfigSource.DEFAULT_CONFIG))
        value = overrides.get(name, default)
        out.append(
            ConfigEntry(name, value, synonyms[0][2], config_type(key.type), False, False, key.doc, tuple(synonyms))
        )
    return out
