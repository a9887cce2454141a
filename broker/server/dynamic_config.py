"""Dynamic broker configs: the broker keys AlterConfigs / IncrementalAlterConfigs may change at run time, as
Kafka's DynamicBrokerConfig, kept in the metadata log (`broker_config` records: one broker's set, or the cluster
default's under the name "") so that every broker applies them, as Kafka keeps them in its metadata log.

Only the replication throttle rates are dynamic here (broker/quota/replication_quota.py). Precedence, most specific
first, as Kafka's: the broker's own value (DYNAMIC_BROKER_CONFIG), the cluster default
(DYNAMIC_DEFAULT_BROKER_CONFIG), server.properties (STATIC_BROKER_CONFIG), Kafka's default (DEFAULT_CONFIG).

Refusals are Kafka's: a static key ("Cannot update these configs dynamically"), a value its validator refuses
and a broker name that is not an id are INVALID_REQUEST (Kafka keeps that code even for a bad value,
KAFKA-13609); APPEND / SUBTRACT on a key that is not a list is INVALID_CONFIG. A key that is no broker config at
all is stored and described as Kafka does (Kafka keeps such keys for plugins; kafkajs's suite sets one), though
nothing here reads it.
"""

from __future__ import annotations

from typing import Any

from broker.quota.replication_quota import FOLLOWER_RATE, LEADER_RATE
from net.config_def import LONG_MAX
from net.errors import InvalidConfigError, InvalidRequestError

DYNAMIC_BROKER_KEYS = (LEADER_RATE, FOLLOWER_RATE)
DEFAULT_BROKER = ""  # the cluster-wide default resource (kafka-configs --entity-default)


def broker_resource(name: object) -> str:
    """A BROKER resource name: a broker id, or "" for the cluster default (Kafka's validateBrokerName)."""
    text = str(name).strip()
    if text != DEFAULT_BROKER and not text.isdigit():
        raise InvalidRequestError(f"Unable to parse broker name {name!r}")
    return text if text == DEFAULT_BROKER else str(int(text))


def _valid_rate(name: str, value: object) -> str:
    text = str(value).strip()
    try:
        rate = int(text)
    except ValueError:
        raise InvalidRequestError(f"Invalid value {text} for configuration {name}: Not a number of type LONG") from None
    if not 0 <= rate <= LONG_MAX:
        raise InvalidRequestError(f"Invalid value {rate} for configuration {name}: Value must be at least 0")
    return str(rate)


def altered(current: dict[str, str], changes: dict[str, Any], static_keys: frozenset[str]) -> dict[str, str]:
    """The broker resource's dynamic configs after `changes` (key -> value, None to delete, ["append" |
    "subtract", value]), validated; `static_keys` are the broker's other keys, refused as not dynamic."""
    out = dict(current)
    not_dynamic = sorted(str(k) for k in changes if str(k) in static_keys and str(k) not in DYNAMIC_BROKER_KEYS)
    if not_dynamic:
        raise InvalidRequestError(f"Cannot update these configs dynamically: {not_dynamic}")
    for k, v in changes.items():
        name = str(k)
        if v is None:
            out.pop(name, None)
        elif isinstance(v, list) and len(v) == 2 and v[0] in ("append", "subtract"):
            raise InvalidConfigError(f"Config value {v[0]} is not allowed for config key: {name}")
        else:
            out[name] = _valid_rate(name, v) if name in DYNAMIC_BROKER_KEYS else str(v)
    return out


def effective(
    dynamic: dict[str, dict[str, str]], broker_id: int, name: str, static: int
) -> tuple[int, dict[str, str], dict[str, str]]:
    """The value of dynamic key `name` on `broker_id`: its own, the cluster default's, else `static`; with the
    broker's and the default's dynamic sets (DescribeConfigs shows them as synonyms)."""
    own = dynamic.get(str(broker_id), {})
    default = dynamic.get(DEFAULT_BROKER, {})
    for found in (own, default):
        if name in found:
            return int(found[name]), own, default
    return static, own, default
