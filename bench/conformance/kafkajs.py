"""kafkajs's own test suite against a 3-broker Kafka Lite cluster laid out as kafkajs's docker-compose.2_4.yml.

    python -m bench.conformance.kafkajs --kafkajs-dir DIR            # the whole suite, then docs/COMPATIBILITY.md
    python -m bench.conformance.kafkajs --kafkajs-dir DIR --smoke    # one file (the producer's), no doc change
    python -m bench.conformance.kafkajs --kafkajs-dir DIR -- src/admin  # jest path patterns after "--"

Where kafkajs comes from: DIR must hold kafkajs at PINNED_COMMIT. If DIR does not exist it is checked out from
a git directory (`--mirror`, default the snapshot our `fetch` tool makes, /work/.mirror/tulios+kafkajs/repo)
with `git archive`; elsewhere, make it with
    git clone https://github.com/tulios/kafkajs DIR && git -C DIR checkout PINNED_COMMIT
Its dev dependencies are installed with `npm install` from the npm registry when DIR/node_modules lacks jest.

The cluster is the compose file's, translated key by key (COMPOSE_SETTINGS): brokers 0, 1, 2; Kafka listeners on
the PLAINTEXT_HOST ports 9092, 9095, 9098, SSL_HOST 9093, 9096, 9099 and SASL_SSL_HOST 9094, 9097, 9100, all
advertised as localhost (kafkajs's testHelpers connect there; named listeners, issue 27 §3); the topic defaults,
ACL authorizer and SCRAM users of scripts/createScramCredentials.sh and server-jaas.conf; the topic
scripts/waitForKafka.js creates.

Jest runs as kafkajs's `yarn jest` does (KAFKA_VERSION=2.4, KAFKAJS_DEBUG_PROTOCOL_BUFFERS=1, its own
jest.config.js and 90 s per-test timeout) with `--json --outputFile`; bench/conformance/jest_report.py turns the
report into totals per file and each failure's cause, written between markers in docs/COMPATIBILITY.md.
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
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from bench.conformance.checkout import PinnedSource
from bench.conformance.jest_report import Rule, SuiteReport, classifier, failing_files, parse, rules_of, summary
from bench.conformance.runner import cli_shim, run_suite
from bench.peers._common import free_port, stop
from bench.sections import md_table, replace_section
from client.cli.cluster import _wait_kafka_listeners, start_command, wait_registered, write_cluster_secret

ROOT = Path(__file__).resolve().parents[2]
REPO_URL = "https://github.com/tulios/kafkajs"
PINNED_COMMIT = "55b0b416308b9e597a5a6b97b0a6fd6b846255dc"  # master after v2.2.4 (2.2.4 + docs), the newest
DEFAULT_MIRROR = Path("/work/.mirror/tulios+kafkajs/repo")
COMMIT_MARK = ".kafkajs-commit"  # written into a checkout made with git archive (which has no .git)
PINNED = PinnedSource("kafkajs", "tulios/kafkajs", PINNED_COMMIT, COMMIT_MARK)
KAFKA_VERSION = "2.4"  # package.json's default and the newest docker-compose file kafkajs tests against
SMOKE = ("src/producer/index.spec.js",)
# package.json's test:group:* scripts, the way kafkajs's CI splits its suite; run one after the other on the
# same cluster, each with its own JSON report, so a run cut short still reports the groups it finished. Jest
# matches them against absolute paths: they are prefixed with the checkout's (whose name may hold "src/").
GROUPS = (
    ("others", r"src/(?!(broker|admin|producer|consumer)/).*"),
    ("broker", r"src/broker/.*"),
    ("admin", r"src/admin/.*"),
    ("producer", r"src/producer/.*"),
    ("consumer", r"src/consumer/.*\.spec\.js"),
)
START_MARK = "<!-- kafkajs-suite:start -->"
END_MARK = "<!-- kafkajs-suite:end -->"

# docker-compose.2_4.yml, per broker: (KAFKA_BROKER_ID, PLAINTEXT_HOST, SSL_HOST, SASL_SSL_HOST ports).
BROKERS = ((0, 9092, 9093, 9094), (1, 9095, 9096, 9097), (2, 9098, 9099, 9100))
ADVERTISED_HOST = "localhost"  # KAFKA_ADVERTISED_LISTENERS: PLAINTEXT_HOST://localhost:9092, ...

# The compose file's KAFKA_* environment, as Kafka Lite keys (the compose key it stands for in the comment).
COMPOSE_SETTINGS = (
    "auto.create.topics.enable=true",  # KAFKA_AUTO_CREATE_TOPICS_ENABLE
    "default.replication.factor=2",  # KAFKA_DEFAULT_REPLICATION_FACTOR
    "num.partitions=2",  # KAFKA_NUM_PARTITIONS (KAFKA_DELETE_TOPIC_ENABLE: deletion is always on)
    "group.initial.rebalance.delay.ms=0",  # KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS
    "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",  # KAFKA_SASL_ENABLED_MECHANISMS
    "authorizer=acl",  # KAFKA_AUTHORIZER_CLASS_NAME kafka.security.auth.SimpleAclAuthorizer
    "allow.everyone.if.no.acl.found=true",  # KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND
)

# scripts/createScramCredentials.sh (testscram) and testHelpers/kafka/server-jaas.conf's PLAIN users
# (Kafka Lite checks PLAIN logins against the same user store).
USERS = (
    (
        "testscram",
        "SCRAM-SHA-256=[iterations=8192,password=testtestscram=256],SCRAM-SHA-512=[password=testtestscram=512]",
    ),
    ("test", "SCRAM-SHA-256=[password=testtest],SCRAM-SHA-512=[password=testtest]"),
    ("bob", "SCRAM-SHA-256=[password=bobbob]"),
    ("alice", "SCRAM-SHA-256=[password=alicealice]"),
)
# scripts/waitForKafka.js: `kafka-topics --create --topic test-topic-already-exists --replication-factor 1
# --partitions 2`, which some tests rely on.
SETUP_TOPICS = (("test-topic-already-exists", 2, 1),)

_SECURE_PORTS = "|".join(str(p) for _, _, ssl, sasl in BROKERS for p in (ssl, sasl))
SECURE_PORTS_CLOSED = "SSL/SASL_SSL ports (9093, 9094, ...) refused or failing"
NEGATIVE_OFFSETS = "a committed offset of -1/-2 is not stored (OffsetCommit of a negative offset; issue 27 §1)"
# The causes: (cause, what the pattern looks at: the error "message", the test's "name" or its file's "path",
# the pattern, and what Kafka Lite does differently as read off the tests and the brokers' answers). The first
# match wins; then the Kafka error a KafkaJSProtocolError names (kafka_error_rules); anything else is grouped
# by its first line (jest_report.classifier).
CAUSES: tuple[tuple[str, str, str, str], ...] = (
    (SECURE_PORTS_CLOSED, "message", rf"(localhost|127\.0\.0\.1):({_SECURE_PORTS})\b", ""),
    (
        SECURE_PORTS_CLOSED,
        "name",
        r"\b(SSL|SASL|sasl|ssl|SCRAM|PLAIN|OAUTHBEARER)\b",
        "kafkajs connects to 9093 (SSL) and 9094 (SASL_SSL, PLAIN and SCRAM users) of the same brokers; the ACL "
        "tests (createAcls, describeAcls, deleteAcls) log in there too.",
    ),
    (
        "no broker involved: a protocol encoding unit test whose gzip bytes differ from kafkajs's fixture here",
        "path",
        r"^src/protocol/",
        "",
    ),
    (
        "transactions, not served until their own issue: the transaction coordinator lookup (FindCoordinator "
        "key_type 1) or a transactional api fails, also in the setup of tests that only need a producer id",
        "name",
        r"(?i)\btransaction|\bEOS\b|txn|control batch",
        "",
    ),
    (
        NEGATIVE_OFFSETS,
        "name",
        r"recovers from offset out of range",
        "admin.resetOffsets commits -1/-2 and reads back the old offset; a consumer whose committed offset is past "
        "the log end gets OFFSET_OUT_OF_RANGE, commits its default (-2) as kafkajs's "
        "offsetManager.setDefaultOffset does, is refused and never consumes (the 90 s timeouts).",
    ),
    (
        "an idempotent produce with a wrong sequence is accepted (issue 27 §1)",
        "name",
        r"idempotent producer",
        "after a batch with sequences 0-2, a batch with firstSequence 1 was appended at offset 3 instead of "
        "getting OUT_OF_ORDER_SEQUENCE_NUMBER.",
    ),
    (
        "ListOffsets v0 is not served and its UNSUPPORTED_VERSION answer is not a v0 response",
        "name",
        r"ListOffsets v0",
        "the answer is only the correlation id and error 35; kafkajs's v0 decoder reads past its end (RangeError).",
    ),
    (
        "DescribeConfigs entries differ from Kafka's (keys, config_source, synonyms; issue 27 §1, §2)",
        "path",
        r"describeConfigs\.spec\.js$",
        "the full list of a topic's configs lacks keys Kafka 2.4 describes and Kafka 4 removed "
        "(message.format.version, message.downconversion.enable, message.timestamp.difference.max.ms; KIP-724, "
        "KIP-937); Kafka Lite describes Kafka 4's.",
    ),
    (
        "no broker involved: a timer test of kafkajs's own lock on a loaded machine",
        "path",
        r"^src/utils/lock\.spec\.js$",
        "the test holds a lock for 50 ms (setTimeout) and expects the waiter to have waited >= 50 ms by Date.now(); "
        "node's timers and clock can disagree by a millisecond on a busy machine (49 here, run 24, with other "
        "test runs on the two cores). No request is sent.",
    ),
    (
        "a timer race in kafkajs's own test: a reply it delays by 100 ms against a 50 ms request timeout",
        "name",
        r"respect the requestTimeout",
        "the test wraps the connection's processData in a 100 ms sleep and expects kafkajs's 50 ms timeout check "
        "(a setInterval every 50 ms that acts only once Date.now() - sentAt > 50) to fire first; the tick that "
        "can act and the sleep's end are both due about 100 ms after the send, and either may run first. Run "
        "alone, the file passed 2 of 3 times (2026-11-28) against the same brokers; the broker's part is an "
        "ApiVersions answer, the same in the passing runs.",
    ),
    (
        "a race in the test: the reassignment it lists had already finished",
        "path",
        r"listPartitionReassignments\.spec\.js$",
        "the test moves an empty partition (replicas [0, 2] -> [2, 1]) and expects ListPartitionReassignments to "
        "find the move still under way; here the new replica can catch up and the controller finish the move "
        "before the list request arrives, and the answer then names no topic (`response.topics[0]` undefined). "
        "Run alone twice in a row (2026-11-27) the file passed once and failed once.",
    ),
    (
        "test harness needs docker (scripts/addPartitions.sh, ...)",
        "message",
        r"docker|addPartitions\.sh",
        "the test adds partitions with docker exec kafka-topics; no broker is at fault. (Since 2026-11-29 the "
        "harness puts a docker shim on PATH that runs kl-topics instead: docker_shim.)",
    ),
    (
        "an api or version Kafka 2.4 serves is not served (KafkaJSServerDoesNotSupportApiKey)",
        "message",
        r"KafkaJSServerDoesNotSupportApiKey|does not support the requested API version",
        "DeleteRecords (21): admin.deleteTopicRecords and fetchOffsets after a deletion; "
        "AlterPartitionReassignments (45) for an unknown topic.",
    ),
    (
        "CreateTopics refused a topic the test needs (KafkaJSAggregateError: Topic creation errors)",
        "message",
        r"Topic creation errors",
        "the topic config message.timestamp.difference.max.ms (INVALID_CONFIG): Kafka 4 removed it (KIP-937; "
        "message.timestamp.before.max.ms and after.max.ms replace it), and refuses it too.",
    ),
    (NEGATIVE_OFFSETS, "message", r'(?m)^- +"offset": "-[12]",$', ""),
    ("test timed out (kafkajs's 90 s per test)", "message", r"Exceeded timeout of \d+ ?ms|Async callback was not", ""),
    (
        "Kafka error INVALID_REQUEST (42)",
        "received",
        r"(?!)",  # named by kafka_error_rules; here for its note
        "AlterConfigs on a BROKER resource (broker configs are static) and CreatePartitions with explicit "
        "assignments, where Kafka answers INVALID_REPLICA_ASSIGNMENT for a bad one.",
    ),
)
RULES, NOTES = rules_of(CAUSES)


def kafka_error_rules(dest: Path) -> list[Rule]:
    """A KafkaJSProtocolError carries only the message kafkajs keeps for a Kafka error code: name the code, from
    the checkout's own table (src/protocol/error.js)."""
    table = (dest / "src" / "protocol" / "error.js").read_text()
    entry = re.compile(r"type: '(\w+)',\s*code: (-?\d+),[^}]*?message:\s*'((?:[^'\\]|\\.)*)'", re.DOTALL)
    return [
        Rule(f"Kafka error {name} ({code})", re.compile(re.escape(message.replace("\\'", "'"))), on="received")
        for name, code, message in entry.findall(table)
    ]


