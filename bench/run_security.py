"""What TLS and SASL cost (issue 14 §9): produce and consume throughput over SASL_SSL (SCRAM-SHA-256, TLS 1.3)
versus PLAINTEXT, on 1 broker and on 3 brokers (RF=3, acks=all, brokers talking TLS to each other), with
kl-perf (our client) in the same run, median of --runs, written to the "TLS and SASL" section of
docs/BENCHMARKS.md. Target: TLS costs at most 30% of plaintext throughput.

    .venv/bin/python -m bench.run_security --runs 3 --num-records 300000
"""

from __future__ import annotations

import contextlib
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from bench.peers._common import HOST, free_port, stop, wait_port
from bench.sections import bench_parser, md_table, median_range, replace_section
from client.cli.cluster import start_command, write_cluster_secret

ROOT = Path(__file__).resolve().parent.parent
START, END = "<!-- security:start -->", "<!-- security:end -->"
MODES = ("PLAINTEXT", "SASL_SSL")
TARGET = 0.30  # TLS may cost at most this share of plaintext throughput
PARTITIONS = 3


def tool(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def make_certs(d: Path) -> Path:
    subprocess.run([str(ROOT / "deploy/tls/make-certs.sh"), str(d), "broker", HOST], check=True, capture_output=True)
    return d


def broker_overrides(mode: str, certs: Path) -> list[str]:
    if mode == "PLAINTEXT":
        return []
    jaas = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="b";'
    return [
        "security.protocol=SASL_SSL",
        "sasl.enabled.mechanisms=SCRAM-SHA-256",
        f"sasl.jaas.config={jaas}",
        f"ssl.keystore.location={certs / 'broker.pem'}",
        f"ssl.truststore.location={certs / 'ca.pem'}",
    ]


def client_props(mode: str, certs: Path, d: Path) -> Path:
    p = d / f"{mode}.properties"
    if mode == "PLAINTEXT":
        p.write_text("security.protocol=PLAINTEXT\n")
    else:
        p.write_text(
            "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\nsasl.username=admin\n"
            f"sasl.password=admin-secret\nssl.ca.location={certs / 'ca.pem'}\n"
        )
    return p


@contextlib.contextmanager
def cluster(n: int, mode: str, certs: Path, work: Path) -> Iterator[str]:
    """n brokers of one cluster in `mode`, stopped on exit; yields the bootstrap list."""
    ports = [free_port() for _ in range(n)]
    peers = ",".join(f"{i + 1}@{HOST}:{p}" for i, p in enumerate(ports)) if n > 1 else None
    scram = ["--add-scram", "SCRAM-SHA-256=[name=admin,password=admin-secret]"]
    scram += ["--add-scram", "SCRAM-SHA-256=[name=broker,password=b]"]
    work.mkdir(parents=True, exist_ok=True)
    overrides = broker_overrides(mode, certs)
    if mode == "PLAINTEXT":  # as kl-cluster up runs an open cluster: brokers prove the cluster secret
        overrides.append(f"inter.broker.secret.file={write_cluster_secret(work).resolve()}")
    extra = [x for o in overrides for x in ("--override", o)] + scram
    procs = []
    logs = []
    try:
        for i, port in enumerate(ports):
            d = work / f"{mode}-{n}-{i + 1}"
            logs.append(d.with_suffix(".log"))
            with open(logs[-1], "wb") as log:
                cmd = start_command(i + 1, port, d, host=HOST, peers=peers, extra=extra)
                procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT))
        for port, proc, log_path in zip(ports, procs, logs):
            wait_port(port, proc, log_path)
        yield ",".join(f"{HOST}:{p}" for p in ports)
    finally:
        for proc in procs:
            stop(proc)


def perf(args: list[str]) -> float:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        r = subprocess.run(
            [tool("kl-perf"), *args, "--json-out", out.name], capture_output=True, text=True, timeout=600
        )
        if r.returncode != 0:
            raise RuntimeError(f"kl-perf {args[0]} failed: {r.stderr.strip()[-400:]}")
        return float(json.loads(Path(out.name).read_text())["records_per_sec"])


def measure(n: int, mode: str, records: int, certs: Path, work: Path) -> tuple[float, float]:
    work.mkdir(parents=True, exist_ok=True)
    props = client_props(mode, certs, work)
    with cluster(n, mode, certs, work) as bootstrap:
        deadline = time.monotonic() + 60
        while True:  # the cluster is up once a topic can be created
            r = subprocess.run(
                [tool("kl-topics"), "--bootstrap-server", bootstrap, "--command-config", str(props), "--create",
                 "--topic", "perf", "--partitions", str(PARTITIONS), "--replication-factor", str(n)],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            if r.returncode == 0:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"cannot create the topic: {r.stderr.strip()}")
            time.sleep(0.5)
        common = ["--bootstrap-server", bootstrap, "--command-config", str(props), "--topic", "perf"]
        produce = perf(["produce", *common, "--num-records", str(records), "--record-size", "100", "--acks", "all"])
        consume = perf(["consume", *common, "--messages", str(records), "--timeout-ms", "30000"])
    return produce, consume


def main() -> None:
    ap = bench_parser(__doc__, 300_000)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kl-bench-security-"))
    results: dict[tuple[int, str], list[tuple[float, float]]] = {}
    try:
        certs = make_certs(work / "certs")
        for run in range(args.runs):
            for n in (1, 3):
                for mode in MODES:  # interleaved: both modes see the same machine load
                    records = args.num_records if n == 1 else args.num_records // 2
                    p, c = measure(n, mode, records, certs, work / f"run{run}")
                    results.setdefault((n, mode), []).append((p, c))
                    print(f"run {run + 1}: {n} broker(s) {mode}: produce {p:,.0f}/s, consume {c:,.0f}/s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = []
    verdicts = []
    for n in (1, 3):
        plain, tls = results[(n, "PLAINTEXT")], results[(n, "SASL_SSL")]
        for i, what in enumerate(("produce", "consume")):
            p_med = statistics.median(r[i] for r in plain)
            t_med = statistics.median(r[i] for r in tls)
            cost = 1 - t_med / p_med
            ok = "MET" if cost <= TARGET else "MISSED"
            verdicts.append(ok)
            rows.append([
                f"{n} broker{'s, RF=3' if n > 1 else ''}", what,
                median_range([r[i] for r in plain]), median_range([r[i] for r in tls]),
                f"{t_med / p_med:.2f}", f"{cost:.0%} ({ok})",
            ])  # fmt: skip
    body = "\n".join(
        [
            "## TLS and SASL (issue 14 §9)",
            "",
            f"`.venv/bin/python -m bench.run_security --runs {args.runs} --num-records {args.num_records}` "
            f"({time.strftime('%Y-%m-%d')}): kl-perf produce (100-byte records, acks=all) then consume, "
            f"{args.num_records:,} records on 1 broker and {args.num_records // 2:,} on 3 brokers (RF=3, "
            f"{PARTITIONS} partitions), PLAINTEXT and SASL_SSL (SCRAM-SHA-256 login, TLS on every connection, "
            "brokers replicating over TLS) interleaved in the same run; records/s, median (min-max) of "
            f"{args.runs}. Target: TLS costs at most {TARGET:.0%} of plaintext throughput.",
            "",
            md_table(["cluster", "", "PLAINTEXT", "SASL_SSL", "ratio", "cost"], rows),
        ]
    )
    replace_section(args.out, START, END, body)
    print(body)
    if "MISSED" in verdicts:
        print("target missed: see the cost column", file=sys.stderr)


if __name__ == "__main__":
    main()
