"""A client's test runner (jest, pytest) as the conformance harnesses start it: in a process group of its own, so
that at the run's timeout, or when the harness is stopped (SIGTERM, ^C), the runner and every child it started go
with it (SIGKILL to the group)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path


def run_suite(
    cmd: Sequence[str], cwd: Path, env: Mapping[str, str] | None, timeout_s: float, name: str, log: Path | None = None
) -> int | None:
    """`cmd`'s exit code; None if it did not finish within `timeout_s`. With `log`, its output is appended there."""
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(open(log, "ab")) if log is not None else None
        proc = subprocess.Popen(
            list(cmd), cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT if out else None, start_new_session=True
        )
        try:
            return proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            print(f"{name} did not finish within {timeout_s:.0f} s: stopped", file=sys.stderr)
            return None
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def cli_shim(script: Path, module: str, bootstrap: str, drop: Sequence[str], why: str) -> None:
    """An executable `script` standing in for one of Kafka's tools (kafka-topics.sh, kafka-configs.sh) that a
    client's tests run: Kafka Lite's CLI `module` with the same flags, less the options in `drop` and their values
    (the tool's --bootstrap-server, --zookeeper, --command-config), on our `bootstrap` (the native listener,
    which our CLIs speak). `why` goes into its comment."""
    drops = "|".join(drop)
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(
        "#!/bin/sh\n"
        f"# {why}\n"
        f"export PYTHONPATH={Path(__file__).resolve().parents[2]}\n"
        "n=$#\n"
        'while [ "$n" -gt 0 ]; do\n'
        '  case "$1" in\n'
        f"    {drops}) shift 2; n=$((n - 2)) ;;\n"
        '    *) set -- "$@" "$1"; shift; n=$((n - 1)) ;;\n'
        "  esac\n"
        "done\n"
        f'exec {sys.executable} -m {module} --bootstrap-server {bootstrap} "$@"\n'
    )
    script.chmod(0o755)
