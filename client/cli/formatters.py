"""kl-consume's record formatters: Kafka's console-consumer formatters, their class names and properties.

`DefaultMessageFormatter` takes kafka-console-consumer.sh's `--property` keys: print.timestamp, print.key,
print.offset, print.partition, print.headers, print.value, key.separator, line.separator, headers.separator,
null.literal and key/value/headers.deserializer (Kafka's serialization class names), and writes the fields in
Kafka's order. `LoggingMessageFormatter` also logs each record; `NoOpMessageFormatter` prints nothing.
"""

from __future__ import annotations

import logging
import struct
import uuid
from typing import Any, Callable, TextIO

log = logging.getLogger("kafkalite.console")

Deserializer = Callable[[bytes], str]
SERDE = "org.apache.kafka.common.serialization."


def _fixed(fmt: str) -> Deserializer:
    s = struct.Struct(fmt)

    def decode(data: bytes) -> str:
        if len(data) != s.size:
            raise ValueError(f"{len(data)} bytes where {s.size} were expected")
        return str(s.unpack(data)[0])

    return decode


# Kafka's deserializers by class name; the console prints what each one returns as text.
DESERIALIZERS: dict[str, Deserializer] = {
    "StringDeserializer": lambda b: b.decode(errors="replace"),
    "ByteArrayDeserializer": lambda b: b.decode(errors="replace"),  # Kafka prints the bytes as UTF-8 too
    "ShortDeserializer": _fixed(">h"),
    "IntegerDeserializer": _fixed(">i"),
    "LongDeserializer": _fixed(">q"),
    "FloatDeserializer": _fixed(">f"),
    "DoubleDeserializer": _fixed(">d"),
    "UUIDDeserializer": lambda b: str(uuid.UUID(b.decode())),
    "BytesDeserializer": lambda b: b.hex(),
}


def deserializer(name: str) -> Deserializer:
    short = name.removeprefix(SERDE)
    if short not in DESERIALIZERS:
        known = ", ".join(sorted(DESERIALIZERS))
        raise ValueError(f"unknown deserializer {name!r} (known: {known}, with or without {SERDE})")
    return DESERIALIZERS[short]


def _flag(props: dict[str, str], key: str, default: bool) -> bool:
    raw = props.get(key)
    if raw is None:
        return default
    if raw.strip().lower() not in ("true", "false"):
        raise ValueError(f"--property {key}={raw}: expected true or false")
    return raw.strip().lower() == "true"


class DefaultMessageFormatter:
    """Kafka's kafka.tools.DefaultMessageFormatter: the chosen fields of a record on one line."""

    KEYS = frozenset(
        {
            "print.timestamp",
            "print.key",
            "print.offset",
            "print.partition",
            "print.headers",
            "print.value",
            "key.separator",
            "line.separator",
            "headers.separator",
            "null.literal",
            "key.deserializer",
            "value.deserializer",
            "headers.deserializer",
        }
    )

    def __init__(self, props: dict[str, str]) -> None:
        # Stricter than Kafka, which ignores keys it does not know: a typo is named instead of printing plain values.
        unknown = sorted(set(props) - self.KEYS)
        if unknown:
            known = ", ".join(sorted(self.KEYS))
            raise ValueError(f"unknown formatter property {unknown[0]!r} (DefaultMessageFormatter takes: {known})")
        self.print_timestamp = _flag(props, "print.timestamp", False)
        self.print_key = _flag(props, "print.key", False)
        self.print_offset = _flag(props, "print.offset", False)
        self.print_partition = _flag(props, "print.partition", False)
        self.print_headers = _flag(props, "print.headers", False)
        self.print_value = _flag(props, "print.value", True)
        self.key_separator = props.get("key.separator", "\t")
        self.line_separator = props.get("line.separator", "\n")
        self.headers_separator = props.get("headers.separator", ",")
        self.null_literal = props.get("null.literal", "null")
        self.key_deserializer = deserializer(props.get("key.deserializer", "ByteArrayDeserializer"))
        self.value_deserializer = deserializer(props.get("value.deserializer", "ByteArrayDeserializer"))
        self.headers_deserializer = deserializer(props.get("headers.deserializer", "StringDeserializer"))

    def _text(self, data: bytes | None, decode: Deserializer) -> str:
        return self.null_literal if data is None else decode(data)

    def format(self, r: Any) -> str:
        """One record as Kafka writes it: each chosen field followed by key.separator, the last by
        line.separator (so a record with nothing chosen is an empty string, as in Kafka)."""
        fields: list[str] = []
        if self.print_timestamp:
            stamped = r.timestamp is not None and r.timestamp >= 0
            fields.append(f"CreateTime:{r.timestamp}" if stamped else "NO_TIMESTAMP")
        if self.print_partition:
            fields.append(f"Partition:{r.partition}")
        if self.print_offset:
            fields.append(f"Offset:{r.offset}")
        if self.print_headers:
            headers = [f"{k}:{self._text(v, self.headers_deserializer)}" for k, v in r.headers]
            fields.append(self.headers_separator.join(headers) if headers else "NO_HEADERS")
        if self.print_key:
            fields.append(self._text(r.key, self.key_deserializer))
        if self.print_value:
            fields.append(self._text(r.value, self.value_deserializer))
        return self.key_separator.join(fields) + self.line_separator if fields else ""

    def write(self, records: list[Any], out: TextIO) -> None:
        out.write("".join(map(self.format, records)))


class LoggingMessageFormatter(DefaultMessageFormatter):
    """Kafka's LoggingMessageFormatter: the default output, and each record logged at INFO as well."""

    def __init__(self, props: dict[str, str]) -> None:
        super().__init__(props)
        log.setLevel(logging.INFO)  # the CLIs log errors only; this formatter's records are its point

    def write(self, records: list[Any], out: TextIO) -> None:
        super().write(records, out)
        for r in records:
            key, value = self._text(r.key, self.key_deserializer), self._text(r.value, self.value_deserializer)
            log.info("CreateTime:%s, key:%s, value:%s", r.timestamp, key, value)


class NoOpMessageFormatter:
    """Kafka's NoOpMessageFormatter: consumes and prints nothing (to measure or to advance a group)."""

    def __init__(self, props: dict[str, str]) -> None:
        pass

    def write(self, records: list[Any], out: TextIO) -> None:
        pass


FORMATTERS: dict[str, type] = {
    "DefaultMessageFormatter": DefaultMessageFormatter,
    "LoggingMessageFormatter": LoggingMessageFormatter,
    "NoOpMessageFormatter": NoOpMessageFormatter,
}
# The packages Kafka's versions put them in (kafka.tools up to 3.7, org.apache.kafka.tools.consumer since).
PACKAGES = ("kafka.tools.", "org.apache.kafka.tools.consumer.")


def formatter_for(name: str, props: dict[str, str]) -> Any:
    short = name
    for package in PACKAGES:
        short = short.removeprefix(package)
    if short not in FORMATTERS:
        raise ValueError(f"unknown formatter {name!r} (known: {', '.join(FORMATTERS)}, as kafka.tools.NAME too)")
    return FORMATTERS[short](props)
