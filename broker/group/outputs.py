"""What the sans-IO group logics (classic, broker/group/logic.py; consumer, broker/group/consumer_logic.py) ask
their driver (broker/group/coordinator.py) to do: answer a parked request, or append records."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from broker.group.records import Key


@dataclass(frozen=True, slots=True)
class Reply:
    """Answer the request that carried `token` with `body` (a dict, or a typed result of the consumer protocol)."""

    token: Any
    body: Any


@dataclass(frozen=True, slots=True)
class Append:
    """Write `records` to __consumer_offsets partition `partition` (acks=all) and report the outcome with
    on_append_done(append_id, error_code)."""

    append_id: int
    partition: int
    records: list[tuple[Key, dict[str, Any] | None]]


Output = Reply | Append
