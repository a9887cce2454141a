"""confluent-kafka-python's own integration suite against a Kafka Lite broker, in its "bring your own cluster" mode.

    python -m bench.conformance.confluent_kafka --ckp-dir DIR                  # both runs, then docs/COMPATIBILITY.md
    python -m bench.conformance.confluent_kafka --ckp-dir DIR --protocol consumer -- tests/integration/admin
    python -m bench.conformance.confluent_kafka --ckp-dir DIR --from-junit --work-dir W   # the table again

Where the tests come from: DIR must hold confluent-kafka-python at PINNED_COMMIT (v2.15.0, the newest snapshot). If
DIR does not exist it is exported from a git directory (`--mirror`, default the snapshot our `fetch` tool makes,
/work/.mirror/confluentinc+confluent-kafka-python/repo); elsewhere, make it with
    git clone https://github.com/confluentinc/confluent-kafka-python DIR && git -C DIR checkout PINNED_COMMIT
Its test dependencies go into DIR/.venv from PyPI: requirements/requirements-tests-install.txt (pytest, the Schema
Registry client's extras, the trivup the repository vendors) and the newest confluent-kafka (CLIENT_VERSION), the
client its users install, not one built from DIR.

The suite's README runs `pytest tests/integration` against an existing cluster with `BROKERS` set: here one Kafka
Lite broker's Kafka listener, started with the settings its trivup fixture gives Kafka 4.2 (tests/common/
__init__.py `broker_conf`, translated key by key in BROKER_CONF), twice: with the classic group protocol and with
`TEST_CONSUMER_GROUP_PROTOCOL=consumer` (every consumer on KIP-848's protocol), each on a fresh broker. Left out,
as the README's bring-your-own mode cannot run them: `integration_test.py` (the old runner, a script), and what
needs parts that are not a Kafka broker: the Schema Registry (`schema_registry/`, and the share consumer's Schema
Registry round trips, which need `SR_URL`), and the directories and the one test that start trivup clusters of
Apache Kafka itself (`share_consumer_oauth/`, `share_consumer_sasl/`, `test_describe_operations[sasl_cluster0]`).
Each run's pytest gets `--junitxml`; bench/conformance/pytest_report.py turns the reports into totals per file and
each failure's cause, written between markers in docs/COMPATIBILITY.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from bench.conformance.checkout import PinnedSource, SuiteVenv
from bench.conformance.jest_report import classifier, rules_of
from bench.conformance.pytest_report import PytestReport, cause_lines, parse_file, report, skip_reasons
from bench.conformance.runner import cli_shim, run_suite
from bench.peers._common import free_port, stop
from bench.sections import md_table, replace_section
from client.cli.cluster import start_command, wait_registered

ROOT = Path(__file__).resolve().parents[2]
PINNED_COMMIT = "8b1c7a613434eee3d0e1287d624d7af04932f410"  # v2.15.0
VERSION = "2.15.0"
CLIENT_VERSION = "2.16.1"  # confluent-kafka on PyPI, the newest
DEFAULT_MIRROR = Path("/work/.mirror/confluentinc+confluent-kafka-python/repo")
PINNED = PinnedSource(
    "confluent-kafka-python", "confluentinc/confluent-kafka-python", PINNED_COMMIT, ".confluent-kafka-python-commit"
)
START_MARK = "<!-- confluent-kafka-python-suite:start -->"
END_MARK = "<!-- confluent-kafka-python-suite:end -->"
HOST = "127.0.0.1"
PROTOCOLS = {"classic": {}, "consumer": {"TEST_CONSUMER_GROUP_PROTOCOL": "consumer"}}

# tests/common/__init__.py broker_conf (the trivup fixture's Kafka 4.2), as Kafka Lite keys; then what the tests
# ask of the cluster beyond it (the comment says which).
BROKER_CONF = (
    "transaction.state.log.replication.factor=1",
    "transaction.state.log.min.isr=1",
    "offsets.topic.replication.factor=1",
    # offsets.topic.min.isr=1: Kafka Lite has no such key; __consumer_offsets takes min.insync.replicas from its
    # replication factor (1 here)
    "share.coordinator.state.topic.replication.factor=1",
    "share.coordinator.state.topic.min.isr=1",
    "group.share.record.lock.duration.ms=1000",
    "group.share.min.record.lock.duration.ms=1000",
    # trivup's Kafka: one partition per new topic (Kafka's num.partitions default; Kafka Lite's is 3) and no wait
    # before a new group's first rebalance (trivup's server.properties sets it to 0)
    "num.partitions=1",
    "group.initial.rebalance.delay.ms=0",
    # admin/test_basic_operations creates and deletes ACLs: an authorizer that lets everyone in while no ACL
    # names the resource (trivup's KRaft brokers run StandardAuthorizer so)
    "authorizer=acl",
    "allow.everyone.if.no.acl.found=true",
)
# Not broker tests (see the module's doc): paths left out and tests deselected.
IGNORED = (
    "tests/integration/integration_test.py",
    "tests/integration/schema_registry",
    "tests/integration/share_consumer_oauth",
    "tests/integration/share_consumer_sasl",
)
DESELECTED = (
    "tests/integration/share_consumer/test_share_consumer_deserialization.py::test_schema_registry_roundtrip",
    "tests/integration/share_consumer/test_share_consumer_deserialization.py::test_schema_registry_poison_marked",
    "tests/integration/admin/test_describe_operations.py::test_describe_operations[sasl_cluster0]",
)

# The causes: (cause, what the pattern looks at: the error "message", the test's "name" or its file's "path", the
# pattern, and what Kafka Lite does differently). The first match wins; anything else is grouped by its first line.
CAUSES: tuple[tuple[str, str, str, str], ...] = (
    (
        "Kafka 4.1's cluster-level min.insync.replicas record (KIP-966) is not written",
        "name",
        r"(^|::)test_incremental_alter_configs$",
        "Kafka 4.1+ writes a cluster-level `min.insync.replicas` ConfigRecord when its controller activates, for "
        "Eligible Leader Replicas (KIP-966), so DescribeConfigs lists it on every topic as a non-default "
        "DYNAMIC_DEFAULT_BROKER_CONFIG, and the test's expected lists assume it. Kafka Lite has no ELR and writes "
        "no such record: its `min.insync.replicas` is a default (STATIC_BROKER_CONFIG when server.properties sets "
        "it). Every other assertion of the test holds.",
    ),
)
RULES, NOTES = rules_of(CAUSES)


def venv_python(dest: Path) -> Path:
    return SuiteVenv(dest, "").python


def install(dest: Path) -> None:
    """The suite's test requirements and confluent-kafka CLIENT_VERSION in DIR/.venv, once per requirements set."""
    reqs = dest / "requirements" / "requirements-tests-install.txt"
    venv, wanted = SuiteVenv(dest, "confluent-kafka-python's test dependencies"), reqs.read_text() + CLIENT_VERSION
    if not venv.stale(wanted):
        return
    env = _suite_env()
    pip = venv.create(env)
    # the requirement files name the vendored trivup by a path from the repository's root
    subprocess.run([*pip, "-r", str(reqs), f"confluent-kafka=={CLIENT_VERSION}"], check=True, cwd=dest, env=env)
    venv.done(wanted)


