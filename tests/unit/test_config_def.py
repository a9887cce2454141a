"""The config schema (net/config_def.py): Java .properties parsing and the derived key descriptions."""

from __future__ import annotations

import pytest

from broker.log.config import LogConfig
from net.config_def import read_properties
from net.errors import InvalidConfigError


def test_properties_escapes_continuations_and_separators(tmp_path):
    p = tmp_path / "server.properties"
    p.write_text(
        "# a comment\n"
        "! another comment\n"
        "log.dirs=/data/a,\\\n"
        "    /data/b\n"
        "broker.id : 3\n"
        "zookeeper.connect 127.0.0.1:2181\n"
        "key\\=with\\:seps=v\\u00e9\n"
        "   indented.key = spaced value  \n",
        encoding="utf-8",
    )
    props = read_properties(p)
    assert props["log.dirs"] == "/data/a,/data/b"
    assert props["broker.id"] == "3"
    assert props["zookeeper.connect"] == "127.0.0.1:2181"
    assert props["key=with:seps"] == "vé"
    assert props["indented.key"] == "spaced value  "
    assert len(props) == 5


def test_properties_errors_are_one_line(tmp_path):
    with pytest.raises(InvalidConfigError, match="cannot read config file"):
        read_properties(tmp_path / "missing.properties")
    bad = tmp_path / "bad.properties"
    bad.write_text("a=\\uZZZZ\n")
    with pytest.raises(InvalidConfigError, match="cannot parse config file"):
        read_properties(bad)


def test_describe_rows_come_from_the_schema():
    rows = {r.name: r for r in LogConfig.describe_keys()}
    assert set(rows) == set(LogConfig().to_props())
    assert rows["segment.bytes"].valid == "[14,...,2147483647]"
    assert rows["segment.bytes"].default == "1073741824" and rows["segment.bytes"].type == "int"
    assert rows["retention.ms"].type == "long" and rows["cleanup.policy"].type == "list"
    assert rows["cleanup.policy"].valid == "[compact, delete]"
    assert rows["compression.gzip.level"].valid == "[1,...,9] or -1"
    assert rows["unclean.leader.election.enable"].type == "boolean"
    assert all(r.doc for r in rows.values()), "every key is documented"


def test_error_messages_name_key_and_reason():
    with pytest.raises(InvalidConfigError, match=r"'segment.bytes': out of range \[14, 2147483647\]"):
        LogConfig.from_props({"segment.bytes": "10"})
    with pytest.raises(InvalidConfigError, match="'segment.ms': expected an integer"):
        LogConfig.from_props({"segment.ms": "soon"})
    with pytest.raises(InvalidConfigError, match="unknown topic config 'segment.size'"):
        LogConfig.from_props({"segment.size": "1"})


def test_broker_config_from_properties_file_and_topic_defaults(tmp_path):
    from broker.server.config import BrokerConfig

    p = tmp_path / "server.properties"
    p.write_text(
        "broker.id=7\nlog.dir=/tmp/kl-a\nlog.segment.bytes=2048\ncoordination=ZooKeeper\n"
        "zookeeper.connect=127.0.0.1:2181/kl\n"
    )
    cfg = BrokerConfig.from_props(read_properties(p))
    assert cfg.broker_id == 7 and [str(d) for d in cfg.log_dirs] == ["/tmp/kl-a"]
    assert cfg.coordination == "zookeeper"
    assert cfg.topic_config_defaults().segment_bytes == 2048
    with pytest.raises(InvalidConfigError, match="'broker.session.timeout.ms': must be >= 100"):
        BrokerConfig.from_props({"broker.session.timeout.ms": "50"})
    with pytest.raises(InvalidConfigError, match="broker config 'log.retention.ms'"):
        BrokerConfig.from_props({"log.retention.ms": "never"})
    with pytest.raises(InvalidConfigError, match="needs zookeeper.connect"):
        BrokerConfig.from_props({"coordination": "zookeeper"})
    names = [r.name for r in BrokerConfig.describe_keys()]
    assert "log.segment.bytes" in names and "topic_defaults" not in names and len(names) == len(set(names))


def test_configuration_doc_is_generated_from_the_schemas():
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    cp = subprocess.run([sys.executable, "scripts/config_docs.py", "--check"], cwd=root, capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr
