"""Kafka's wire integer types, for the numbers Kafka Lite reads off msgpack frames.

msgpack carries integers of any size up to 64 bits (signed or not), where Kafka's binary protocol has fixed
widths: int32 epochs, ids and counts, int64 offsets. A number that does not fit the type Kafka gives its field
must be refused when it is read, before anything uses it: a forged quorum epoch of 2**31-1 once made the next
election's epoch overflow the record batch's int32 field (the controller crashed writing its metadata log),
and 2**63 was persisted to `quorum-state`. `IntType` is one field's type; the named ones below are the kinds
every decoder uses, so that one field has one rule wherever it is read (election/messages.py,
broker/server/kafka_apis.py, the group and heartbeat apis, and the defensive checks where quorum-state and the
metadata log are written).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from net.errors import MalformedRequest

INT16_MIN, INT16_MAX = -(2**15), 2**15 - 1
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class WireRangeError(MalformedRequest):
    """A number read off the wire is not an integer of its field's type: the request is refused."""


@dataclass(frozen=True, slots=True)
class IntType:
    """A field's wire type: Kafka's width, and the smallest value Kafka accepts there (-1 where it is a
    sentinel such as "no epoch" or "a consumer, not a replica")."""

    name: str
    lo: int
    hi: int

    def check(self, value: Any, what: str) -> int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise WireRangeError(f"{what} must be an integer ({self.name})")
        if not self.lo <= value <= self.hi:
            raise WireRangeError(f"{what} {value} is out of range for {self.name} [{self.lo}, {self.hi}]")
        return value

    def check_optional(self, value: Any, what: str) -> int | None:
        return None if value is None else self.check(value, what)


INT16 = IntType("int16", INT16_MIN, INT16_MAX)
INT32 = IntType("int32", INT32_MIN, INT32_MAX)
INT64 = IntType("int64", INT64_MIN, INT64_MAX)
# Epochs: the controller quorum's, a partition's leader and partition epochs, a batch's leader epoch.
EPOCH = IntType("int32 epoch >= 0", 0, INT32_MAX)
EPOCH_OR_NONE = IntType("int32 epoch >= -1", -1, INT32_MAX)  # -1: unknown / not checked (KIP-320)
BROKER_ID = IntType("int32 broker id >= 0", 0, INT32_MAX)
REPLICA_ID = IntType("int32 replica id >= -1", -1, INT32_MAX)  # -1: a consumer
PARTITION = IntType("int32 partition >= 0", 0, INT32_MAX)
COUNT = IntType("int32 count >= 0", 0, INT32_MAX)
OFFSET = IntType("int64 offset >= 0", 0, INT64_MAX)
OFFSET_OR_NONE = IntType("int64 offset >= -1", -1, INT64_MAX)
# Kafka answers a wrong generation (any negative one is "no generation" for an offset commit) per request,
# with ILLEGAL_GENERATION: only its width is the wire's.
GENERATION = IntType("int32 generation id", INT32_MIN, INT32_MAX)
PORT = IntType("port -1..65535", -1, 65535)
INCARNATION = IntType("int64 incarnation >= 0", 0, INT64_MAX)
DURATION_MS = IntType("int32 milliseconds >= 0", 0, INT32_MAX)  # a wait or timeout carried by a request


def check_all_int64(value: Any, what: str, depth: int = 0) -> None:
    """Every integer anywhere in a decoded body fits Kafka's widest type (int64): msgpack also carries
    uint64. Fields with a narrower type are checked where they are read; this catches the rest.

    Plain ints are checked inline, one call per container rather than per number: a follower's fetch names
    thousands of partitions after a flood (issue 25), and a call per number cost its leader seconds."""
    if depth > 32:
        raise WireRangeError(f"{what} is nested too deeply")
    if isinstance(value, list):
        for v in value:
            if type(v) is int:
                if not INT64_MIN <= v <= INT64_MAX:
                    raise WireRangeError(f"{what}: {v} is out of range for int64")
            elif not isinstance(v, (bytes, str)):
                check_all_int64(v, what, depth + 1)
    elif isinstance(value, dict):
        for k, v in value.items():
            if isinstance(k, int):
                check_all_int64(k, what, depth + 1)
            if type(v) is int:
                if not INT64_MIN <= v <= INT64_MAX:
                    raise WireRangeError(f"{what}: {v} is out of range for int64")
            elif not isinstance(v, (bytes, str)):
                check_all_int64(v, what, depth + 1)
    elif isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
        raise WireRangeError(f"{what}: {value} is out of range for int64")