def rules_for(dest: Path) -> list[Rule]:
    return [*RULES, *kafka_error_rules(dest)]


# --- kafkajs's checkout -----------------------------------------------------------------------------------


def install(dest: Path) -> None:
    """kafkajs's dev dependencies (jest 25, jest-circus, ...) from the npm registry, once."""
    if (dest / "node_modules" / ".bin" / "jest").exists():
        return
    if shutil.which("npm") is None:
        raise SystemExit("error: npm not found; apt-get install nodejs npm")
    print(f"installing kafkajs's dev dependencies in {dest} (npm install)...", file=sys.stderr)
    subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=dest, check=True)


# --- the cluster ------------------------------------------------------------------------------------------


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def kafka_tool(module: str, *args: str) -> None:
    subprocess.run([sys.executable, "-m", module, *args], check=True, stdout=subprocess.DEVNULL)


@contextlib.contextmanager
def compose_cluster(work: Path) -> Iterator[str]:
    """The three brokers of docker-compose.2_4.yml, set up as testWithKafka.sh sets Kafka up; yields the native
    bootstrap list. Brokers are stopped (SIGTERM, then SIGKILL) when the block ends."""
    busy = [p for b in BROKERS for p in b[1:] if not _port_free(p)]
    if busy:
        raise SystemExit(f"error: kafkajs's ports {busy} are in use (kafkajs's tests connect to fixed ports)")
    secret = write_cluster_secret(work)
    # SSL_HOST and SASL_SSL_HOST: kafkajs's clients do not verify the broker's certificate (rejectUnauthorized
    # false), so the brokers serve one of our own (deploy/tls/make-certs.sh), for localhost.
    certs = work / "certs"
    subprocess.run([str(ROOT / "deploy/tls/make-certs.sh"), str(certs), "broker", "127.0.0.1", "localhost"],
                   check=True, capture_output=True)  # fmt: skip
    native = {bid: free_port() for bid, *_ in BROKERS}
    peers = ",".join(f"{bid}@127.0.0.1:{port}" for bid, port in native.items())
    procs = []
    try:
        for bid, plaintext, ssl_port, sasl_port in BROKERS:
            overrides = [
                *COMPOSE_SETTINGS,
                f"kafka.port={plaintext}",
                f"kafka.advertised.host={ADVERTISED_HOST}",
                f"inter.broker.secret.file={secret}",
                # KAFKA_LISTENERS / KAFKA_ADVERTISED_LISTENERS: SSL_HOST and SASL_SSL_HOST next to PLAINTEXT_HOST
                # (the protocols: Kafka's default map for the names SSL and SASL_SSL).
                f"listeners=SSL://:{ssl_port},SASL_SSL://:{sasl_port}",
                f"advertised.listeners=SSL://{ADVERTISED_HOST}:{ssl_port},SASL_SSL://{ADVERTISED_HOST}:{sasl_port}",
                f"ssl.keystore.location={certs / 'broker.pem'}",
                f"ssl.truststore.location={certs / 'ca.pem'}",
            ]
            cmd = start_command(
                bid,
                native[bid],
                work / f"broker-{bid}",
                peers=peers,
                extra=[a for o in overrides for a in ("--override", o)],
            )
            log = open(work / f"broker-{bid}.log", "ab")  # noqa: SIM115 (the broker writes it until it stops)
            procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        bootstrap = ",".join(f"127.0.0.1:{p}" for p in native.values())
        if not wait_registered(bootstrap, len(BROKERS), 60) or not _wait_kafka_listeners(bootstrap, len(BROKERS), 60):
            raise SystemExit(f"error: the brokers did not form a cluster within 60 s; see {work}/broker-*.log")
        for user, spec in USERS:
            kafka_tool(
                "client.cli.configs", "--bootstrap-server", bootstrap, "--alter", "--entity-type", "users",
                "--entity-name", user, "--add-config", spec,
            )  # fmt: skip
        for topic, partitions, rf in SETUP_TOPICS:
            kafka_tool(
                "client.cli.topics", "--bootstrap-server", bootstrap, "--create", "--if-not-exists", "--topic", topic,
                "--partitions", str(partitions), "--replication-factor", str(rf),
            )  # fmt: skip
        yield bootstrap
    finally:
        for p in procs:
            stop(p, timeout=30)


