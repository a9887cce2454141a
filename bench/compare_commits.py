"""Two commits of Kafka Lite in the same run: did a change make the broker or our client slower?

    .venv/bin/python -m bench.compare_commits OLD NEW [--rounds 3] [--num-records 1000000]

Each commit is checked out in a worktree of its own (under the system temp dir) and run from there
(PYTHONPATH, so the installed venv's dependencies serve both). Per round, for each commit in turn (the order
alternates between rounds, so drift on a noisy machine hits both alike): a fresh single broker, kl-perf
produce of --num-records 100-byte records at acks=1 into a 1-partition and an 8-partition topic, and kl-perf
consume of each; the broker's and the client's CPU seconds per million records come from /proc. Prints the
median msgs/s of each commit and the ratio NEW / OLD per figure, in a Markdown table. Nothing is written to
docs/BENCHMARKS.md: a section quoting it says so.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.peers._common import free_port, wait_port
from bench.sections import md_table

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ("produce 1p", "produce 8p", "consume 1p", "consume 8p")


def worktree(rev: str) -> tuple[str, Path]:
    sha = subprocess.run(["git", "rev-parse", rev], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    sha = sha.strip()
    path = Path(tempfile.gettempdir()) / f"kl-rev-{sha[:12]}"
    if not path.exists():
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(path), sha], cwd=ROOT, capture_output=True, check=True
        )
    return sha[:12], path


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_tool(tree: Path, module: str, args: list[str]) -> tuple[dict, float]:
    """python -m MODULE from `tree`; its JSON result and its CPU seconds (children included)."""
    out = Path(tempfile.mktemp(suffix=".json"))
    before = os.times()
    subprocess.run(
        [sys.executable, "-m", module, *args, "--json-out", str(out)],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        check=True,
        timeout=900,
    )
    after = os.times()
    result = json.loads(out.read_text())
    out.unlink()
    return result, (after.children_user - before.children_user) + (after.children_system - before.children_system)


def one(tree: Path, n: int) -> dict[str, tuple[float, float, float]]:
    """figure -> (msgs/s, broker CPU s, client CPU s) on a fresh broker of this tree."""
    data = Path(tempfile.mkdtemp(prefix="kl-cmp-"))
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(tree)}
    broker = subprocess.Popen(
        [sys.executable, "-m", "broker.cli", "start", "--id", "1", "--port", str(port), "--data-dir", str(data / "b")],
        cwd=tree,
        env=env,
        stdout=open(data / "broker.log", "wb"),  # noqa: SIM115 - the child owns it
        stderr=subprocess.STDOUT,
    )
    bootstrap = f"127.0.0.1:{port}"
    out: dict[str, tuple[float, float, float]] = {}
    try:
        wait_port(port, broker, data / "broker.log", 30)
        for parts in (1, 8):
            topic = f"cmp-{parts}"
            subprocess.run(
                [sys.executable, "-m", "client.cli.topics", "--bootstrap-server", bootstrap, "--create"]
                + ["--topic", topic, "--partitions", str(parts)],
                cwd=tree,
                env=env,
                capture_output=True,
                check=True,
            )
            b0 = cpu_seconds(broker.pid)
            r, client = run_tool(
                tree,
                "client.cli.perf",
                ["produce", "--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(n), "--acks", "1"],
            )
            out[f"produce {parts}p"] = (r["records_per_sec"], cpu_seconds(broker.pid) - b0, client)
            b0 = cpu_seconds(broker.pid)
            r, client = run_tool(
                tree,
                "client.cli.perf",
                ["consume", "--bootstrap-server", bootstrap, "--topic", topic, "--messages", str(n)],
            )
            out[f"consume {parts}p"] = (r["records_per_sec"], cpu_seconds(broker.pid) - b0, client)
    finally:
        broker.send_signal(signal.SIGTERM)
        broker.wait(30)
        shutil.rmtree(data, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--num-records", type=int, default=1_000_000)
    a = ap.parse_args(argv)
    trees = [worktree(a.old), worktree(a.new)]
    results: dict[str, list[dict]] = {sha: [] for sha, _ in trees}
    for i in range(a.rounds):
        for sha, tree in trees if i % 2 == 0 else reversed(trees):
            r = one(tree, a.num_records)
            results[sha].append(r)
            print(f"round {i + 1} {sha}: " + ", ".join(f"{k} {v[0]:,.0f}" for k, v in r.items()), flush=True)
    (old, _), (new, _) = trees
    per_m = a.num_records / 1e6

    def med(sha: str, fig: str, i: int) -> float:
        return statistics.median(r[fig][i] for r in results[sha])

    rows = []
    for fig in FIGURES:
        ratios = [n[fig][0] / o[fig][0] for o, n in zip(results[old], results[new])]
        rows.append(
            (
                fig,
                f"{med(old, fig, 0):,.0f}",
                f"{med(new, fig, 0):,.0f}",
                f"{statistics.median(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f})",
                f"{med(old, fig, 1) / per_m:.2f} / {med(new, fig, 1) / per_m:.2f}",
                f"{med(old, fig, 2) / per_m:.2f} / {med(new, fig, 2) / per_m:.2f}",
            )
        )
    print(
        f"\n`.venv/bin/python -m bench.compare_commits {a.old} {a.new} --rounds {a.rounds}` "
        f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}), one broker, acks=1, "
        f"{a.num_records:,} records of 100 B, median of {a.rounds} rounds (ratio: min–max over rounds)\n"
    )
    print(
        md_table(
            [
                "Figure",
                f"{old} msgs/s",
                f"{new} msgs/s",
                "new / old",
                "broker CPU s per M (old / new)",
                "client CPU s per M (old / new)",
            ],
            rows,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
