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
    assert rows["segment.bytes"].default == "1073741824" and rows["segment.bytes"].type == "long"
    assert rows["cleanup.policy"].valid == "[delete, compact, compact,delete]"
    assert rows["unclean.leader.election.enable"].type == "boolean"
    assert all(r.doc for r in rows.values()), "every key is documented"


def test_error_messages_name_key_and_reason():
    with pytest.raises(InvalidConfigError, match=r"'segment.bytes': out of range \[14, 2147483647\]"):
        LogConfig.from_props({"segment.bytes": "10"})
    with pytest.raises(InvalidConfigError, match="'segment.ms': expected an integer"):
        LogConfig.from_props({"segment.ms": "soon"})
    with pytest.raises(InvalidConfigError, match="unknown topic config 'segment.size'"):
        LogConfig.from_props({"segment.size": "1"})
