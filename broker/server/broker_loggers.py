"""Kafka's BROKER_LOGGER config resource (type 8): a broker's log levels, read and changed at run time.

`kafka-configs --entity-type broker-loggers` (here `kl-configs`) describes and alters them through DescribeConfigs and
IncrementalAlterConfigs, as Kafka's Log4jController does for log4j: each logger's effective level under Kafka's level
names, source DYNAMIC_BROKER_LOGGER_CONFIG; SET a level, DELETE it (the logger inherits its parent's again). The
change is the answering broker's own and lasts until it restarts, as in Kafka (nothing goes to the metadata log, so
the request is served where it arrives, never forwarded to the controller). Kafka's rules and messages: the resource
name must be this broker's id; a logger must exist; the root logger's level cannot be removed; APPEND and SUBTRACT are
refused; only Kafka's level names are accepted.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from net.errors import InvalidRequestError

ROOT_LOGGER = "root"  # Kafka's (log4j's) name for it
# Kafka's LogLevelConfig.VALID_LOG_LEVELS and the Python level each one means. TRACE and ALL are below DEBUG (Python has
# neither); OFF is above CRITICAL (FATAL), so that it silences the logger.
LEVELS: dict[str, int] = {
    "ALL": 1,
    "TRACE": 5,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "ERROR": logging.ERROR,
    "FATAL": logging.CRITICAL,
    "OFF": logging.CRITICAL + 10,
}
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def level_name(level: int) -> str:
    """Kafka's name of a Python level: the most verbose Kafka level that lets the same records through."""
    for name, value in sorted(LEVELS.items(), key=lambda kv: kv[1]):
        if level <= value:
            return name
    return "OFF"


def check_broker_id(resource_name: str, broker_id: int) -> None:
    """The resource names this broker, as Kafka requires of BROKER_LOGGER resources (INVALID_REQUEST otherwise)."""
    if not resource_name:
        raise InvalidRequestError("Broker id must not be empty")
    try:
        asked = int(resource_name)
    except ValueError:
        raise InvalidRequestError(f"Broker id must be an integer, but it is: {resource_name}") from None
    if asked != broker_id:
        raise InvalidRequestError(f"Unexpected broker id, expected {broker_id} but received {resource_name}")


def _logger(name: str) -> logging.Logger | None:
    """The logger of that name if it exists (Python creates one on first use, so existing ones are those made)."""
    if name == ROOT_LOGGER:
        return logging.getLogger()
    found = logging.Logger.manager.loggerDict.get(name)
    return found if isinstance(found, logging.Logger) else None


def describe() -> list[tuple[str, str]]:
    """(logger, Kafka level name of its effective level) of every logger of this process, the root first."""
    names = sorted(n for n, lg in logging.Logger.manager.loggerDict.items() if isinstance(lg, logging.Logger))
    return [(n, level_name(lg.getEffectiveLevel())) for n in [ROOT_LOGGER, *names] if (lg := _logger(n)) is not None]


def validate(ops: Sequence[tuple[str, int, str | None]]) -> None:
    """(logger, operation, value) changes of one resource, checked as Kafka's validateLogLevelConfigs does."""
    names = [name for name, _, _ in ops]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise InvalidRequestError(f"Error due to duplicate config keys : {','.join(duplicates)}")
    for name, op, value in ops:
        if op == SET:
            if value is None:
                raise InvalidRequestError(f"Null value not supported for : SET:{name}")
            if _logger(name) is None:
                raise InvalidRequestError(f"Logger {name} does not exist!")
            if value not in LEVELS:
                raise InvalidRequestError(
                    f"Cannot set the log level of {name} to {value} as it is not a supported log level. "
                    f"Valid log levels are {', '.join(sorted(LEVELS))}"
                )
        elif op == DELETE:
            if _logger(name) is None:
                raise InvalidRequestError(f"Logger {name} does not exist!")
            if name == ROOT_LOGGER:
                raise InvalidRequestError(f"Removing the log level of the {ROOT_LOGGER} logger is not allowed")
        elif op in (APPEND, SUBTRACT):
            kind = "APPEND" if op == APPEND else "SUBTRACT"
            raise InvalidRequestError(f"{kind} operation is not allowed for the BROKER_LOGGER resource")
        else:
            raise InvalidRequestError(f"unknown config operation {op}")


def apply(ops: Sequence[tuple[str, int, str | None]]) -> None:
    """Carry out validated changes: SET the level, DELETE it (the logger inherits its parent's)."""
    for name, op, value in ops:
        lg = _logger(name)
        assert lg is not None  # validated
        lg.setLevel(LEVELS[value] if op == SET and value is not None else logging.NOTSET)
