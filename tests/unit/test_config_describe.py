"""DescribeConfigs' entries (broker/server/config_describe.py): Kafka's ConfigType, ConfigSource and synonyms."""

from __future__ import annotations

from broker.server.config import BrokerConfig
from broker.server.config_describe import ConfigSource as S
from broker.server.config_describe import ConfigType as T
from broker.server.config_describe import broker_entries, default_broker_entries, topic_entries
from net.config_def import is_default


def _topic(props: dict[str, str], overrides: dict[str, str]) -> dict:
    cfg = BrokerConfig.from_props(props)
    return {e.name: e for e in topic_entries(cfg, overrides, cfg.topic_config_defaults().merged(overrides))}


def test_a_topic_config_names_its_override_then_the_broker_synonyms():
    rows = _topic({"log.retention.ms": "1000"}, {"retention.ms": "5000"})
    r = rows["retention.ms"]
    assert (r.value, r.source, r.type) == ("5000", S.DYNAMIC_TOPIC_CONFIG, T.LONG)
    # Kafka's log.retention.ms has no default of its own (log.retention.hours=168 gives it): no DEFAULT_CONFIG row
    assert r.synonyms == (
        ("retention.ms", "5000", S.DYNAMIC_TOPIC_CONFIG),
        ("log.retention.ms", "1000", S.STATIC_BROKER_CONFIG),
    )
    compression = _topic({}, {})["compression.type"]  # a broker key with a default: its DEFAULT_CONFIG row
    assert compression.synonyms == (("compression.type", "producer", S.DEFAULT_CONFIG),)
    assert _topic({}, {})["retention.ms"].synonyms == ()  # as Kafka: kafkajs's describeConfigs test expects []
    assert is_default(r.source, r.read_only) is False  # set on the topic
    # no override: the broker's static default is the source; still a default for the topic (native is_default)
    rows = _topic({"log.retention.ms": "1000"}, {})
    r = rows["retention.ms"]
    assert (r.value, r.source) == ("1000", S.STATIC_BROKER_CONFIG) and is_default(r.source, r.read_only) is True
    # no broker synonym at all (tiered storage, throttles): DEFAULT_CONFIG and no synonyms
    assert rows["remote.storage.enable"].source == S.DEFAULT_CONFIG and rows["remote.storage.enable"].synonyms == ()
    assert {e.type for e in rows.values()} >= {T.BOOLEAN, T.STRING, T.INT, T.LONG, T.DOUBLE, T.LIST}
    assert T.UNKNOWN not in {e.type for e in rows.values()}


def test_broker_configs_under_kafkas_names():
    cfg = BrokerConfig.from_props(
        {"port": "9000", "kafka.port": "9001", "kafka.advertised.host": "kafka.example", "num.partitions": "3"}
    )
    rows = {e.name: e for e in broker_entries(cfg)}
    assert rows["listeners"].value.startswith("NATIVE://127.0.0.1:9000,KAFKA://127.0.0.1:9001")
    assert rows["advertised.listeners"].value == "NATIVE://127.0.0.1:9000,KAFKA://kafka.example:9001"
    assert not {"port", "kafka.port", "host", "peers"} & set(rows)
    assert rows["num.partitions"].source == S.STATIC_BROKER_CONFIG and rows["num.partitions"].type == T.INT
    assert rows["offsets.topic.replication.factor"].type == T.SHORT and rows["log.retention.ms"].type == T.LONG
    assert rows["num.partitions"].synonyms[-1] == ("num.partitions", "1", S.DEFAULT_CONFIG)
    assert rows["log.segment.bytes"].source == S.DEFAULT_CONFIG and rows["log.segment.bytes"].type == T.INT
    dynamic = {"leader.replication.throttled.rate", "follower.replication.throttled.rate"}
    assert all(e.read_only for e in rows.values() if e.name not in dynamic)
    assert not any(rows[k].read_only for k in dynamic)
    secret = BrokerConfig.from_props({"sasl.jaas.config": 'x required username="a" password="b";'})
    jaas = {e.name: e for e in broker_entries(secret)}["sasl.jaas.config"]
    assert jaas.value is None and jaas.sensitive and jaas.type == T.PASSWORD
    assert all(v is None for _, v, _ in jaas.synonyms)


