"""Constants the generated message classes use as zero values (Kafka's defaults for uuid and timestamp fields)."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

ZERO_UUID = uuid.UUID(int=0)  # Kafka's Uuid.ZERO_UUID: "no topic id"
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


class Struct:
    """What every generated class shares: a dataclass's `__repr__` and `__eq__`, written once here. The generated
    classes are `@dataclass(init=False, repr=False, eq=False)` with their `__init__` in their source: a dataclass
    otherwise compiles these three methods from text for each of its ~300 classes at import, and computes a
    signature for its doc string, about half of importing net/schema/ (a broker's start imports all of it)."""

    __slots__ = ()

    def __repr__(self) -> str:
        # The dataclass's repr: "Name(field=value, ...)" over the fields in order (the slots the dataclass made).
        names: tuple[str, ...] = self.__slots__
        return f"{self.__class__.__qualname__}({', '.join(f'{n}={getattr(self, n)!r}' for n in names)})"

    def __eq__(self, other: object) -> bool:
        # The dataclass's eq: same class, and the tuples of the fields compare equal.
        if other.__class__ is self.__class__:
            names: tuple[str, ...] = self.__slots__
            return tuple(getattr(self, n) for n in names) == tuple(getattr(other, n) for n in names)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # (as a dataclass with eq and not frozen: unhashable)


FACTORY: Any = object()  # an `__init__` default: the field's default_factory makes the value
