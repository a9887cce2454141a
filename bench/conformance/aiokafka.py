"""aiokafka's own pytest suite against a Kafka Lite broker laid out as aiokafka's docker fixture lays out Kafka.

    python -m bench.conformance.aiokafka --aiokafka-dir DIR            # the whole suite, then docs/COMPATIBILITY.md
    python -m bench.conformance.aiokafka --aiokafka-dir DIR --smoke    # a test of each listener, no doc change
    python -m bench.conformance.aiokafka --aiokafka-dir DIR -- tests/test_sasl.py -k scram   # pytest args after --

Where aiokafka comes from: DIR must hold aiokafka at PINNED_COMMIT (0.14.0). If DIR does not exist it is checked
out from a git directory (`--mirror`, default the snapshot our `fetch` tool makes,
/work/.mirror/aio-libs+aiokafka/repo) with `git archive`; elsewhere, make it with
    git clone https://github.com/aio-libs/aiokafka DIR && git -C DIR checkout PINNED_COMMIT
Its test dependencies go into a venv of its own, DIR/.venv, from PyPI: requirements-ci.txt (gssapi only if it
builds: it needs libkrb5-dev, and Kafka Lite has no GSSAPI anyway), pytest-timeout, and `pip install -e DIR`
(which builds aiokafka's C extensions, as its CI does).

The broker is the one of aiokafka's tests/conftest.py `kafka_server` fixture, which runs the image of its docker/
dir: docker/scripts/start-kafka.sh over Kafka's config/server.properties, translated key by key (DOCKER_SETTINGS):
one broker with the listeners PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL on free ports advertised as 127.0.0.1,
two partitions per new topic, the ACL authorizer with super user admin, and the PLAIN users of
kafka_server_jaas.conf. The fixtures that start docker containers (`docker`, `kafka_image`, `ssl_folder`,
`kafka_server`, `acl_manager`, `kafka_config`, `kerberos_utils`) are replaced in DIR's copy only, by
bench/conformance/aiokafka_fixtures.py (copied to DIR/tests/_kafkalite_fixtures.py and imported at the end of
DIR/tests/conftest.py); kafka-acls.sh and kafka-configs.sh become Kafka Lite's kl-acls and kl-configs.

pytest runs as aiokafka's `make ci-test-all` does (`-s -v --log-level DEBUG --docker-image aiolibs/kafka:2.13_2.8.1`,
the newest Kafka of its CI matrix, which the tests' version gates read), without coverage and without
`--maxfail=3` (every failure is wanted), with `--timeout` per test as a hang guard above the tests' own 120 s
and `--junitxml`, with aiokafka's C extensions (its CI's first pass; `--no-extensions` runs the second, pure
Python); bench/conformance/pytest_report.py turns the report into totals per file and each failure's
cause, written between markers in docs/COMPATIBILITY.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from bench.conformance.checkout import PinnedSource, SuiteVenv
from bench.conformance.jest_report import classifier, rules_of, summary
from bench.conformance.kafkajs import kafka_tool
from bench.conformance.pytest_report import PytestReport, parse_file, report, skip_reasons
from bench.conformance.runner import run_suite
from bench.peers._common import free_port, stop
from bench.sections import md_table, replace_section
from client.cli.cluster import _poll_metadata, start_command, wait_registered, write_cluster_secret

ROOT = Path(__file__).resolve().parents[2]
REPO_URL = "https://github.com/aio-libs/aiokafka"
PINNED_COMMIT = "672947afe85c91b7d953f0259e69837a711d3246"  # v0.14.0 ("Prepare 0.14.0 final release")
VERSION = "0.14.0"
DEFAULT_MIRROR = Path("/work/.mirror/aio-libs+aiokafka/repo")
COMMIT_MARK = ".aiokafka-commit"  # written into a checkout made with git archive (which has no .git)
PINNED = PinnedSource("aiokafka", "aio-libs/aiokafka", PINNED_COMMIT, COMMIT_MARK)
# The Makefile's DOCKER_IMAGE default and the newest Kafka of .github/workflows/tests.yml's matrix; the tests
# gate on the version after its "_" (kafka_versions(">=2.3.0"), setup_test_class's kafka_version).
DOCKER_IMAGE = "aiolibs/kafka:2.13_2.8.1"
SMOKE = (
    "tests/test_helpers.py",
    "tests/test_producer.py::TestKafkaProducerIntegration::test_producer_ssl",
    "tests/test_sasl.py::TestKafkaSASL::test_sasl_plaintext_basic",
    "tests/test_sasl.py::TestKafkaSASL::test_sasl_plaintext_scram",
    "tests/test_sasl.py::TestKafkaSASL::test_sasl_plaintext_gssapi",
    "tests/test_sasl.py::TestKafkaSASL::test_sasl_deny_autocreate_cluster",
)
START_MARK = "<!-- aiokafka-suite:start -->"
END_MARK = "<!-- aiokafka-suite:end -->"
FIXTURES = Path(__file__).with_name("aiokafka_fixtures.py")
FIXTURES_AS = "_kafkalite_fixtures.py"  # its name in DIR/tests
CONFTEST_LINE = "from ._kafkalite_fixtures import *  # noqa: F403  Kafka Lite (bench/conformance/aiokafka.py)"
CLUSTER_ENV = "KAFKALITE_AIOKAFKA_CLUSTER"  # aiokafka_fixtures.py reads the cluster's description from this file

HOST = "127.0.0.1"  # conftest's docker_ip_address, start-kafka.sh's ADVERTISED_HOST
# Kafka's config/server.properties: broker.id=0. Tests address the broker by that id (test_sender's handlers send
# to node_id=0).
BROKER_ID = 0
# docker/scripts/start-kafka.sh's listeners (LISTENERS / ADVERTISED_LISTENERS), each on a port the conftest's
# unused_port() picks; Kafka's default protocol map gives each name its protocol.
LISTENERS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# Kafka Lite only: kafka-acls.sh / kafka-configs.sh write to ZooKeeper; kl-acls / kl-configs speak the native
# protocol to the broker, on a listener of their own where they log in as the super user (aiokafka_fixtures.py).
ADMIN_LISTENER = "ADMIN"
SUPER_USER = ("admin", "admin")

# The broker's settings, as Kafka Lite keys (the setting each stands for in the comment).
DOCKER_SETTINGS = (
    # Kafka 2.8.1's config/server.properties, which start-kafka.sh starts the broker with:
    "group.initial.rebalance.delay.ms=0",  # group.initial.rebalance.delay.ms=0
    "offsets.topic.replication.factor=1",  # offsets.topic.replication.factor=1 (also our default on one broker)
    "transaction.state.log.replication.factor=1",  # transaction.state.log.replication.factor=1
    "transaction.state.log.min.isr=1",  # transaction.state.log.min.isr=1
    # start-kafka.sh's --overrides:
    "num.partitions=2",  # NUM_PARTITIONS=2 (the conftest's environment)
    "auto.create.topics.enable=true",  # auto.create.topics.enable=true
    # SASL_MECHANISMS=PLAIN,GSSAPI,SCRAM-SHA-256,SCRAM-SHA-512 (Kafka >= 0.10.2): no GSSAPI in Kafka Lite, and so no
    # sasl.kerberos.service.name=kafka
    "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    "authorizer=acl",  # authorizer.class.name=kafka.security.auth.SimpleAclAuthorizer
    "allow.everyone.if.no.acl.found=true",  # allow.everyone.if.no.acl.found=true
    "super.users=User:admin",  # super.users=User:admin
    # ssl.keystore.location=br_server.keystore.jks and ssl.truststore.location=br_server.truststore.jks are
    # cluster_overrides' PEM files (Kafka Lite reads PEM only: ssl.keystore.type=JKS has no counterpart), as are
    # their passwords (the PEM key is not encrypted); ssl.protocol=TLS with ssl.enabled.protocols=
    # TLSv1.2,TLSv1.1,TLSv1 has none either: Kafka Lite serves TLS 1.2 and newer.
    "ssl.client.auth=required",  # ssl.client.auth=required
    "ssl.endpoint.identification.algorithm=",  # ssl.endpoint.identification.algorithm= (security.inter.broker.
    # protocol=SSL: one broker, whose inter-broker listener has no peer)
)
# docker/scripts/kafka_server_jaas.conf's PLAIN users (user_admin="admin", user_test="test", user_test2="test2"),
# made at the broker's first start as kafka-storage.sh format --add-scram would: Kafka Lite checks PLAIN logins
# against the SCRAM credentials, its one user store, so each also has SCRAM credentials from the start, where
# Kafka's would have them only once a test calls kafka_config.add_scram_user (test_sasl_plaintext_scram's "test").
USERS = (("admin", "admin"), ("test", "test"), ("test2", "test2"))

# The causes: (cause, what the pattern looks at: the error "message", the test's "name" or its file's "path",
# the pattern, and what Kafka Lite does differently as read off the tests and the broker's answers). The first
# match wins; anything else is grouped by its first line (jest_report.classifier).
CAUSES: tuple[tuple[str, str, str, str], ...] = (
    # Fixed since the first runs (2026-11-28): JoinGroup v0-6 error answers could not be written (the listener
    # closed the connection; tests/unit/test_error_answers_encode.py), and static membership (KIP-345) was
    # ignored (tests/unit/test_static_membership.py, tests/integration/test_static_membership.py).
    (
        "a race inside aiokafka's consumer: unsubscribe() 10 ms after subscribe()",
        "name",
        r"::test_consumer_fast_unsubscribe$",
        'The test unsubscribes 10 ms after subscribing, "before coordination finishes"; aiokafka\'s fetcher task '
        "woke on the new assignment and read `subscription.assignment` after unsubscribe() had set the "
        "subscription to None (AttributeError at aiokafka/consumer/fetcher.py:529, raised from consumer.stop()). "
        "No broker answer is wrong here; how soon the group answers decides which side of the race the test "
        "lands on. Run alone, it passed 3 of 3 times (2026-11-28).",
    ),
    (
        "garbage-collected connections of an earlier test, reported in this one's teardown",
        "message",
        r"unraisable exception warnings",
        "The test passed (pytest's PASSED line comes before the teardown's ERROR); its teardown then collected "
        'aiokafka connections whose event loop had closed (ResourceWarning "loop is closed" from '
        "StreamWriter.__del__ and aiokafka/conn.py __del__), which pytest reports as an error. They are left by a "
        "test that failed before it (test_consumer_fast_unsubscribe); in runs where that one passes, so does "
        "this teardown.",
    ),
)
RULES, NOTES = rules_of(CAUSES)
# Why tests skip, by the start of pytest's skip reason: none of them is Kafka Lite's doing but GSSAPI's.
SKIP_NOTES = (
    (
        "got empty parameter set",
        "aiokafka's own, no broker: tests/test_protocol.py's request/response conformance tests are parametrized "
        "over abstract properties the classes under test have none of (the same in aiokafka's CI)",
    ),
    ("unsupported kafka version", 'a test for Kafka < 1.0.0 (`kafka_versions("<1.0.0")`), skipped at 2.8.1 too'),
    ("GSSAPI/Kerberos", "Kafka Lite has no GSSAPI mechanism; aiokafka_fixtures.py's kerberos_utils skips these tests"),
)


# --- aiokafka's checkout and venv ------------------------------------------------------------------------


def venv_python(dest: Path) -> Path:
    return SuiteVenv(dest, "").python


def install(dest: Path) -> None:
    """aiokafka's CI dependencies and aiokafka itself (C extensions built) in DIR/.venv, from PyPI, once per
    requirements file."""
    reqs = (dest / "requirements-ci.txt").read_text()
    venv = SuiteVenv(dest, "aiokafka's test dependencies")
    if not venv.stale(reqs):
        return
    pip = venv.create(None, "setuptools")
    # gssapi builds against libkrb5 (krb5-config): installed apart, and left out if it does not build, since the
    # GSSAPI tests skip here whatever happens (Kafka Lite has no GSSAPI). The file sits next to requirements-ci.txt
    # for its `-r requirements-cython.txt`.
    filtered = dest / ".kafkalite-requirements.txt"
    filtered.write_text("".join(ln for ln in reqs.splitlines(keepends=True) if not ln.startswith("gssapi")))
    subprocess.run([*pip, "-r", str(filtered), "pytest-timeout"], check=True)
    gssapi = [ln.strip() for ln in reqs.splitlines() if ln.startswith("gssapi")]
    if gssapi and subprocess.run([*pip, *gssapi], capture_output=True).returncode != 0:
        print(f"{gssapi[0]} did not build (libkrb5-dev missing?): left out", file=sys.stderr)
    subprocess.run([*pip, "-e", str(dest)], check=True)
    venv.done(reqs)


def patch_conftest(dest: Path) -> None:
    """Our fixtures into DIR's copy of the suite: the module next to conftest.py (always, so that a changed
    harness takes effect), and one import at the end of conftest.py (once)."""
    shutil.copyfile(FIXTURES, dest / "tests" / FIXTURES_AS)
    conftest = dest / "tests" / "conftest.py"
    text = conftest.read_text()
    if CONFTEST_LINE not in text:
        conftest.write_text(text.rstrip("\n") + "\n\n\n" + CONFTEST_LINE + "\n")


def make_certs(folder: Path) -> None:
    """gen-ssl-certs.sh's files, made with the same openssl commands (its Java keystores aside: the broker takes
    PEM): a CA (ca.key, ca.crt), the broker's key and certificate signed by it (server.key, server.crt, CN=server)
    and the client's (client.key, client.crt, CN=client), which the SSL tests present (ssl.client.auth=required).
    Kept when they exist, as the conftest's ssl_folder keeps tests/ssl_cert."""
    if all((folder / f).exists() for f in ("ca.crt", "client.crt", "client.key", "server.crt", "server.key")):
        return
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ca.cnf").write_text(
        "[ req ]\ndistinguished_name = ca_distinguished_name\nx509_extensions = ca_extensions\n"
        "[ ca_distinguished_name ]\ncommonName = Common Name\n"
        "[ ca_extensions ]\nsubjectKeyIdentifier = hash\nauthorityKeyIdentifier = keyid:always, issuer\n"
        "basicConstraints = critical, CA:true\nkeyUsage = keyCertSign, cRLSign\n"
    )
    (folder / "sign-ext.cnf").write_text(
        "subjectKeyIdentifier = hash\nauthorityKeyIdentifier = keyid,issuer\nbasicConstraints = CA:FALSE\n"
        "keyUsage = digitalSignature, keyEncipherment\n"
    )
    steps = [
        "genpkey -algorithm RSA -out ca.key",
        "req -x509 -new -key ca.key -days 3650 -out ca.crt -config ca.cnf -subj /CN=CA",
        "req -new -newkey rsa:4096 -nodes -keyout server.key -out server.csr -subj /CN=server",
        "x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 3650 "
        "-extfile sign-ext.cnf",
        "genpkey -algorithm RSA -out client.key -pass pass:abcdefgh",
        "req -new -nodes -key client.key -passin pass:abcdefgh -out client.csr -subj /CN=client",
        "x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out client.crt -days 3650 "
        "-extfile sign-ext.cnf",
    ]
    for step in steps:
        subprocess.run(["openssl", *step.split()], cwd=folder, check=True, capture_output=True)