@contextlib.contextmanager
def broker(work: Path, name: str) -> Iterator[tuple[str, str]]:
    """A fresh Kafka Lite broker with BROKER_CONF; yields its Kafka listener's bootstrap and its native one,
    stopped after the block."""
    native, kafka = free_port(), free_port()
    while kafka == native:
        kafka = free_port()
    overrides = [*BROKER_CONF, f"kafka.port={kafka}", f"kafka.advertised.host={HOST}"]
    cmd = start_command(1, native, work / f"broker-{name}", extra=[a for o in overrides for a in ("--override", o)])
    log = work / f"broker-{name}.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=ROOT)
    try:
        if not wait_registered(f"{HOST}:{native}", 1, 60):
            raise SystemExit(f"error: the broker did not start within 60 s; see {log}")
        print(f"Kafka Lite broker for the {name} run: Kafka listener {HOST}:{kafka}; log {log}", file=sys.stderr)
        yield f"{HOST}:{kafka}", f"{HOST}:{native}"
    finally:
        stop(proc, timeout=30)


def _suite_env() -> dict[str, str]:
    """Our environment without our PYTHONPATH: the suite's `tests` package is its own, not Kafka Lite's."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def kafka_home(work: Path, native: str) -> Path:
    """KAFKA_HOME with bin/kafka-configs.sh for the share consumer's throttle test (it sets a client quota with
    kafka-configs.sh, "librdkafka has no admin op for client quotas"): kl-configs with the same flags, on the
    broker's native listener instead of the Kafka one the test names."""
    home = work / "kafka-home"
    why = "confluent-kafka-python's tests call Kafka's kafka-configs.sh; Kafka Lite's is kl-configs (bench/conformance)"
    cli_shim(
        home / "bin" / "kafka-configs.sh", "client.cli.configs", native, ("--bootstrap-server", "--command-config"), why
    )
    return home