def docker_shim(work: Path, bootstrap: str) -> Path:
    """A directory with `docker` and `kafka-topics` for kafkajs's scripts/addPartitions.sh (testHelpers'
    addPartitions): `docker ps ... -q` names the one "container", `docker exec ID bash -c CMD` runs CMD here, and
    `kafka-topics --zookeeper zookeeper:2181 --alter ...` is kl-topics with the same flags on our brokers. No
    docker is involved; what the test checks, a consumer rebalancing onto the new partitions, is the brokers'."""
    d = work / "docker-shim"
    d.mkdir(exist_ok=True)
    docker = d / "docker"
    docker.write_text(
        "#!/bin/sh\n"
        "# kafkajs's scripts run Kafka's tools in its docker container; here, Kafka Lite's (bench/conformance/"
        "kafkajs.py)\n"
        'case "$1" in\n'
        "  ps) echo kafkalite-kafka1 ;;\n"
        '  exec) shift 2; exec "$@" ;;\n'
        '  *) echo "docker shim: $1 is not supported" >&2; exit 1 ;;\n'
        "esac\n"
    )
    why = "kafkajs's scripts run Kafka's kafka-topics in its container; Kafka Lite's is kl-topics (bench/conformance)"
    cli_shim(d / "kafka-topics", "client.cli.topics", bootstrap, ("--zookeeper", "--bootstrap-server"), why)
    docker.chmod(0o755)
    return d


