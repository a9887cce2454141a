from __future__ import annotations

import pytest

from broker.log.checkpoint import (
    CorruptCheckpointError,
    LeaderEpochCheckpoint,
    read_checkpoint,
    write_checkpoint,
)


def test_round_trip_in_kafka_format(tmp_path):
    path = tmp_path / "recovery-point-offset-checkpoint"
    write_checkpoint(path, {("orders", 1): 1432, ("my-topic-x", 0): 7})
    assert path.read_text() == "0\n2\nmy-topic-x 0 7\norders 1 1432\n"
    assert read_checkpoint(path) == {("orders", 1): 1432, ("my-topic-x", 0): 7}
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no tmp file left behind


def test_overwrite_replaces_content(tmp_path):
    path = tmp_path / "cp"
    write_checkpoint(path, {("a", 0): 1, ("b", 0): 2})
    write_checkpoint(path, {("a", 0): 5})
    assert read_checkpoint(path) == {("a", 0): 5}
    write_checkpoint(path, {})
    assert read_checkpoint(path) == {}


def test_missing_file_is_empty(tmp_path):
    assert read_checkpoint(tmp_path / "nope") == {}


@pytest.mark.parametrize(
    "text",
    ["", "1\n0\n", "0\n2\na 0 1\n", "0\n1\na 0\n", "0\n1\na x 1\n", "zero\n0\n", "0\n1\na 0 1 2\n"],
)
def test_malformed_file_raises(tmp_path, text):
    path = tmp_path / "cp"
    path.write_text(text)
    with pytest.raises(CorruptCheckpointError, match="cp"):
        read_checkpoint(path)


def test_leader_epoch_checkpoint(tmp_path):
    cp = LeaderEpochCheckpoint(tmp_path / "leader-epoch-checkpoint")
    assert cp.read() == []
    cp.write([(0, 0), (3, 120)])
    assert cp.path.read_text() == "0\n2\n0 0\n3 120\n"
    assert cp.read() == [(0, 0), (3, 120)]
    cp.path.write_text("0\n1\n3\n")
    with pytest.raises(CorruptCheckpointError):
        cp.read()
