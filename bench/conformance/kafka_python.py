"""kafka-python's own pytest suite against a Kafka Lite broker laid out as kafka-python's KafkaFixture lays out Kafka.

    python -m bench.conformance.kafka_python --kafka-python-dir DIR          # the whole suite, then the doc
    python -m bench.conformance.kafka_python --kafka-python-dir DIR --smoke  # one file (the producer's), no doc change
    python -m bench.conformance.kafka_python --kafka-python-dir DIR -- test/integration/test_admin_integration.py
    python -m bench.conformance.kafka_python --kafka-python-dir DIR --work-dir W --merge -- FILE  # rerun FILE into
                                                                   # the full run in W and write the doc again
    python -m bench.conformance.kafka_python --kafka-python-dir DIR --work-dir W --from-junit  # the doc again

Where kafka-python comes from: DIR must hold kafka-python at PINNED_COMMIT. If DIR does not exist it is exported
from a git directory (`--mirror`, default the snapshot our `fetch` tool makes, /work/.mirror/dpkp+kafka-python/repo)
with `git archive`; elsewhere, make it with
    git clone https://github.com/dpkp/kafka-python DIR && git -C DIR checkout PINNED_COMMIT
Its own venv, DIR/.venv, gets `pip install -e DIR[testing]` (pyproject's pytest, pytest-mock, pytest-timeout) and
the libraries of requirements-dev.txt the tests use (compression codecs, crc32c, py), from PyPI, once.

The broker is kafka-python's test/integration/fixtures.py KafkaFixture with servers/resources/default/
kafka.properties (Kafka >= 4.0, KRaft), translated key by key (FIXTURE_SETTINGS): one broker, node id 0, 4
partitions and replication factor 1 per topic (kafka_broker_factory's defaults), the StandardAuthorizer with
allow.everyone.if.no.acl.found, the offsets topic's test settings, group.min.session.timeout.ms=1000. Its Kafka
listeners (all advertised as localhost, the fixture's host):
- PLAINTEXT (kafka.port): what the suite's external-broker mode is given, KAFKA_URI=kafka://localhost:PORT with
  KAFKA_VERSION=4.3.0, the newest Kafka of its CI matrix (.github/workflows/python-package.yml);
- SSL, and SASL_PLAINTEXT once per mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), each with only its own
  mechanism enabled: the fixture starts a broker of its own per transport and mechanism
  (test_ssl_integration.py, test_sasl_integration.py), which the pytest plugin kafka_python_fixtures.py turns
  into these listeners; the SASL user is the fixture's alice/alice-secret (kafka-storage.sh format --add-scram,
  here kl-broker's --add-scram; PLAIN logins are checked against the same credentials).
test_sasl_integration.py skips itself whenever KAFKA_URI is set ("Testing on external Kafka Broker"), so it runs
in a second pytest session without KAFKA_URI, where kafka_broker_factory asks KafkaFixture.instance for its
brokers and the plugin answers. The fixtures' one broker tool, kafka-topics.sh --list (SASL's test_admin), is a
shim over kl-topics (KAFKA_ROOT, kafka_topics_shim()).

Pytest runs as kafka-python's CI runs it (`make test`: `pytest -v test`, with pyproject's addopts --durations=10
--timeout=300; KAFKA_PYTHON_NET=random resolved as CI resolves it for this commit, this Python and Kafka 4.3.0),
with --junitxml and one change: --timeout-method=signal instead of pyproject's thread, which ends the whole run
at the first test that times out; bench/conformance/pytest_report.py reads it: totals of the unit tests
(mock brokers, no Kafka Lite involved) apart from the integration tests, per file, and each failure's cause
(CAUSES), written between markers in docs/COMPATIBILITY.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.conformance.checkout import PinnedSource, SuiteVenv
from bench.conformance.jest_report import classifier, rules_of
from bench.conformance.kafka_python_fixtures import LISTENERS_ENV, SSL_DIR_ENV, listener_key
from bench.conformance.pytest_report import (
    Case,
    FileCounts,
    PytestReport,
    cause_lines,
    failure_logs,
    parse_file,
    report,
    skip_reasons,
    with_logs,
)
from bench.conformance.runner import cli_shim, run_suite
from bench.peers._common import free_port, stop
from bench.sections import md_table, replace_section
from client.cli.cluster import _wait_kafka_listeners, start_command, wait_registered, write_cluster_secret

ROOT = Path(__file__).resolve().parents[2]
REPO_URL = "https://github.com/dpkp/kafka-python"
PINNED_COMMIT = "a3b3836ff3a4b34ebaa42fd93500bfcb16c1e9b7"  # master of 2026-08-17 (3.1.0.dev, after 3.0.7)
DEFAULT_MIRROR = Path("/work/.mirror/dpkp+kafka-python/repo")
COMMIT_MARK = ".kafka-python-commit"  # written into a checkout made with git archive (which has no .git)
PINNED = PinnedSource("kafka-python", "dpkp/kafka-python", PINNED_COMMIT, COMMIT_MARK)
KAFKA_VERSION = "4.3.0"  # the newest Kafka of the CI matrix (and the Makefile's default)
NET = "random"  # the CI matrix's `net` for all but two jobs: one backend per run, chosen from the commit
SMOKE = ("test/integration/test_producer_integration.py",)
SASL_FILE = "test/integration/test_sasl_integration.py"
INTEGRATION_DIR = "test/integration/"
PLUGIN = "kafka_lite_fixtures"  # kafka_python_fixtures.py, copied under this name next to the run's files
START_MARK = "<!-- kafka-python-suite:start -->"
END_MARK = "<!-- kafka-python-suite:end -->"

# requirements-dev.txt is CI's `pip install -r`; these of its lines serve `make lint`, `make doc`, coverage and
# the benchmarks, not `pytest test` (no test imports them), and are left out: docker-py (unused), flake8, pylint,
# coveralls, pytest-cov, pyperf, Sphinx and its themes.
NOT_FOR_TESTS = {
    "coveralls",
    "docker-py",
    "flake8",
    "pylint",
    "pyperf",
    "pytest-cov",
    "sphinx",
    "sphinx-argparse",
    "sphinx-rtd-theme",
}

BROKER_ID = 0  # kafka_broker fixture: KafkaFixture.instance(0), node.id={broker_id}
HOST = "localhost"  # KafkaFixture's host: listeners and advertised.listeners {transport}://localhost:{port}
BROKER_USER, BROKER_PASSWORD = "alice", "alice-secret"  # KafkaFixture.broker_user / broker_password
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")  # test_sasl_integration.py's sasl_kafka params

# servers/resources/default/kafka.properties as rendered by KafkaFixture (Kafka >= 4.0), as Kafka Lite keys (the
# Kafka setting in the comment). Listeners, SASL and SSL are per listener: cluster() below.
FIXTURE_SETTINGS = (
    # process.roles=broker,controller, controller.quorum.bootstrap.servers, CONTROLLER listener: every Kafka Lite
    # broker is a voter of the controller quorum on its own inter-broker listener; alone, a quorum of one.
    "num.partitions=4",  # num.partitions={partitions}: kafka_broker_factory's partitions=4
    "default.replication.factor=1",  # default.replication.factor={replicas}: replicas=1
    "replica.lag.time.max.ms=1000",  # replica.lag.time.max.ms=1000
    "replica.socket.timeout.ms=1000",  # replica.socket.timeout.ms=1000
    "socket.request.max.bytes=104857600",  # socket.request.max.bytes=104857600
    "offsets.topic.replication.factor=1",  # offsets.topic.replication.factor=1
    "offsets.topic.num.partitions=2",  # offsets.topic.num.partitions=2
    "offsets.commit.timeout.ms=500",  # offsets.commit.timeout.ms=500
    "share.coordinator.state.topic.replication.factor=1",  # share.coordinator.state.topic.replication.factor=1
    "share.coordinator.state.topic.min.isr=1",  # share.coordinator.state.topic.min.isr=1
    "transaction.state.log.replication.factor=1",  # transaction.state.log.replication.factor=1
    "transaction.state.log.min.isr=1",  # transaction.state.log.min.isr=1
    "log.retention.ms=604800000",  # log.retention.hours=168
    "log.segment.bytes=1073741824",  # log.segment.bytes=1073741824
    "log.retention.check.interval.ms=300000",  # log.retention.check.interval.ms=300000
    # log.cleaner.enable=false: no such key; the cleaner only cleans cleanup.policy=compact topics (none here).
    "group.min.session.timeout.ms=1000",  # group.min.session.timeout.ms=1000
    "group.initial.rebalance.delay.ms=0",  # group.initial.rebalance.delay.ms=0
    # auto.create.topics.enable: the template leaves Kafka's default, true (the fixture's auto_create_topic
    # parameter is never rendered).
    "auto.create.topics.enable=true",
    # _acl_config(), Kafka >= 4.0: authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
    "authorizer=acl",
    "allow.everyone.if.no.acl.found=true",  # allow.everyone.if.no.acl.found=true
    # num.network.threads, num.io.threads, socket.send/receive.buffer.bytes, num.recovery.threads.per.data.dir: no
    # equivalent (one event loop; the kernel's socket buffers).
)
# The SASL_PLAINTEXT listeners, one per mechanism as the fixture starts one broker per mechanism with
# sasl.enabled.mechanisms={mechanism} (_sasl_config; sasl.mechanism.inter.broker.protocol has no counterpart:
# brokers talk on their own listener).
SASL_LISTENERS = {"PLAIN": "SASL_PLAIN", "SCRAM-SHA-256": "SASL_SCRAM256", "SCRAM-SHA-512": "SASL_SCRAM512"}

# The causes: (cause, what the pattern looks at: the error "message" (pytest's message and E lines), the test's
# "name" or its file's "path", the pattern, and what Kafka Lite does differently as read off the test and the
# broker's log). The first match wins; anything else is grouped by its first line (jest_report.classifier).
CAUSES: tuple[tuple[str, str, str, str], ...] = (
    # Fixed since the first run (2026-11-28, 27 failures): ListOffsets with replica id 0 (kafka-python 3.1's) was
    # refused on client listeners as brokers' only (24 tests; test_request_handlers), and committed leader epochs
    # (KIP-320) were not kept (test_group_logic, test_kafka_groups).
    (
        "AlterReplicaLogDirs (34) is not served",
        "message",
        r"does not support the 'AlterReplicaLogDirsRequest'",
        "The test moves partition 0's replica to the log directory it is already in, which Kafka answers NONE "
        "(KIP-113). Kafka Lite's Kafka listener does not advertise api 34 in ApiVersions (replicas never move "
        "between a broker's log directories, docs/COMPATIBILITY.md), so kafka-python raises "
        "IncompatibleBrokerVersion before sending anything.",
    ),
    (
        "the broker version kafka-python infers from ApiVersions is 3.8, not 4.3",
        "message",
        r"inferred broker version",
        "kafka-python infers the version from the newest probe the broker serves "
        "(broker_version_data.py `infer_broker_version_from_api_versions`: 4.3 DescribeLogDirs v5, 4.2 "
        "ListOffsets v11, 4.1 Produce v13, 4.0 ListOffsets v10, 3.9 Fetch v17, 3.8 Produce v11). Kafka Lite's "
        "Kafka listener serves Produce 3-12, Fetch 4-12, ListOffsets 1-9 and DescribeLogDirs 1-4 "
        "(docs/COMPATIBILITY.md), Kafka 3.8's by that table. Cosmetic: clients negotiate each api's version; "
        "what is missing is ListOffsets v10 (Kafka 4.0's timeout_ms) and Fetch 13+ (topic ids).",
    ),
)
RULES, NOTES = rules_of(CAUSES)


# --- kafka-python's checkout and venv -----------------------------------------------------------------------------


def test_requirements(dest: Path) -> list[str]:
    """requirements-dev.txt less the lint, doc, coverage and benchmark tools (NOT_FOR_TESTS)."""
    out = []
    for line in (dest / "requirements-dev.txt").read_text().splitlines():
        req = line.split("#", 1)[0].strip()
        name = re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0].lower()
        if req and name not in NOT_FOR_TESTS:
            out.append(req)
    return out


def venv_python(dest: Path) -> Path:
    return SuiteVenv(dest, "").python


def install(dest: Path) -> None:
    """DIR/.venv with kafka-python (editable) and its test requirements from PyPI; done again only when the
    requirements change (a stamp of them in the venv)."""
    reqs = [f"-e{dest}[testing]", *test_requirements(dest)]
    venv = SuiteVenv(dest, "kafka-python's test requirements")
    if not venv.stale("\n".join(reqs)):
        return
    subprocess.run([*venv.create(), *reqs], check=True)
    venv.done("\n".join(reqs))


def resolve_net(dest: Path, net: str) -> str:
    """KAFKA_PYTHON_NET=random as CI resolves it (fixtures._spread_net: a hash of the commit, the Python
    version and KAFKA_VERSION picks the backend), named here so the report can say which backend ran."""
    if net != "random":
        return net
    code = (
        "import sys; from test.integration.fixtures import _spread_net; "
        "print(_spread_net(sha=sys.argv[1], kafka=sys.argv[2]))"
    )
    out = subprocess.run(
        [str(venv_python(dest)), "-c", code, PINNED_COMMIT, KAFKA_VERSION],
        cwd=dest,
        capture_output=True,
        text=True,
        check=True,
        env={**_clean_env(), "PYTHONPATH": str(dest)},
    )
    return out.stdout.strip().splitlines()[-1]


def _clean_env() -> dict[str, str]:
    """Our environment less what points into Kafka Lite's venv and sources (kafka-python's venv is its own)."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}