# --- jest ---------------------------------------------------------------------------------------------------


def run_jest(
    dest: Path, patterns: Sequence[str], out: Path, max_workers: int, timeout_s: float, shims: Path | None = None
) -> int | None:
    """kafkajs's `yarn jest` with a JSON report; jest's exit code (1 when any test failed), None if it was
    stopped at the timeout. `shims` goes first on PATH (docker_shim)."""
    env = {
        **os.environ,
        **({"PATH": f"{shims}{os.pathsep}{os.environ.get('PATH', '')}"} if shims is not None else {}),
        "KAFKA_VERSION": KAFKA_VERSION,
        "KAFKAJS_DEBUG_PROTOCOL_BUFFERS": "1",
        "NODE_ENV": "test",
        "HOST_IP": "127.0.0.1",
    }
    env.pop("OAUTHBEARER_ENABLED", None)  # kafkajs's default group: PLAIN and SCRAM, not OAUTHBEARER
    cmd = [
        str(dest / "node_modules" / ".bin" / "jest"),
        *patterns,  # before the options: --reporters takes every word after it
        "--ci",
        "--json",
        f"--outputFile={out}",
        f"--maxWorkers={max_workers}",
        "--forceExit",  # as kafkajs's CI: a client left open by a failed test must not hold the run
        "--reporters=default",  # not jest-junit
    ]
    print("$ " + " ".join(cmd), file=sys.stderr)
    return run_suite(cmd, dest, env, timeout_s, "jest")