# --- the cluster ------------------------------------------------------------------------------------------


def broker_overrides(ports: dict[str, int], certs: Path, secret: Path) -> list[str]:
    listeners = ",".join(f"{name}://:{port}" for name, port in ports.items())
    advertised = ",".join(f"{name}://{HOST}:{ports[name]}" for name in LISTENERS)
    return [
        *DOCKER_SETTINGS,
        f"listeners={listeners}",  # LISTENERS, and our tools' native listener
        f"advertised.listeners={advertised}",  # ADVERTISED_LISTENERS
        f"listener.security.protocol.map={ADMIN_LISTENER}:SASL_PLAINTEXT",
        f"listener.wire.map={ADMIN_LISTENER}:native",
        # the tools log in with SCRAM: no PLAIN (a password in clear) on a listener the docker image does not have
        f"listener.name.{ADMIN_LISTENER.lower()}.sasl.enabled.mechanisms=SCRAM-SHA-256",
        f"ssl.keystore.location={certs / 'server.pem'}",  # br_server.keystore.jks: server.key + server.crt
        f"ssl.truststore.location={certs / 'ca.crt'}",  # br_server.truststore.jks: ca.crt
        f"inter.broker.secret.file={secret}",
    ]


@contextlib.contextmanager
def docker_cluster(work: Path, certs: Path) -> Iterator[Path]:
    """The broker of the conftest's kafka_server fixture, on free ports; yields the cluster's description (the
    JSON file aiokafka_fixtures.py reads). Stopped (SIGTERM, then SIGKILL) when the block ends."""
    (certs / "server.pem").write_text((certs / "server.key").read_text() + (certs / "server.crt").read_text())
    shutil.rmtree(work / "broker-0", ignore_errors=True)  # a fresh broker each run, as the conftest's container
    secret = write_cluster_secret(work)
    ports = {name: free_port() for name in (*LISTENERS, ADMIN_LISTENER)}
    native = free_port()
    scram = [f"{m}=[name={u},password={p}]" for u, p in USERS for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")]
    extra = [a for o in broker_overrides(ports, certs, secret) for a in ("--override", o)]
    extra += [a for s in scram for a in ("--add-scram", s)]
    cmd = start_command(BROKER_ID, native, work / "broker-0", extra=extra)
    log = open(work / "broker-0.log", "ab")  # noqa: SIM115 (the broker writes it until it stops)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    (work / "broker-0.pid").write_text(f"{proc.pid}\n")
    try:
        bootstrap = f"{HOST}:{native}"
        plaintext = {"topics": [], "listener": "PLAINTEXT"}  # the PLAINTEXT listener registered (native map form)
        if not wait_registered(bootstrap, 1, 60) or not _poll_metadata(
            bootstrap, 60, plaintext, lambda md: len(md.get("brokers") or []) >= 1
        ):
            raise SystemExit(f"error: the broker did not start within 60 s; see {work}/broker-0.log")
        admin_config = work / "admin.properties"
        user, password = SUPER_USER
        admin_config.write_text(
            f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\nsasl.username={user}\n"
            f"sasl.password={password}\n"
        )
        admin_bootstrap = f"{HOST}:{ports[ADMIN_LISTENER]}"
        # the super user's login works (and the tools with it) before any test relies on it
        kafka_tool("client.cli.acls", "--bootstrap-server", admin_bootstrap, "--command-config", str(admin_config),
                   "--list")  # fmt: skip
        description = {
            "host": HOST,
            "port": ports["PLAINTEXT"],
            "ssl_port": ports["SSL"],
            "sasl_plain_port": ports["SASL_PLAINTEXT"],
            "sasl_ssl_port": ports["SASL_SSL"],
            "ssl_folder": str(certs),
            "work_dir": str(work),
            "tool": {
                "python": sys.executable,
                "env": {"PYTHONPATH": str(ROOT)},
                "bootstrap": admin_bootstrap,
                "command_config": str(admin_config),
            },
        }
        path = work / "cluster.json"
        path.write_text(json.dumps(description, indent=2) + "\n")
        print(f"Kafka Lite broker: {json.dumps({k: description[k] for k in list(description)[:5]})}", file=sys.stderr)
        yield path
    finally:
        stop(proc, timeout=30)
        log.close()


# --- pytest -------------------------------------------------------------------------------------------------


def pytest_command(dest: Path, junit: Path, test_timeout: float, args: Sequence[str]) -> list[str]:
    return [
        str(venv_python(dest)),
        "-m",
        "pytest",
        # make ci-test-all's flags, less --cov (coverage) and --maxfail=3 (FLAGS), and --color=no for the log file
        "-s",
        "-v",
        "--log-format=%(asctime)s %(levelname)s %(message)s",
        "--log-level",
        "DEBUG",
        "--color=no",
        "--docker-image",
        DOCKER_IMAGE,
        # the report: each failing test's captured log (never a passing one's) goes into it
        f"--junitxml={junit}",
        "-o",
        "junit_family=xunit1",
        "-o",
        "junit_logging=log",
        "-o",
        "junit_log_passing_tests=false",
        "--timeout",
        str(test_timeout),
        *(args or ["tests"]),
    ]


def run_pytest(
    dest: Path, cmd: Sequence[str], cluster: Path, log: Path, timeout_s: float, no_extensions: bool = False
) -> int | None:
    """pytest in DIR with its own venv; its exit code, None if it was stopped at the timeout. `no_extensions`:
    aiokafka's pure-Python record code instead of its C extensions (AIOKAFKA_NO_EXTENSIONS=1, the second pass of
    its CI's "Run All Tests")."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    # Kafka Lite's root holds a package named `tests` too: aiokafka's must be the one imported
    env |= {CLUSTER_ENV: str(cluster), "PATH": f"{dest / '.venv' / 'bin'}:{env.get('PATH', '')}"}
    env.pop("AIOKAFKA_NO_EXTENSIONS", None)
    if no_extensions:
        env["AIOKAFKA_NO_EXTENSIONS"] = "1"
    print("$ " + " ".join(cmd) + f"  > {log}", file=sys.stderr)
    return run_suite(cmd, dest, env, timeout_s, "pytest", log)


# --- the table ------------------------------------------------------------------------------------------------


def render(rep: PytestReport, when: str, command: str, minutes: float) -> str:
    t = rep.totals()
    ran = t["passed"] + t["failed"] + t["errors"]
    total = ran + t["skipped"]
    lines = [
        "## aiokafka's own suite",
        "",
        f"aiokafka [{PINNED_COMMIT[:12]}]({REPO_URL}/commit/{PINNED_COMMIT}) ({VERSION}), its whole pytest suite "
        "against a one-broker Kafka Lite cluster laid out as its docker fixture lays out Kafka (tests/conftest.py "
        "`kafka_server`, docker/scripts/start-kafka.sh; bench/conformance/aiokafka.py says how each setting maps): "
        "the PLAINTEXT, SSL (client certificates required), SASL_PLAINTEXT and SASL_SSL Kafka listeners on free "
        "ports, two partitions per new topic, the ACL authorizer with super user admin, the PLAIN users admin, test "
        f"and test2, `--docker-image {DOCKER_IMAGE}` for the tests' Kafka version gates (2.8.1). The fixtures that "
        "start docker containers are replaced (bench/conformance/aiokafka_fixtures.py): kafka-acls.sh and "
        "kafka-configs.sh are `kl-acls` and `kl-configs`, and GSSAPI tests skip (no Kerberos in Kafka Lite).",
        "",
        f"Run {when}, {minutes:.0f} min: `{command}`",
        "",
        f"**{t['passed']} passed, {t['failed']} failed, {t['errors']} errors, {t['skipped']} skipped** of {total} "
        f"tests in {t['files']} files; {100 * t['passed'] / ran if ran else 0:.1f}% of the tests run pass.",
        "",
        md_table(
            ["File", "Passed", "Failed", "Errors", "Skipped"],
            [(f"`{f.path}`", f.passed, f.failed, f.errors, f.skipped) for f in rep.files()],
        ),
        "",
    ]
    if skips := skip_reasons(rep.cases):
        lines += [
            "Skipped, by reason:",
            "",
            md_table(
                ["Reason", "Tests", "Why"],
                [
                    (reason, n, next((note for start, note in SKIP_NOTES if reason.startswith(start)), ""))
                    for reason, n in skips
                ],
            ),
            "",
        ]
    lines += ["### Failures by cause", ""]
    for cause, fails in rep.by_cause():
        lines.append(f"**{cause}** ({len(fails)})")
        lines.append("")
        if cause in NOTES:
            lines += [NOTES[cause], ""]
        for f in fails:
            lines.append(f"- `{f.path}` {f.label}: {summary(f.message)}".rstrip())
        lines.append("")
    return "\n".join(lines)


def rerender(junit: Path, doc: Path) -> int:
    """The table of an earlier run again (say, after CAUSES changed): its date, command and length are kept from
    the report it wrote next to junit.xml."""
    header = (junit.parent / "aiokafka.md").read_text()
    run = re.search(r"^Run (.+?), (\d+) min: `(.*)`$", header, re.MULTILINE)
    if run is None:
        raise SystemExit(f"error: {junit.parent / 'aiokafka.md'} does not say when and how the run was made")
    rep = report(parse_file(junit), classifier(RULES))
    body = render(rep, run[1], run[3], float(run[2]))
    (junit.parent / "aiokafka.md").write_text(body + "\n")
    replace_section(doc, START_MARK, END_MARK, body)
    print(f"wrote the table of {junit} into {doc}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--aiokafka-dir", type=Path, default=Path(tempfile.gettempdir()) / f"aiokafka-{PINNED_COMMIT[:12]}")
    ap.add_argument("--mirror", type=Path, default=DEFAULT_MIRROR, help="git directory to check aiokafka out of")
    ap.add_argument("--smoke", action="store_true", help="a test of each listener and tool; the doc is left alone")
    ap.add_argument("--test-timeout", type=float, default=300, help="seconds per test (pytest-timeout)")
    ap.add_argument(
        "--no-extensions",
        action="store_true",
        help="aiokafka's pure-Python record code (AIOKAFKA_NO_EXTENSIONS=1, its CI's second pass)",
    )
    ap.add_argument("--timeout", type=float, default=3 * 3600, help="seconds for the whole pytest run")
    ap.add_argument("--out", type=Path, default=Path("docs/COMPATIBILITY.md"))
    ap.add_argument("--work-dir", type=Path, default=None, help="broker data and log, pytest's log and report")
    ap.add_argument(
        "--from-junit",
        type=Path,
        default=None,
        help="re-render the table from a run's junit.xml (in its --work-dir) without running anything",
    )
    ap.add_argument("pytest_args", nargs="*", help="pytest arguments (default: the whole suite, tests/)")
    args = ap.parse_args(argv)
    # SIGTERM unwinds like ^C, so that pytest and the broker are stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.from_junit:
        return rerender(args.from_junit, args.out)
    dest = args.aiokafka_dir.resolve()
    PINNED.checkout(dest, args.mirror)
    install(dest)
    patch_conftest(dest)
    certs = dest / "tests" / "ssl_cert"  # the conftest's ssl_folder
    make_certs(certs)
    work = (args.work_dir or Path(tempfile.mkdtemp(prefix="aiokafka-conformance-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    junit = work / "junit.xml"
    junit.unlink(missing_ok=True)
    cmd = pytest_command(dest, junit, args.test_timeout, list(SMOKE) if args.smoke else args.pytest_args)
    started = time.monotonic()
    with docker_cluster(work, certs) as cluster:
        code = run_pytest(dest, cmd, cluster, work / "pytest.log", args.timeout, args.no_extensions)
    minutes = (time.monotonic() - started) / 60
    if not junit.exists():
        raise SystemExit(f"error: pytest wrote no report (exit {code}); see {work / 'pytest.log'}")
    rep = report(parse_file(junit), classifier(RULES))
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    command = "python -m bench.conformance.aiokafka " + " ".join(sys.argv[1:] if argv is None else argv)
    body = render(rep, when, command.strip(), minutes)
    if code is None:
        body += f"\nStopped at --timeout ({args.timeout:.0f} s): the tests after the last one reported did not run.\n"
    (work / "aiokafka.md").write_text(body + "\n")
    t = rep.totals()
    print(f"aiokafka: {t['passed']} passed, {t['failed']} failed, {t['errors']} errors, {t['skipped']} skipped "
          f"in {minutes:.0f} min; report {work / 'aiokafka.md'}, junit {junit}, log {work / 'pytest.log'}")  # fmt: skip
    if not args.smoke and not args.pytest_args:
        replace_section(args.out, START_MARK, END_MARK, body)
        print(f"wrote the table into {args.out}")
    return 0 if t["failed"] + t["errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
