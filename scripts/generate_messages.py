"""Generate net/schema/: one typed request and response class per Kafka API, over the versions Kafka Lite serves.

kio generates one class per API, kind and *version* from Kafka's JSON message schemas. A handler wants one class
per API, as Kafka's own generated `...RequestData` classes are: every field of every served version, each with
the versions that carry it and a default. This script merges kio's per-version classes into those, keeping
Kafka's field order, wire types (`kafka_type`), nullability and tags, and writes them as plain Python so that a
type checker and a reader see them. The Kafka listener converts a request of any version into the class and the
answer back (net/schema/convert.py); the native listener carries the same class as a msgpack array.

    python scripts/generate_messages.py          # write net/schema/
    python scripts/generate_messages.py --check  # exit 1 if net/schema/ is not what the installed kio gives
"""

from __future__ import annotations

import argparse
import dataclasses
import filecmp
import re
import subprocess
import sys
import tempfile
import textwrap
import typing
from dataclasses import dataclass, field
from pathlib import Path
from types import NoneType, UnionType

import kio
from kio.index import load_request_schema, load_response_schema
from kio.schema.index import api_key_map

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from broker.network.kafka.codec import ADAPTERS  # noqa: E402  (the versions the Kafka listener serves)

OUT = ROOT / "net" / "schema"
# The Kafka versions served of each api whose handler is typed (it has no adapter in broker/network/kafka/ any
# more, so this is where its versions are said); the other apis' come from their adapters.
TYPED_VERSIONS: dict[int, tuple[int, int]] = {
    0: (3, 12),  # Produce (v3: record batches, the only record format served)
    1: (4, 12),  # Fetch (v13+ name topics by id only)
    2: (1, 9),  # ListOffsets
    21: (0, 2),  # DeleteRecords
    23: (2, 4),  # OffsetForLeaderEpoch (v0-1 are gone from Kafka 4 and from kio)
    35: (1, 4),  # DescribeLogDirs
    55: (0, 2),  # DescribeQuorum
    61: (0, 0),  # DescribeProducers
    74: (1, 1),  # ListConfigResources (Kafka 4.1; v0 is the older ListClientMetricsResources)
    75: (0, 0),  # DescribeTopicPartitions (KIP-966, Kafka 3.8)
    43: (0, 2),  # ElectLeaders
    45: (0, 1),  # AlterPartitionReassignments (KIP-455; v1 adds allow_replication_factor_change)
    46: (0, 0),  # ListPartitionReassignments
    # Transactions (KIP-98, issue 28). InitProducerId v6 is KIP-939's two-phase commit, not served.
    22: (0, 5),  # InitProducerId
    24: (0, 5),  # AddPartitionsToTxn (v4+: KIP-890's batched, broker-to-coordinator form)
    25: (0, 4),  # AddOffsetsToTxn
    26: (0, 5),  # EndTxn
    27: (1, 2),  # WriteTxnMarkers (coordinator to leaders; v0 is gone from Kafka 4 and from kio)
    28: (0, 5),  # TxnOffsetCommit
    65: (0, 0),  # DescribeTransactions
    66: (0, 2),  # ListTransactions
    # The consumer group protocol (KIP-848, issue 29). v1: the member id is the client's (KIP-1082), regexes.
    68: (0, 1),  # ConsumerGroupHeartbeat
    69: (0, 1),  # ConsumerGroupDescribe (v1 adds the member type)
    # Share groups (KIP-932, Kafka 4.1: v0 was the early-access form, gone from kio)
    76: (1, 1),  # ShareGroupHeartbeat
    77: (1, 1),  # ShareGroupDescribe
    78: (1, 2),  # ShareFetch (v2: KIP-1222's acquire mode and RENEW)
    79: (1, 2),  # ShareAcknowledge
    # The share coordinator's state RPCs, leaders to the coordinator on the inter-broker listener
    83: (0, 0),  # InitializeShareGroupState (the group coordinator's start offsets: AlterShareGroupOffsets)
    84: (0, 0),  # ReadShareGroupState
    85: (0, 0),  # WriteShareGroupState
    86: (0, 0),  # DeleteShareGroupState (DeleteShareGroupOffsets, DeleteGroups of a share group)
    87: (0, 0),  # ReadShareGroupStateSummary
    90: (0, 1),  # DescribeShareGroupOffsets (v1: lag)
    91: (0, 0),  # AlterShareGroupOffsets
    92: (0, 0),  # DeleteShareGroupOffsets
    # The classic group apis
    10: (0, 4),  # FindCoordinator (v4: batched coordinator_keys, KIP-699)
    11: (0, 9),  # JoinGroup
    12: (0, 4),  # Heartbeat
    13: (0, 5),  # LeaveGroup
    14: (0, 5),  # SyncGroup
    8: (2, 9),  # OffsetCommit (v9: KIP-848 member epochs; v0-1 are gone from Kafka 4)
    9: (1, 9),  # OffsetFetch (v8: batched groups; v9: KIP-848 member epochs)
    15: (0, 5),  # DescribeGroups
    16: (0, 5),  # ListGroups (v5: types_filter, KIP-848)
    42: (0, 2),  # DeleteGroups
    47: (0, 0),  # OffsetDelete
    # ACLs, SCRAM credentials and client quotas
    29: (1, 3),  # DescribeAcls (v0 is gone from Kafka 4 and from kio)
    30: (1, 3),  # CreateAcls
    31: (1, 3),  # DeleteAcls
    50: (0, 0),  # DescribeUserScramCredentials
    51: (0, 0),  # AlterUserScramCredentials
    48: (0, 1),  # DescribeClientQuotas
    49: (0, 1),  # AlterClientQuotas
    60: (0, 1),  # DescribeCluster (v1: KIP-919's endpoint_type)
    # Topics and configs (the admin apis)
    19: (2, 7),  # CreateTopics (v0-1 are gone from Kafka 4 and from kio)
    20: (1, 6),  # DeleteTopics
    37: (0, 3),  # CreatePartitions
    32: (1, 4),  # DescribeConfigs
    33: (0, 2),  # AlterConfigs
    44: (0, 1),  # IncrementalAlterConfigs
    3: (0, 12),  # Metadata (v10+: topic ids; v12: topics named by id)
}