# --- the table ------------------------------------------------------------------------------------------------


def render(report: SuiteReport, when: str, command: str, minutes: float) -> str:
    t = report.totals
    ran = t["passed"] + t["failed"]
    total = ran + t["skipped"]
    lines = [
        "## kafkajs's own suite",
        "",
        f"kafkajs [{PINNED_COMMIT[:12]}]({REPO_URL}/commit/{PINNED_COMMIT}) (2.2.4), its whole jest suite against a "
        "3-broker Kafka Lite cluster laid out as its docker-compose.2_4.yml (bench/conformance/kafkajs.py says how "
        "each setting maps): the PLAINTEXT (9092, 9095, 9098), SSL (9093, 9096, 9099) and SASL_SSL (9094, 9097, "
        "9100) Kafka listeners of each broker, with kafkajs's PLAIN and SCRAM users.",
        "",
        f"Run {when}, {minutes:.0f} min: `{command}`",
        "",
        f"**{t['passed']} passed, {t['failed']} failed, {t['skipped']} skipped** of {total} "
        f"tests in {t['files']} files ({t['files_not_run']} files failed to run); "
        f"{100 * t['passed'] / ran if ran else 0:.1f}% of the tests run pass.",
        "",
        md_table(["Area", "Passed", "Failed", "Skipped"], report.by_area()),
        "",
        "Files with failures:",
        "",
        md_table(
            ["File", "Passed", "Failed", "Skipped"],
            [
                (f"`{f.path}`", f.passed, f.failed or ("did not run" if f.error else 0), f.skipped)
                for f in failing_files(report)
            ],
        ),
        "",
        "### Failures by cause",
        "",
    ]
    for cause, fails in report.by_cause():
        lines.append(f"**{cause}** ({len(fails)})")
        lines.append("")
        if cause in NOTES:
            lines += [NOTES[cause], ""]
        for f in fails:
            lines.append(f"- `{f.path}` {f.test}: {summary(f.message)}".rstrip())
        lines.append("")
    return "\n".join(lines)


