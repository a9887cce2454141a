"""One declarative config schema per family (broker, topic, producer, consumer), as Kafka's ConfigDef.

A family is a pydantic model whose fields carry Kafka's name (the alias), type, default, bounds and
documentation string. Validation, `describe` output (`kl-configs`-style rows) and docs/CONFIGURATION.md
are all derived from it, so a key is declared once. Values arrive as Kafka users write them: strings
from `.properties` files, `--override k=v` and the wire, or Python values from code.

Kafka's parsing rules, stricter than pydantic's defaults: a boolean is `true`/`false` (any case) or a
Python bool, never 1/yes/on; an integer is an int or a decimal string, never a bool or a float.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Annotated, Any, ClassVar, Self

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, JsonValue, ValidationError
from pydantic.fields import FieldInfo

from net.errors import InvalidConfigError

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1


def _kafka_bool(v: Any) -> Any:
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("true", "false"):
        return s == "true"
    raise ValueError("expected true or false")


def _kafka_int(v: Any) -> Any:
    if isinstance(v, bool) or isinstance(v, float):
        raise ValueError("expected an integer")
    if isinstance(v, str):
        v = v.strip()
    return v


def _kafka_float(v: Any) -> Any:
    if isinstance(v, bool):
        raise ValueError("expected a number")
    return v.strip() if isinstance(v, str) else v


def _kafka_str(v: Any) -> Any:
    return v.strip() if isinstance(v, str) else v


Bool = Annotated[bool, BeforeValidator(_kafka_bool)]
Int = Annotated[int, BeforeValidator(_kafka_int)]
Float = Annotated[float, BeforeValidator(_kafka_float)]
Str = Annotated[str, BeforeValidator(_kafka_str)]


@dataclass(frozen=True)
class Choices:
    """The values a string key accepts (Kafka's ValidString), kept in the type for the docs."""

    options: tuple[str, ...]

    def __call__(self, v: str) -> str:
        if v not in self.options:
            raise ValueError(f"expected one of {list(self.options)}")
        return v


def choice(*options: str, normalize: Callable[[str], str] | None = None) -> Any:
    """A string type accepting only `options` (after `normalize`, e.g. sorting a list value)."""
    steps: list[Any] = [BeforeValidator(_kafka_str)]
    if normalize is not None:
        steps.append(AfterValidator(normalize))
    return Annotated[str, *steps, AfterValidator(Choices(options)), Choices(options)]


def key(
    name: str,
    default: Any,
    doc: str,
    *,
    ge: float | None = None,
    le: float | None = None,
    sensitive: bool = False,
    kafka_type: str | None = None,
    valid: str | None = None,
) -> Any:
    """A config key: Kafka's `name`, its default, bounds, and the line the docs show. A `sensitive` key
    (Kafka's PASSWORD type) is never shown: describe output gives no value and sensitive=true. `kafka_type`
    names Kafka's ConfigDef type where the Python type does not tell it (an int32 "int" next to the 64-bit
    "long" every Int is by default, a comma-separated "list" held as a string); `valid` is the valid-values
    text of a validator the bounds do not express."""
    extra: dict[str, JsonValue] = {"sensitive": True} if sensitive else {}
    if kafka_type is not None:
        extra["kafka_type"] = kafka_type
    if valid is not None:
        extra["valid"] = valid
    return Field(default, alias=name, ge=ge, le=le, description=doc, json_schema_extra=extra or None)


@dataclass(frozen=True)
class KeyDoc:
    """One row of `describe` output and of docs/CONFIGURATION.md."""

    name: str
    type: str
    default: str
    valid: str
    doc: str


class ConfigDef(BaseModel):
    """Base of every config family. Subclasses declare fields with `key(...)` and set FAMILY."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True, validate_default=False)
    FAMILY: ClassVar[str] = "config"

    @classmethod
    def from_props(cls, props: dict[str, Any]) -> Self:
        """Kafka names -> a validated config; raises InvalidConfigError naming the key (one line)."""
        return cls().merged(props)

    def merged(self, overrides: dict[str, Any]) -> Self:
        """A copy with `overrides` (Kafka names) applied and validated."""
        names = self.kafka_names()
        unknown = [k for k in overrides if k not in names]
        if unknown:
            raise InvalidConfigError(f"unknown {self.FAMILY} config {unknown[0]!r}")
        data = {name: getattr(self, attr) for name, attr in names.items()}
        data.update(overrides)
        try:
            return type(self).model_validate(data)
        except ValidationError as e:
            err = e.errors()[0]
            if not err["loc"]:  # a rule between keys (model_post_init): its own message names them
                raise InvalidConfigError(_reason(type(self), "", err)) from None
            bad = str(err["loc"][0])
            raise InvalidConfigError(
                f"invalid value {overrides.get(bad, data.get(bad))!r} for {self.FAMILY} config {bad!r}: "
                f"{_reason(type(self), bad, err)}"
            ) from None

    def to_props(self) -> dict[str, str]:
        """Every key with its value as Kafka writes it (booleans as true/false)."""
        return {name: format_value(getattr(self, attr)) for name, attr in self.kafka_names().items()}

    @classmethod
    def sensitive_keys(cls) -> frozenset[str]:
        """Kafka names of the keys whose values are secrets (passwords, JAAS logins)."""
        return frozenset(
            f.alias
            for f in cls.model_fields.values()
            if f.alias and isinstance(f.json_schema_extra, dict) and f.json_schema_extra.get("sensitive")
        )

    @classmethod
    def kafka_names(cls) -> dict[str, str]:
        """Kafka name -> attribute name, in declaration order."""
        return {f.alias: attr for attr, f in cls.model_fields.items() if f.alias}

    @classmethod
    def describe_keys(cls) -> list[KeyDoc]:
        """One row per key: name, type, default, valid values and documentation."""
        return [
            KeyDoc(f.alias, _type_name(f), format_value(f.default), _valid(f), f.description or "")
            for f in cls.model_fields.values()
            if f.alias
        ]


def format_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return ",".join(str(x) for x in v)
    return "" if v is None else str(v)


def _extra(f: FieldInfo, name: str) -> Any:
    return f.json_schema_extra.get(name) if isinstance(f.json_schema_extra, dict) else None


def _type_name(f: FieldInfo) -> str:
    """Kafka's ConfigDef type names: boolean, int, long, double, string, list, password."""
    if _extra(f, "sensitive"):
        return "password"
    declared = _extra(f, "kafka_type")
    if declared is not None:
        return str(declared)
    ann = f.annotation
    args = [a for a in getattr(ann, "__args__", ()) if a is not type(None)]
    if getattr(ann, "__origin__", None) is list:
        return "list"
    base = args[0] if len(args) == 1 and getattr(ann, "__origin__", None) is not list else ann
    names: dict[object, str] = {bool: "boolean", int: "long", float: "double", str: "string"}
    return names.get(base, "string")


def _bounds(f: FieldInfo) -> tuple[Any, Any]:
    lo = hi = None
    for m in f.metadata:
        lo = getattr(m, "ge", lo)
        hi = getattr(m, "le", hi)
    return lo, hi


def _valid(f: FieldInfo) -> str:
    declared = _extra(f, "valid")
    if declared is not None:
        return str(declared)
    choices = next((m for m in f.metadata if isinstance(m, Choices)), None)
    if choices is not None:
        return "[" + ", ".join(choices.options) + "]"
    lo, hi = _bounds(f)
    if lo is None and hi is None:
        return ""
    if hi is None:
        return f"[{lo},...]"  # Kafka's Range.atLeast
    return f"[{'...' if lo is None else lo},...,{hi}]"


def _reason(cls: type[ConfigDef], name: str, err: Any) -> str:
    f = cls.model_fields.get(cls.kafka_names().get(name, ""))
    kind = err.get("type", "")
    if f is not None and kind in ("greater_than_equal", "less_than_equal"):
        lo, hi = _bounds(f)
        if hi is None:
            return f"must be >= {lo}"
        if lo is None:
            return f"must be <= {hi}"
        return f"out of range [{lo}, {hi}]"
    if kind.startswith("int_"):
        return "expected an integer"
    if kind.startswith("float_"):
        return "expected a number"
    msg = str(err.get("msg", "invalid"))
    return msg.removeprefix("Value error, ")


def render_markdown(cls: type[ConfigDef], title: str, intro: str) -> str:
    """A docs/CONFIGURATION.md section for one family, derived from its schema."""
    lines = [f"## {title}", "", intro, "", "| Key | Type | Default | Valid values | Meaning |", "|---|---|---|---|---|"]
    for r in cls.describe_keys():
        default = r.default if r.default != "" else '""'
        lines.append(f"| `{r.name}` | {r.type} | `{default}` | {r.valid} | {r.doc} |")
    return "\n".join(lines) + "\n"


def read_properties(path: Path) -> dict[str, str]:
    """A Java `.properties` file (escapes, continuation lines, `=`/`:`/space separators), as Kafka reads it."""
    try:
        # UTF-8, not Java's ISO-8859-1: a Python user's file is UTF-8; \uXXXX escapes work either way.
        with open(path, encoding="utf-8") as f:
            import javaproperties  # here, not at the top: it pulls in xml, urllib and email, ~0.1 s of start

            return dict(javaproperties.load(f))
    except OSError as e:
        raise InvalidConfigError(f"cannot read config file {path}: {e.strerror}") from None
    except ValueError as e:  # a bad \u escape (javaproperties.InvalidUEscapeError) or undecodable bytes
        raise InvalidConfigError(f"cannot parse config file {path}: {e}") from None


class ConfigSource(IntEnum):
    """Kafka's DescribeConfigsResponse ConfigSource."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6  # a broker's log level (broker/server/broker_loggers.py)
    DYNAMIC_GROUP_CONFIG = 8  # KIP-848 / KIP-932: a group's own config


def is_default(source: ConfigSource, read_only: bool) -> bool:
    """is_default as Kafka Lite 0.1 meant it: not set on the resource itself (a topic without an override of the
    key, whatever the broker's default; a broker key its server.properties does not set, nor a dynamic config)."""
    return source in (ConfigSource.DEFAULT_CONFIG, ConfigSource.UNKNOWN) or (
        source == ConfigSource.STATIC_BROKER_CONFIG and not read_only
    )


def check_within_bounds(props: Mapping[str, Any], prefix: str, names: Iterable[str]) -> None:
    """Kafka's rule for a setting with a least and a most (group.share.record.lock.duration.ms between
    group.share.min.record.lock.duration.ms and group.share.max.record.lock.duration.ms): for each name,
    `prefix.min.name` <= `prefix.name` <= `prefix.max.name`, else InvalidConfigError in Kafka's words."""
    for what in names:
        name, lo, hi = f"{prefix}.{what}", f"{prefix}.min.{what}", f"{prefix}.max.{what}"
        if int(props[lo]) > int(props[name]):
            raise InvalidConfigError(f"{lo} must be less than or equal to {name}")
        if int(props[hi]) < int(props[name]):
            raise InvalidConfigError(f"{hi} must be greater than or equal to {name}")