def run_pytest(
    dest: Path, work: Path, name: str, bootstrap: tuple[str, str], args: Sequence[str], timeout_s: float
) -> int | None:
    env = _suite_env()
    path = f"{dest / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env.update(PROTOCOLS[name], BROKERS=bootstrap[0], KAFKA_HOME=str(kafka_home(work, bootstrap[1])), PATH=path)
    selection = list(args) or [
        "tests/integration",
        *(f"--ignore={p}" for p in IGNORED),
        *(f"--deselect={t}" for t in DESELECTED),
    ]
    cmd = [
        str(venv_python(dest)), "-m", "pytest", "-v", "-p", "no:cacheprovider", "--timeout=300",
        f"--junitxml={work / f'junit-{name}.xml'}", *selection,
    ]  # fmt: skip
    log = work / f"pytest-{name}.log"
    shown = " ".join(f"{k}={env[k]}" for k in ("BROKERS", *PROTOCOLS[name]))
    print(f"$ {shown} {' '.join(cmd)}  > {log}", file=sys.stderr)
    return run_suite(cmd, dest, env, timeout_s, "pytest", log)


def _totals_line(t: dict[str, int]) -> str:
    ran = t["passed"] + t["failed"] + t["errors"]
    pct = f"; {100 * t['passed'] / ran:.1f}% of those run pass" if ran else ""
    return f"{t['passed']} passed, {t['failed']} failed, {t['errors']} errors, {t['skipped']} skipped{pct}"


def load(work: Path, dest: Path) -> dict[str, PytestReport]:
    return {
        name: report(parse_file(j, dest), classifier(RULES))
        for name in PROTOCOLS
        if (j := work / f"junit-{name}.xml").exists()
    }


def render(reps: dict[str, PytestReport], when: str, command: str, minutes: float) -> str:
    lines = [
        "## confluent-kafka-python's own suite",
        "",
        f"confluent-kafka-python v{VERSION} ([{PINNED_COMMIT[:12]}]({PINNED.url}/commit/{PINNED_COMMIT}), the newest "
        f"release's tests) with confluent-kafka {CLIENT_VERSION} from PyPI (librdkafka inside), `pytest "
        "tests/integration` in the README's bring-your-own-cluster mode (`BROKERS` set) against one Kafka Lite "
        "broker with the settings its trivup fixture gives Kafka 4.2 (bench/conformance/confluent_kafka.py maps "
        "each), once with the classic group protocol and once with `TEST_CONSUMER_GROUP_PROTOCOL=consumer`, each on "
        "a fresh broker. Not run, as that mode cannot run them: the old runner script, the Schema Registry tests "
        "(no registry here), and the tests that start trivup clusters of Apache Kafka (OAuth and SASL share "
        "consumers, `test_describe_operations[sasl_cluster0]`).",
        "",
        f"Run {when}, {minutes:.0f} min: `{command}`",
        "",
    ]
    for name, rep in reps.items():
        lines += [f"**{name} group protocol: {_totals_line(rep.totals())}.**", ""]
    files: dict[str, dict[str, tuple[int, int, int, int]]] = {}
    for name, rep in reps.items():
        for f in rep.files():
            files.setdefault(f.path, {})[name] = (f.passed, f.failed, f.errors, f.skipped)
    names = list(reps)
    lines += [
        md_table(
            ["File", *(f"{n}: passed / failed / errors / skipped" for n in names)],
            [
                (f"`{path}`", *(" / ".join(map(str, by.get(n, (0, 0, 0, 0)))) for n in names))
                for path, by in sorted(files.items())
            ],
        ),
        "",
    ]
    for name, rep in reps.items():
        skipped = [c for c in rep.cases if c.outcome == "skipped"]
        if skipped:
            reasons = [(r.replace("|", "\\|"), n) for r, n in skip_reasons(skipped)]
            lines += [
                f"Skipped in the {name} run, by the reason pytest gives:",
                "",
                md_table(["Reason", "Tests"], reasons),
                "",
            ]
    lines += ["### Failures by cause", ""]
    if not any(rep.failures for rep in reps.values()):
        lines += ["None.", ""]
    for name, rep in reps.items():
        lines += cause_lines(rep, NOTES, lambda cause, name=name: f"{name} run: {cause}")
    return "\n".join(lines)


HEADER = re.compile(r"^Run (.+?), (\d+) min: `(.*)`$", re.MULTILINE)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--ckp-dir", type=Path, default=Path(tempfile.gettempdir()) / f"confluent-kafka-python-{PINNED_COMMIT[:12]}"
    )
    ap.add_argument("--mirror", type=Path, default=DEFAULT_MIRROR, help="git directory to export the suite from")
    ap.add_argument("--protocol", choices=[*PROTOCOLS, "both"], default="both")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds for each pytest run")
    ap.add_argument("--out", type=Path, default=Path("docs/COMPATIBILITY.md"))
    ap.add_argument("--work-dir", type=Path, default=None, help="broker data and logs, pytest logs, junit XML")
    ap.add_argument("--from-junit", action="store_true", help="re-render the table of the run in --work-dir, no run")
    ap.add_argument("pytest_args", nargs="*", help="pytest paths and options (default: the suite as above)")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds like ^C: pytest and the broker stopped
    dest = args.ckp_dir.resolve()
    command = "python -m bench.conformance.confluent_kafka " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.from_junit:
        if args.work_dir is None:
            raise SystemExit("error: --from-junit needs the run's --work-dir")
        md = args.work_dir / "confluent-kafka-python.md"
        run = HEADER.search(md.read_text()) if md.exists() else None
        if run is None:
            raise SystemExit(f"error: {md} does not say when and how the run was made")
        body = render(load(args.work_dir.resolve(), dest), run[1], run[3], float(run[2]))
        replace_section(args.out, START_MARK, END_MARK, body)
        print(f"wrote the table of {args.work_dir} into {args.out}")
        return 0
    PINNED.checkout(dest, args.mirror)
    install(dest)
    work = (args.work_dir or Path(tempfile.mkdtemp(prefix="confluent-kafka-conformance-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    missing = []
    for name in PROTOCOLS if args.protocol == "both" else [args.protocol]:
        with broker(work, name) as bootstrap:
            if run_pytest(dest, work, name, bootstrap, args.pytest_args, args.timeout) is None:
                missing.append(name)
    reps = load(work, dest)
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    body = render(reps, when, command.strip(), (time.monotonic() - started) / 60)
    if missing:
        body += f"\nNot finished (stopped at --timeout): the {', '.join(missing)} run(s).\n"
    (work / "confluent-kafka-python.md").write_text(body + "\n")
    for name, rep in reps.items():
        print(f"confluent-kafka-python, {name}: {_totals_line(rep.totals())}")
    print(f"report {work / 'confluent-kafka-python.md'}, junit XML in {work}")
    if args.protocol == "both" and not args.pytest_args and not missing:
        replace_section(args.out, START_MARK, END_MARK, body)
        print(f"wrote the table into {args.out}")
    bad = any(rep.totals()["failed"] or rep.totals()["errors"] for rep in reps.values())
    return 1 if bad or missing else 0


if __name__ == "__main__":
    sys.exit(main())