# kafka_type -> (the Python annotation, its zero value as source)
PRIMITIVES: dict[str, tuple[str, str]] = {
    "bool": ("bool", "False"),
    "int8": ("int", "0"),
    "int16": ("int", "0"),
    "int32": ("int", "0"),
    "int64": ("int", "0"),
    "uint16": ("int", "0"),
    "float64": ("float", "0.0"),
    "string": ("str", '""'),
    "bytes": ("bytes", 'b""'),
    "records": ("bytes", 'b""'),
    "uuid": ("uuid.UUID", "ZERO_UUID"),
    "timedelta_i32": ("datetime.timedelta", "datetime.timedelta(0)"),
    "timedelta_i64": ("datetime.timedelta", "datetime.timedelta(0)"),
    "datetime_i64": ("datetime.datetime", "EPOCH"),
    "error_code": ("int", "0"),  # an int16 Kafka error code: net.errors.ErrorCode values, or any other code
}


@dataclass
class FieldSpec:
    name: str
    kafka_type: str | None  # None: a nested struct
    struct: StructSpec | None
    array: bool
    nullable: bool
    item_nullable: bool
    versions: list[int]
    non_null_versions: list[int]  # versions that carry the field and may not send it null
    default: str | None  # source of kio's default in the newest version carrying the field, if kio has one
    tag: int | None
    doc: str


@dataclass
class StructSpec:
    name: str
    fields: dict[str, FieldSpec] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    answer: bool = False  # a response or a struct of one: the broker writes it (see _default)


