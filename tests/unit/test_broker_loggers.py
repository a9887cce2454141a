"""broker/server/broker_loggers.py: Kafka's BROKER_LOGGER rules over Python's logging, without a broker."""

from __future__ import annotations

import logging

import pytest

from broker.server import broker_loggers as bl
from net.errors import InvalidRequestError


@pytest.fixture
def logger():
    lg = logging.getLogger("kafkalite.test_broker_loggers")
    lg.setLevel(logging.NOTSET)
    yield lg
    lg.setLevel(logging.NOTSET)


def test_levels_map_both_ways_and_effective_levels_are_described(logger):
    for name, level in bl.LEVELS.items():
        assert bl.level_name(level) == name
    assert bl.level_name(logging.NOTSET) == "ALL" and bl.level_name(25) == "WARN" and bl.level_name(99) == "OFF"
    bl.apply([(logger.name, bl.SET, "TRACE")])
    described = dict(bl.describe())
    assert described[logger.name] == "TRACE" and next(iter(described)) == "root"
    assert logger.isEnabledFor(5) and not logger.isEnabledFor(1)
    bl.apply([(logger.name, bl.DELETE, None)])
    assert logger.level == logging.NOTSET and dict(bl.describe())[logger.name] == bl.level_name(
        logging.getLogger("kafkalite").getEffectiveLevel()
    )


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        ([("kafkalite.nope.never", bl.SET, "INFO")], "Logger kafkalite.nope.never does not exist!"),
        ([("kafkalite.test_broker_loggers", bl.SET, "info")], "not a supported log level"),
        ([("kafkalite.test_broker_loggers", bl.SET, None)], "Null value not supported for : SET:"),
        ([("root", bl.DELETE, None)], "Removing the log level of the root logger is not allowed"),
        ([("kafkalite.test_broker_loggers", bl.SUBTRACT, "INFO")], "SUBTRACT operation is not allowed"),
        ([("kafkalite.test_broker_loggers", 9, "INFO")], "unknown config operation 9"),
        ([("root", bl.SET, "INFO"), ("root", bl.SET, "WARN")], "duplicate config keys : root"),
    ],
)
def test_kafkas_refusals(logger, ops, message):
    with pytest.raises(InvalidRequestError, match=message):
        bl.validate(ops)
    assert logger.level == logging.NOTSET


@pytest.mark.parametrize(
    ("name", "message"),
    [("", "must not be empty"), ("one", "must be an integer, but it is: one"), ("2", "expected 1 but received 2")],
)
def test_the_resource_names_this_broker(name, message):
    with pytest.raises(InvalidRequestError, match=message):
        bl.check_broker_id(name, 1)
    bl.check_broker_id("1", 1)
