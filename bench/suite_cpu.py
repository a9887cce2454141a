"""Where the suite's CPU goes: `.ci/run` on a fresh clone under BSD process accounting, CPU seconds by process kind.

Issue 26 §5 wants the whole `.ci/run` under ten minutes on two cores, and it is CPU-bound, so the question is
which processes spend the CPU. The kernel's process accounting (`accton`, Debian's acct package, root) records
every process's CPU when it exits, including the ones no test waits for (brokers, JVMs, Spark's forked Python
workers). Its command name is the executable's, "python" for most of ours, so a `sitecustomize.py` written into
the clone renames each Python process after what it runs (`m:broker.cli`, `s:kl-topics`, `py-c` for xdist's
workers) before anything else runs.

    sudo python -m bench.suite_cpu [--dir /tmp/kl-suite-cpu] [--top 30]

Prints the run's exit status and wall time, then CPU-s, process count and CPU-s per process by kind.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

TAGGER = '''"""Measurement only (bench/suite_cpu.py): name this process after what it runs, for process accounting."""

import ctypes
import os
import sys


def _tag() -> str | None:
    argv = list(getattr(sys, "orig_argv", []))
    a = argv[1:]
    while a:
        x = a.pop(0)
        if x == "-m" and a:
            return "pytest" if a[0] == "pytest" else "m:" + a[0]
        if x == "-c":
            return "py-c"
        if x.startswith("-"):
            continue
        return "s:" + os.path.basename(x)
    return None


try:
    _t = _tag()
    if _t:
        ctypes.CDLL(None).prctl(15, _t[:15].encode(), 0, 0, 0)  # PR_SET_NAME: the name accounting records
except Exception:
    pass
'''

LINE = re.compile(r"^(.{16}).*?\s([\d.]+) secs")


def cpu_by_kind(pacct: Path) -> tuple[collections.Counter[str], collections.Counter[str]]:
    """(CPU-s, processes) per command name recorded in `pacct`."""
    out = subprocess.run(["lastcomm", "-f", str(pacct)], capture_output=True, text=True, check=True).stdout
    cpu: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    for line in out.splitlines():
        m = LINE.match(line)
        if m:
            name = m.group(1).strip()
            cpu[name] += float(m.group(2))
            count[name] += 1
    return cpu, count


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=Path("/tmp/kl-suite-cpu"), help="where to clone (replaced)")
    ap.add_argument("--top", type=int, default=30, help="process kinds to list")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("error: process accounting needs root", file=sys.stderr)
        return 2
    if shutil.which("accton") is None:
        subprocess.run(["apt-get", "install", "-y", "-qq", "acct"], check=True, capture_output=True)
    shutil.rmtree(args.dir, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", str(ROOT), str(args.dir)], check=True)
    (args.dir / "sitecustomize.py").write_text(TAGGER)
    pacct = args.dir.parent / f"{args.dir.name}.pacct"
    pacct.write_bytes(b"")
    env = {**os.environ, "CI": "true", "PYTHONPATH": str(args.dir)}
    subprocess.run(["accton", str(pacct)], check=True, capture_output=True)
    start = time.monotonic()
    try:
        rc = subprocess.run(["bash", ".ci/run"], cwd=args.dir, env=env, stdout=subprocess.DEVNULL).returncode
    finally:
        subprocess.run(["accton", "off"], check=False, capture_output=True)
    wall = time.monotonic() - start
    cpu, count = cpu_by_kind(pacct)
    print(f".ci/run exit {rc}, {wall:.0f} s wall, {sum(cpu.values()):.0f} CPU-s in {sum(count.values())} processes")
    print(f"{'CPU-s':>8} {'procs':>6} {'each':>6}  kind")
    for name, seconds in cpu.most_common(args.top):
        print(f"{seconds:8.1f} {count[name]:6d} {seconds / count[name]:6.2f}  {name}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