def _optional(tp: typing.Any) -> tuple[typing.Any, bool]:
    if typing.get_origin(tp) in (typing.Union, UnionType):
        args = [a for a in typing.get_args(tp) if a is not NoneType]
        if len(args) == 1:
            return args[0], True
    return tp, False


def _source_default(f: dataclasses.Field[typing.Any], kafka_type: str | None) -> str | None:
    """kio's default as Python source (None: kio has none, so the generated class uses the type's zero)."""
    if f.default is dataclasses.MISSING:
        return None
    v = f.default
    if v is None:
        return "None"
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return f"datetime.timedelta(milliseconds={int(v.total_seconds() * 1000)})"
    if kafka_type == "error_code":
        return repr(int(v))
    if kafka_type == "uuid":
        return "ZERO_UUID" if v.int == 0 else f"uuid.UUID({str(v)!r})"
    if isinstance(v, bool):
        return repr(v)
    if isinstance(v, int):
        return repr(int(v))
    if isinstance(v, float):
        return repr(float(v))
    if isinstance(v, str):
        return repr(str(v))
    if isinstance(v, bytes):
        return repr(bytes(v))
    if isinstance(v, tuple) and not v:
        return "()"
    return None  # a nested default: the struct's own defaults make it


def _doc(cls: type, name: str) -> str:
    """kio keeps each field's doc string from Kafka's schema in the source after the field."""
    import inspect

    try:
        src = inspect.getsource(cls)
    except (OSError, TypeError):
        return ""
    m = re.search(rf"\n    {name}: [^\n]*(?:\n        [^\n]*)*\n    \"\"\"(.*?)\"\"\"", src, re.S)
    return " ".join(m.group(1).split()) if m else ""


def merge(spec: StructSpec, cls: type, version: int, structs: dict[str, StructSpec]) -> None:
    """Fold kio's class of one version into the spec: new fields go after the field before them in this version."""
    hints = typing.get_type_hints(cls)
    prev: str | None = None
    for f in dataclasses.fields(cls):
        tp, nullable = _optional(hints[f.name])
        array = typing.get_origin(tp) is tuple
        item_nullable = False
        if array:
            tp, item_nullable = _optional(typing.get_args(tp)[0])
        kafka_type = f.metadata.get("kafka_type")
        struct = None
        if dataclasses.is_dataclass(tp):
            kafka_type = None
            struct = structs.setdefault(tp.__name__, StructSpec(tp.__name__))
            merge(struct, tp, version, structs)  # type: ignore[arg-type]
        fs = spec.fields.get(f.name)
        if fs is None:
            fs = spec.fields[f.name] = FieldSpec(
                f.name, kafka_type, struct, array, nullable, item_nullable, [], [], None, None, ""
            )
            at = spec.order.index(prev) + 1 if prev is not None else 0
            spec.order.insert(at, f.name)
        elif fs.kafka_type != kafka_type or fs.array != array:
            raise SystemExit(f"{spec.name}.{f.name} changes type between versions: not generated")
        fs.nullable |= nullable
        fs.item_nullable |= item_nullable
        fs.versions.append(version)
        if not nullable:
            fs.non_null_versions.append(version)
        fs.default = _source_default(f, kafka_type) if f.default is not dataclasses.MISSING else fs.default
        fs.tag = f.metadata.get("tag", fs.tag)
        fs.doc = _doc(cls, f.name) or fs.doc
        prev = f.name


def _annotation(fs: FieldSpec) -> str:
    base = fs.struct.name if fs.struct is not None else PRIMITIVES[fs.kafka_type or ""][0]
    if fs.array:
        base = f"tuple[{base}{' | None' if fs.item_nullable else ''}, ...]"
    return f"{base} | None" if fs.nullable else base


def _default(fs: FieldSpec, answer: bool) -> str:
    """`default=...` or `default_factory=...` source: kio's default, else None for a nullable field, else zero.
    In an answer (`answer`), a scalar nullable only from some version on gets its zero instead, as Kafka's
    generator does ("null" may be the default only where all the field's versions are nullable): left at None,
    JoinGroupResponse's protocol_name (nullable from v7) could not be written at v0-6, and an error answer, built
    from defaults, failed to encode (aiokafka's suite found it: the connection was closed instead). Requests keep
    None, which their handlers read as "not given" (a Metadata topic named by id only)."""
    null_ok = fs.nullable and (not answer or fs.array or not fs.non_null_versions)
    if fs.default is not None and not (fs.default == "None" and not null_ok):
        return f"default={fs.default}"
    if null_ok:
        return "default=None"
    if fs.array:
        return "default=()"
    if fs.struct is not None:
        return f"default_factory=lambda: {fs.struct.name}()"
    return f"default={PRIMITIVES[fs.kafka_type or ''][1]}"


def _ranges(versions: list[int]) -> str:
    vs = sorted(set(versions))
    return f"({vs[0]}, {vs[-1]})" if vs == list(range(vs[0], vs[-1] + 1)) else repr(tuple(vs))


def _docstring(text: str) -> list[str]:
    """A field's doc string, wrapped to the line length."""
    text = text.replace(chr(92), chr(92) * 2).replace(chr(34) * 3, chr(39) * 3)
    q = chr(34) * 3
    if len(text) <= 110:
        return [f"    {q}{text}{q}"]
    wrapped = textwrap.wrap(text, 112)
    return [f"    {q}{wrapped[0]}", *(f"    {line}" for line in wrapped[1:]), f"    {q}"]


def _init(spec: StructSpec) -> list[str]:
    """The `__init__` a `@dataclass(slots=True, kw_only=True)` would compile at import, as source (see Struct in
    net/schema/base.py): keyword-only parameters with the fields' defaults, a default_factory's made per call."""
    params, body = [], []
    for name in spec.order:
        fs = spec.fields[name]
        default = _default(fs, spec.answer)
        if default.startswith("default_factory="):
            params.append(f"{name}: {_annotation(fs)} = FACTORY")
            factory = default.removeprefix("default_factory=lambda: ")
            body.append(f"        self.{name} = {factory} if {name} is FACTORY else {name}")
        else:
            params.append(f"{name}: {_annotation(fs)} = {default.removeprefix('default=')}")
            body.append(f"        self.{name} = {name}")
    args = ", ".join(["self", *(["*", *params] if params else [])])
    return [f"    def __init__({args}) -> None:", *(body or ["        pass"])]


def render_struct(spec: StructSpec, header: str = "", doc: str = "") -> str:
    lines = ["@dataclass(slots=True, kw_only=True, init=False, repr=False, eq=False)", f"class {spec.name}(Struct):"]
    # A doc string of its own: the dataclass would otherwise build one from the signature (inspect) at import.
    lines.append(f'    """{doc or spec.name}"""')
    if header:
        lines.append(header)
    for name in spec.order:
        fs = spec.fields[name]
        meta = [f'"versions": {_ranges(fs.versions)}']
        if fs.kafka_type is not None:
            meta.insert(0, f'"kafka_type": "{fs.kafka_type}"')
        if fs.tag is not None:
            meta.append(f'"tag": {fs.tag}')
        lines.append(
            f"    {name}: {_annotation(fs)} = field({_default(fs, spec.answer)}, metadata={{{', '.join(meta)}}})"
        )
        if fs.doc:
            lines.extend(_docstring(fs.doc))
    lines.append("")
    lines.extend(_init(spec))
    return "\n".join(lines)


def _topo(structs: dict[str, StructSpec], roots: list[StructSpec]) -> list[StructSpec]:
    """Nested structs before the structs that use them."""
    out: list[StructSpec] = []
    seen: set[str] = set()

    def visit(s: StructSpec) -> None:
        if s.name in seen:
            return
        seen.add(s.name)
        for name in s.order:
            nested = s.fields[name].struct
            if nested is not None:
                visit(nested)
        out.append(s)

    for r in roots:
        visit(r)
    return out


def module_name(api_key: int) -> str:
    return api_key_map[api_key]


def render_api(api_key: int, lo: int, hi: int) -> str:
    parts = []
    for kind, load in (("request", load_request_schema), ("response", load_response_schema)):
        structs: dict[str, StructSpec] = {}
        root: StructSpec | None = None
        for v in range(lo, hi + 1):
            cls = load(api_key, v)
            root = root or StructSpec(cls.__name__)
            merge(root, cls, v, structs)
        assert root is not None
        parts.append((kind, root, structs))
    (_, req, req_structs), (_, resp, resp_structs) = parts
    for s in (resp, *resp_structs.values()):
        s.answer = True
    for name in set(req_structs) & set(resp_structs):  # one module holds both kinds: keep struct names apart
        resp_structs[name].name = f"{resp.name.removesuffix('Response')}Response{name}"
    header = f"    API_KEY: ClassVar[int] = {api_key}\n    VERSIONS: ClassVar[tuple[int, int]] = ({lo}, {hi})"
    body = []
    for root, structs in ((req, req_structs), (resp, resp_structs)):
        for s in _topo(structs, [root]):
            doc = f"{root.name}, versions {lo}-{hi}." if s is root else f"A struct of {root.name}."
            body.append(render_struct(s, header if s is root else "", doc))
    return (
        f'"""Kafka\'s {req.name.removesuffix("Request")} API (key {api_key}), versions {lo}-{hi}: generated by '
        f"scripts/generate_messages.py\nfrom kio {kio.__version__}'s classes (Kafka's JSON message schemas). "
        'Do not edit."""\n\n'
        "from __future__ import annotations\n\n"
        "import datetime  # noqa: F401\nimport uuid  # noqa: F401\n"
        "from dataclasses import dataclass, field\nfrom typing import ClassVar\n\n"
        "from net.schema.base import EPOCH, FACTORY, ZERO_UUID, Struct  # noqa: F401\n\n\n" + "\n\n\n".join(body) + "\n"
    )


def render_index(apis: list[tuple[int, str, str, str]]) -> str:
    imports = "\n".join(f"from net.schema.{mod} import {req}, {resp}" for _, mod, req, resp in apis)
    rows = "\n".join(f"    {key}: ({req}, {resp})," for key, _, req, resp in apis)
    return (
        '"""Every API the Kafka listener serves: its request and response classes (generated by '
        'scripts/generate_messages.py)."""\n\n'
        "from __future__ import annotations\n\n"
        f"{imports}\n\n"
        "# api key -> (request class, response class)\n"
        f"MESSAGES: dict[int, tuple[type, type]] = {{\n{rows}\n}}\n"
    )


def generate(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    apis = []
    served = {**{k: a.versions for k, a in ADAPTERS.items()}, **TYPED_VERSIONS}
    for key, (lo, hi) in sorted(served.items()):
        mod = module_name(key)
        (out / f"{mod}.py").write_text(render_api(key, lo, hi))
        apis.append((key, mod, load_request_schema(key, hi).__name__, load_response_schema(key, hi).__name__))
    (out / "messages.py").write_text(render_index(apis))
    # Formatted as the rest of the tree, so that --check compares like with like.
    subprocess.run(["ruff", "format", "--quiet", str(out)], check=True)
    subprocess.run(["ruff", "check", "--quiet", "--fix", "--select", "I,F401", str(out)], check=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail if net/schema/ differs from what would be generated")
    args = ap.parse_args()
    if not args.check:
        generate(OUT)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        names = sorted(p.name for p in Path(tmp).glob("*.py"))
        _, mismatch, errors = filecmp.cmpfiles(tmp, OUT, names, shallow=False)
        if mismatch or errors:
            print(f"net/schema/ is stale ({', '.join(mismatch + errors)}): run scripts/generate_messages.py")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