def test_dynamic_broker_configs_are_described_with_their_source_and_synonyms():
    """A throttle rate set on this broker wins over the cluster default, which wins over server.properties;
    each one present is a synonym, as Kafka's DescribeConfigs shows a dynamic broker config."""
    cfg = BrokerConfig.from_props({"broker.id": "2", "leader.replication.throttled.rate": "7"})
    rate = "leader.replication.throttled.rate"
    plain = {e.name: e for e in broker_entries(cfg, {})}[rate]
    assert (plain.value, plain.source, plain.read_only) == ("7", S.STATIC_BROKER_CONFIG, False)
    both = {"2": {rate: "100"}, "": {rate: "50"}, "3": {rate: "1"}}
    r = {e.name: e for e in broker_entries(cfg, both)}[rate]
    assert (r.value, r.source, r.type) == ("100", S.DYNAMIC_BROKER_CONFIG, T.LONG)
    assert [(v, s) for _, v, s in r.synonyms] == [
        ("100", S.DYNAMIC_BROKER_CONFIG),
        ("50", S.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("7", S.STATIC_BROKER_CONFIG),
        ("9223372036854775807", S.DEFAULT_CONFIG),
    ]
    assert is_default(r.source, r.read_only) is False  # set dynamically: not a default
    default_only = {e.name: e for e in broker_entries(cfg, {"": {rate: "50"}})}[rate]
    assert (default_only.value, default_only.source) == ("50", S.DYNAMIC_DEFAULT_BROKER_CONFIG)
    follower = {e.name: e for e in broker_entries(cfg, both)}["follower.replication.throttled.rate"]
    assert follower.source == S.DEFAULT_CONFIG and is_default(follower.source, follower.read_only) is True
    stored = {e.name: e for e in broker_entries(cfg, {"2": {"cleanup.policy": "delete"}})}["cleanup.policy"]
    assert (stored.value, stored.source, stored.read_only) == ("delete", S.DYNAMIC_BROKER_CONFIG, False)
    assert [(e.name, e.value, e.source) for e in default_broker_entries({rate: "50"})] == [
        (rate, "50", S.DYNAMIC_DEFAULT_BROKER_CONFIG)
    ]


def test_share_group_bounds_are_kafkas_rules_on_the_broker_and_on_each_group():
    """group.share.min/max.* bound the broker's value (a start with one outside is refused in Kafka's words) and
    each share group's own config of the same meaning (INVALID_CONFIG naming the bounds)."""
    import pytest

    from broker.group.group_configs import altered
    from broker.server.config_describe import group_entries
    from net.config_def import InvalidConfigError

    BrokerConfig.from_props({}).validate()
    with pytest.raises(InvalidConfigError, match="group.share.min.record.lock.duration.ms must be less than or equal"):
        BrokerConfig.from_props({"group.share.record.lock.duration.ms": "3000"}).validate()
    with pytest.raises(InvalidConfigError, match="group.share.max.session.timeout.ms must be greater than or equal"):
        BrokerConfig.from_props({"group.share.session.timeout.ms": "90000"}).validate()
    low = BrokerConfig.from_props(
        {"group.share.record.lock.duration.ms": "3000", "group.share.min.record.lock.duration.ms": "1000"}
    )
    low.validate()
    props = low.to_props()
    assert altered({}, {"share.record.lock.duration.ms": "1000"}, props) == {"share.record.lock.duration.ms": "1000"}
    with pytest.raises(InvalidConfigError, match=r"999 is not in \[1000, 60000\]"):
        altered({}, {"share.record.lock.duration.ms": "999"}, props)
    with pytest.raises(InvalidConfigError, match=r"is not in \[100, 4000\]"):
        altered({}, {"share.partition.max.record.locks": "5000"}, props)
    with pytest.raises(InvalidConfigError, match="not one of"):
        altered({}, {"share.isolation.level": "read_dirty"}, props)
    # the consumer protocol's group configs (KIP-848), within group.consumer.min/max.*
    assert altered({}, {"consumer.session.timeout.ms": "50000"}, props) == {"consumer.session.timeout.ms": "50000"}
    with pytest.raises(InvalidConfigError, match=r"30000 is not in \[45000, 60000\]"):
        altered({}, {"consumer.session.timeout.ms": "30000"}, props)
    with pytest.raises(InvalidConfigError, match="group.consumer.min.heartbeat.interval.ms must be less than"):
        BrokerConfig.from_props({"group.consumer.heartbeat.interval.ms": "1000"}).validate()
    # a group without its own share.isolation.level has Kafka's default, which has no broker key
    [iso] = [e for e in group_entries(low, {}) if e.name == "share.isolation.level"]
    assert iso.value == "read_uncommitted" and iso.source == S.DEFAULT_CONFIG