# --- the broker -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cluster:
    bootstrap: str  # the native listener (our tools)
    listeners: dict[str, int]  # kafka_python_fixtures.listener_key → the Kafka listener's port
    ssl_dir: Path  # holds ca-cert
    kafka_root: Path  # KAFKA_ROOT: bin/kafka-topics.sh
    log: Path


def _ports(n: int) -> list[int]:
    """n distinct free ports (free_port can hand the same one out twice in a row)."""
    seen: list[int] = []
    while len(seen) < n:
        p = free_port()
        if p not in seen:
            seen.append(p)
    return seen


def kafka_topics_shim(kafka_root: Path, bootstrap: str) -> None:
    """KAFKA_ROOT/bin/kafka-topics.sh for the fixtures' get_topic_names (kafka-topics.sh --list --bootstrap-server
    HOST:PORT --command-config FILE): kl-topics with the same flags on the native listener. The Kafka listener
    and its Java client config (the SASL login) are dropped: the listing is of the one cluster either way, and
    the login under test is kafka-python's own, in the test. KafkaFixture also insists that KAFKA_ROOT exists."""
    why = "kafka-python's fixtures call Kafka's kafka-topics.sh; Kafka Lite's is kl-topics (bench/conformance)"
    drop = ("--bootstrap-server", "--command-config", "--zookeeper")
    cli_shim(kafka_root / "bin" / "kafka-topics.sh", "client.cli.topics", bootstrap, drop, why)


@contextlib.contextmanager
def fixture_cluster(work: Path) -> Iterator[Cluster]:
    """The KafkaFixture's broker as one Kafka Lite broker with a listener per transport the suite asks for;
    stopped (SIGTERM, then SIGKILL) when the block ends."""
    secret = write_cluster_secret(work)
    # gen_ssl_resources: a CA and a key pair for CN=localhost, SAN dns:localhost, the CA as ssl_dir/ca-cert. Ours
    # as PEM (ssl.keystore.type=PEM, deploy/tls/make-certs.sh) instead of JKS.
    ssl_dir = work / "ssl"
    subprocess.run([str(ROOT / "deploy/tls/make-certs.sh"), str(ssl_dir), "localhost", "127.0.0.1"],
                   check=True, capture_output=True)  # fmt: skip
    shutil.copyfile(ssl_dir / "ca.pem", ssl_dir / "ca-cert")
    native, plaintext, ssl_port, *sasl_ports = _ports(3 + len(SASL_MECHANISMS))
    sasl = dict(zip(SASL_MECHANISMS, sasl_ports, strict=True))
    named = {"SSL": ssl_port, **{SASL_LISTENERS[m]: p for m, p in sasl.items()}}
    overrides = [
        *FIXTURE_SETTINGS,
        # listeners=PLAINTEXT://localhost:{port} (the plain fixture, KAFKA_URI): the built-in Kafka listener
        f"kafka.port={plaintext}",
        f"kafka.advertised.host={HOST}",
        # listeners={transport}://localhost:{port} of the SSL and SASL_PLAINTEXT fixtures' brokers, and their
        # advertised.listeners
        "listeners=" + ",".join(f"{name}://:{port}" for name, port in named.items()),
        "advertised.listeners=" + ",".join(f"{name}://{HOST}:{port}" for name, port in named.items()),
        "listener.security.protocol.map=" + ",".join(f"{name}:SASL_PLAINTEXT" for name in SASL_LISTENERS.values()),
        # sasl.enabled.mechanisms={mechanism}, one per fixture broker: one per listener here
        "sasl.enabled.mechanisms=" + ",".join(SASL_MECHANISMS),
        *(f"listener.name.{name.lower()}.sasl.enabled.mechanisms={m}" for m, name in SASL_LISTENERS.items()),
        # ssl.keystore.location / ssl.truststore.location (JKS, password foobar): PEM files
        f"ssl.keystore.location={ssl_dir / 'localhost.pem'}",
        f"ssl.truststore.location={ssl_dir / 'ca.pem'}",
        f"inter.broker.secret.file={secret}",
    ]
    # _format_log_dirs: kafka-storage.sh format --add-scram SCRAM-SHA-x=[name=alice,password=alice-secret]; both
    # mechanisms, and PLAIN (the JAAS user_alice) is checked against the same credentials.
    scram = [f"SCRAM-SHA-{n}=[name={BROKER_USER},password={BROKER_PASSWORD}]" for n in (256, 512)]
    cmd = start_command(
        BROKER_ID,
        native,
        work / f"broker-{BROKER_ID}",
        extra=[*(a for o in overrides for a in ("--override", o)), *(a for s in scram for a in ("--add-scram", s))],
    )
    log = work / f"broker-{BROKER_ID}.log"
    kafka_root = work / "kafka-bin"
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        bootstrap = f"127.0.0.1:{native}"
        if not wait_registered(bootstrap, 1, 60) or not _wait_kafka_listeners(bootstrap, 1, 60):
            raise SystemExit(f"error: the broker did not start within 60 s; see {log}")
        kafka_topics_shim(kafka_root, bootstrap)
        listeners = {
            listener_key("PLAINTEXT", None): plaintext,
            listener_key("SSL", None): ssl_port,
            **{listener_key("SASL_PLAINTEXT", m): p for m, p in sasl.items()},
        }
        print(f"Kafka Lite broker {BROKER_ID}: native {bootstrap}, Kafka listeners {listeners}; log {log}",
              file=sys.stderr)  # fmt: skip
        yield Cluster(bootstrap, listeners, ssl_dir, kafka_root, log)
    finally:
        stop(proc, timeout=30)


# --- pytest -----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Session:
    name: str
    args: list[str]  # pytest's paths and options
    external: bool  # KAFKA_URI set (kafka-python's external-broker mode)


def sessions(smoke: bool, args: Sequence[str]) -> list[Session]:
    if smoke:
        return [Session("smoke", list(SMOKE), True)]
    if args:  # the SASL file skips itself under KAFKA_URI: a selection that names it runs without
        return [Session("selected", list(args), not any("test_sasl_integration" in a for a in args))]
    return [Session("main", ["test", f"--ignore={SASL_FILE}"], True), Session("sasl", [SASL_FILE], False)]


def plugin_dir(work: Path) -> Path:
    """kafka_python_fixtures.py under its plugin name, alone in a directory on kafka-python's PYTHONPATH (our
    bench/ next to it would put modules such as bench/conformance/aiokafka.py on kafka-python's path)."""
    d = work / "pytest-plugins"
    d.mkdir(exist_ok=True)
    shutil.copyfile(Path(__file__).with_name("kafka_python_fixtures.py"), d / f"{PLUGIN}.py")
    return d


def run_pytest(
    dest: Path, session: Session, cluster: Cluster, work: Path, net: str, junit: Path, timeout_s: float
) -> int | None:
    """One pytest session as `make test` runs it; pytest's exit code, None if stopped at the timeout."""
    env = {
        **_clean_env(),
        "KAFKA_VERSION": KAFKA_VERSION,
        "KAFKA_PYTHON_NET": net,
        "KAFKA_ROOT": str(cluster.kafka_root),
        "PYTHONPATH": f"{dest}{os.pathsep}{plugin_dir(work)}",
        LISTENERS_ENV: json.dumps(cluster.listeners),
        SSL_DIR_ENV: str(cluster.ssl_dir),
        "PATH": f"{dest / '.venv' / 'bin'}{os.pathsep}{_clean_env().get('PATH', '')}",
    }
    if session.external:
        env["KAFKA_URI"] = f"kafka://{HOST}:{cluster.listeners['PLAINTEXT']}"
    else:
        env.pop("KAFKA_URI", None)
    cmd = [
        str(venv_python(dest)), "-m", "pytest", "-v", *session.args, "-p", PLUGIN, f"--junitxml={junit}",
        # pyproject's --timeout=300 stays; its --timeout-method=thread ends the whole process at the first test
        # that runs out of time (no junit report, the rest of the suite not run): signal fails that test alone.
        "--timeout-method=signal",
    ]  # fmt: skip
    log = work / f"pytest-{session.name}.log"
    shown = " ".join(f"{k}={env[k]}" for k in ("KAFKA_VERSION", "KAFKA_PYTHON_NET", "KAFKA_URI") if k in env)
    print(f"$ {shown} {' '.join(cmd)}  > {log}", file=sys.stderr)
    return run_suite(cmd, dest, env, timeout_s, "pytest", log)


# --- the table --------------------------------------------------------------------------------------------------------


def is_integration(path: str) -> bool:
    return path.startswith(INTEGRATION_DIR)


def area(path: str) -> str:
    """test/<dir> (kafka-python's own grouping: admin, consumer, net, producer, protocol, record, integration)."""
    parts = path.split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0] + " (top level)"


def _totals_line(t: dict[str, int]) -> str:
    ran = t["passed"] + t["failed"] + t["errors"]
    pct = f"; {100 * t['passed'] / ran:.1f}% of those run pass" if ran else ""
    return f"{t['passed']} passed, {t['failed']} failed, {t['errors']} errors, {t['skipped']} skipped{pct}"


def _files_table(files: Sequence[FileCounts]) -> str:
    """Per test file: passed, failed, errors, skipped."""
    rows = [(f"`{f.path}`", f.passed, f.failed, f.errors, f.skipped) for f in files]
    return md_table(["File", "Passed", "Failed", "Errors", "Skipped"], rows)


def render(rep: PytestReport, when: str, command: str, minutes: float, net: str) -> str:
    files = rep.files()
    by_area: dict[str, Counter[str]] = {}
    for f in files:
        by_area.setdefault(area(f.path), Counter()).update(
            passed=f.passed, failed=f.failed, errors=f.errors, skipped=f.skipped
        )
    integration = [f for f in files if is_integration(f.path)]
    unit_failing = [f for f in files if not is_integration(f.path) and (f.failed or f.errors)]
    lines = [
        "## kafka-python's own suite",
        "",
        f"kafka-python [{PINNED_COMMIT[:12]}]({REPO_URL}/commit/{PINNED_COMMIT}) (master, 3.1.0.dev), its whole "
        "pytest suite (`test/`) run as its CI's `make test` runs it (`pytest -v test`; pyproject's "
        "`--timeout=300` per test, with `--timeout-method=signal`: its `thread` ends the whole run at the first "
        "timeout) against one Kafka Lite broker laid out as its "
        "KafkaFixture lays out Kafka (bench/conformance/kafka_python.py maps each setting): the PLAINTEXT Kafka "
        f"listener as `KAFKA_URI` with `KAFKA_VERSION={KAFKA_VERSION}` (the newest Kafka of its CI matrix), and "
        "the SSL and SASL_PLAINTEXT (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512; user alice) listeners that the SSL and "
        "SASL tests' own broker fixtures ask for (bench/conformance/kafka_python_fixtures.py; the SASL file "
        "skips itself under `KAFKA_URI` and runs in a second session without it). "
        f"Net backend: `{net}` (what the CI's `KAFKA_PYTHON_NET=random` picks for this commit, Python "
        f"{sys.version_info.major}.{sys.version_info.minor} and Kafka {KAFKA_VERSION}).",
        "",
        f"Run {when}, {minutes:.0f} min: `{command}`",
        "",
        f"**Integration tests (`{INTEGRATION_DIR}`, against Kafka Lite): {_totals_line(rep.totals(is_integration))}.**",
        "",
        f"Unit tests (the rest: mock brokers, no Kafka Lite involved): "
        f"{_totals_line(rep.totals(lambda p: not is_integration(p)))}.",
        "",
        md_table(
            ["Directory", "Passed", "Failed", "Errors", "Skipped"],
            [(f"`{a}`", c["passed"], c["failed"], c["errors"], c["skipped"]) for a, c in sorted(by_area.items())],
        ),
        "",
        "Integration files:",
        "",
        _files_table(integration),
        "",
    ]
    if unit_failing:
        lines += [
            "Unit test files with failures:",
            "",
            _files_table(unit_failing),
            "",
        ]
    skipped = [c for c in rep.cases if c.outcome == "skipped"]
    if skipped:
        lines += [
            "Skipped, by the reason pytest gives:",
            "",
            md_table(["Reason", "Tests"], [(r.replace("|", "\\|"), n) for r, n in skip_reasons(skipped)]),
            "",
        ]
    lines += ["### Failures by cause", ""]
    if not rep.failures:
        lines += ["None.", ""]
    lines += cause_lines(rep, NOTES)
    return "\n".join(lines)


def junit_files(work: Path) -> list[Path]:
    """The run's reports, oldest first: a --merge rerun's results replace the earlier ones of the same tests."""
    return sorted(work.glob("junit-*.xml"), key=lambda p: p.stat().st_mtime)


def load(work: Path, dest: Path) -> PytestReport:
    """The junit reports, each failure with the warnings its captured log holds (the terminal output of the same
    session: junit-NAME.xml next to pytest-NAME.log; a --merge rerun's log is pytest-selected.log)."""
    cases: list[Case] = []
    for j in junit_files(work):
        name = j.stem.removeprefix("junit-")
        log = work / f"pytest-{'selected' if name.startswith('rerun-') else name}.log"
        logs = failure_logs(log.read_text(errors="replace")) if log.exists() else {}
        cases += with_logs(parse_file(j, dest), logs)
    return report(cases, classifier(RULES))


HEADER = re.compile(r"^Run (.+?), (\d+) min: `(.*)`$", re.MULTILINE)
NET_LINE = re.compile(r"Net backend: `([^`]+)`")


def rerender(work: Path, dest: Path, doc: Path, extra_command: str | None = None, extra_minutes: float = 0) -> int:
    """The table of an earlier run again, from the junit files in its work dir (say, after CAUSES changed, or
    after a --merge rerun, whose command is added): its date, command and length are kept from kafka-python.md."""
    md = work / "kafka-python.md"
    if not md.exists():
        raise SystemExit(f"error: {md} does not exist: no full run in {work} to render or merge into")
    header = md.read_text()
    run, net = HEADER.search(header), NET_LINE.search(header)
    if run is None or net is None:
        raise SystemExit(f"error: {md} does not say when and how the run was made")
    command = run[3] + (f"`, then `{extra_command}" if extra_command else "")
    body = render(load(work, dest), run[1], command, float(run[2]) + extra_minutes, net[1])
    md.write_text(body + "\n")
    replace_section(doc, START_MARK, END_MARK, body)
    print(f"wrote the table of {work} into {doc}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--kafka-python-dir", type=Path, default=Path(tempfile.gettempdir()) / f"kafka-python-{PINNED_COMMIT[:12]}"
    )
    ap.add_argument("--mirror", type=Path, default=DEFAULT_MIRROR, help="git directory to export kafka-python from")
    ap.add_argument("--smoke", action="store_true", help=f"only {', '.join(SMOKE)}; the doc is left alone")
    ap.add_argument("--net", default=NET, help="KAFKA_PYTHON_NET: random (CI's pick), selector, asyncio")
    ap.add_argument("--timeout", type=float, default=3 * 3600, help="seconds for all pytest sessions together")
    ap.add_argument("--out", type=Path, default=Path("docs/COMPATIBILITY.md"))
    ap.add_argument("--work-dir", type=Path, default=None, help="broker data and logs, pytest logs, junit XML")
    ap.add_argument("--from-junit", action="store_true", help="re-render the table of the run in --work-dir, no run")
    ap.add_argument("--merge", action="store_true", help="with pytest args: add this run to the full run in --work-dir")
    ap.add_argument("pytest_args", nargs="*", help="pytest paths and options (default: the whole suite)")
    args = ap.parse_args(argv)
    # SIGTERM unwinds like ^C, so that pytest and the broker are stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    dest = args.kafka_python_dir.resolve()
    if args.from_junit:
        if args.work_dir is None:
            raise SystemExit("error: --from-junit needs the run's --work-dir")
        return rerender(args.work_dir.resolve(), dest, args.out)
    if args.merge and (args.work_dir is None or not args.pytest_args):
        raise SystemExit("error: --merge needs the full run's --work-dir and the pytest args to rerun")
    PINNED.checkout(dest, args.mirror)
    install(dest)
    net = resolve_net(dest, args.net)
    work = (args.work_dir or Path(tempfile.mkdtemp(prefix="kafka-python-conformance-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    stamp = hashlib.sha1(str(time.time()).encode()).hexdigest()[:6]  # a rerun's report must not replace the run's
    missing: list[str] = []
    with fixture_cluster(work) as cluster:
        for s in sessions(args.smoke, args.pytest_args):
            junit = work / (f"junit-rerun-{stamp}.xml" if args.merge else f"junit-{s.name}.xml")
            left = args.timeout - (time.monotonic() - started)
            code = run_pytest(dest, s, cluster, work, net, junit, left) if left > 0 else None
            if code is None or not junit.exists():
                missing.append(s.name)
    minutes = (time.monotonic() - started) / 60
    command = "python -m bench.conformance.kafka_python " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.merge:
        return rerender(work, dest, args.out, command.strip(), minutes)
    rep = load(work, dest)
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    body = render(rep, when, command.strip(), minutes, net)
    if missing:
        body += f"\nNot run (stopped at --timeout or no report): the {', '.join(missing)} session(s).\n"
    (work / "kafka-python.md").write_text(body + "\n")
    t = rep.totals()
    print(f"kafka-python: {_totals_line(t)}; report {work / 'kafka-python.md'}, junit XML in {work}")
    if not args.smoke and not args.pytest_args and len(missing) < 2:
        replace_section(args.out, START_MARK, END_MARK, body)
        print(f"wrote the table into {args.out}")
    return 0 if t["failed"] == 0 and t["errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