def rerender(jest_json: Path, dest: Path, doc: Path) -> int:
    """The table of an earlier run again (say, after RULES changed): its date, command and length are kept
    from the report it wrote next to jest.json."""
    results = json.loads(jest_json.read_text())
    header = (jest_json.parent / "kafkajs.md").read_text()
    run = re.search(r"^Run (.+?), (\d+) min: `(.*)`$", header, re.MULTILINE)
    if run is None:
        raise SystemExit(f"error: {jest_json.parent / 'kafkajs.md'} does not say when and how the run was made")
    report = parse(results, str(dest), classifier(rules_for(dest)))
    body = render(report, run[1], run[3], float(run[2]))
    (jest_json.parent / "kafkajs.md").write_text(body + "\n")
    replace_section(doc, START_MARK, END_MARK, body)
    print(f"wrote the table of {jest_json} into {doc}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kafkajs-dir", type=Path, default=Path(tempfile.gettempdir()) / f"kafkajs-{PINNED_COMMIT[:12]}")
    ap.add_argument("--mirror", type=Path, default=DEFAULT_MIRROR, help="git directory to check kafkajs out of")
    ap.add_argument("--smoke", action="store_true", help=f"only {', '.join(SMOKE)}; the doc is left alone")
    ap.add_argument("--max-workers", type=int, default=2, help="jest workers (each a client of the same cluster)")
    ap.add_argument("--timeout", type=float, default=4 * 3600, help="seconds for the whole jest run")
    ap.add_argument("--out", type=Path, default=Path("docs/COMPATIBILITY.md"))
    ap.add_argument("--work-dir", type=Path, default=None, help="broker data, logs and jest's JSON (default: temp)")
    ap.add_argument(
        "--from-json",
        type=Path,
        default=None,
        help="re-render the table from a run's jest.json (in its --work-dir) without running anything",
    )
    ap.add_argument("patterns", nargs="*", help="jest path patterns (default: the whole suite)")
    args = ap.parse_args(argv)
    # SIGTERM unwinds like ^C, so that jest and the brokers are stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.from_json:
        return rerender(args.from_json, args.kafkajs_dir.resolve(), args.out)
    dest = args.kafkajs_dir.resolve()
    PINNED.checkout(dest, args.mirror)
    install(dest)
    groups = (
        [("smoke", list(SMOKE))]
        if args.smoke
        else [("selected", args.patterns)]
        if args.patterns
        else [(name, ["^" + re.escape(f"{dest}/") + pattern]) for name, pattern in GROUPS]
    )
    work = (args.work_dir or Path(tempfile.mkdtemp(prefix="kafkajs-conformance-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    results: list[dict] = []
    missing: list[str] = []  # groups without a report: stopped at the timeout, or jest failed to start
    with compose_cluster(work) as bootstrap:
        shims = docker_shim(work, bootstrap)
        for name, patterns in groups:
            out = work / f"jest-{name}.json"
            left = args.timeout - (time.monotonic() - started)
            code = run_jest(dest, patterns, out, args.max_workers, left, shims) if left > 0 else None
            if code is None or not out.exists():
                missing.append(name)
                continue
            results += json.loads(out.read_text()).get("testResults", [])
    minutes = (time.monotonic() - started) / 60
    out = work / "jest.json"
    out.write_text(json.dumps({"testResults": results}))
    report = parse({"testResults": results}, str(dest), classifier(rules_for(dest)))
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    command = "python -m bench.conformance.kafkajs " + " ".join(sys.argv[1:] if argv is None else argv)
    body = render(report, when, command.strip(), minutes)
    if missing:
        body += f"\nNot run (stopped at --timeout or no report): the {', '.join(missing)} group(s).\n"
    (work / "kafkajs.md").write_text(body + "\n")
    t = report.totals
    print(f"kafkajs: {t['passed']} passed, {t['failed']} failed, {t['skipped']} skipped; "
          f"report {work / 'kafkajs.md'}, jest JSON {out}")  # fmt: skip
    if not args.smoke and not args.patterns and len(missing) < len(groups):
        replace_section(args.out, START_MARK, END_MARK, body)
        print(f"wrote the table into {args.out}")
    return 0 if t["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
