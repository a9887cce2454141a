"""pipeline/spark_daemon.py: the modules it imports before PySpark's daemon forks must start no thread (a fork
copies only the forking thread), and a Spark job's workers run under it."""

from __future__ import annotations

import subprocess
import sys


def test_the_preloaded_modules_start_no_thread():
    code = (
        "from pipeline import spark_daemon as d; import sys; "
        "ok = d.preload(); heavy = ('pyarrow', 'numpy', 'pandas', 'numba'); "
        "print(ok, d.os_threads(), sorted(m for m in heavy if m in sys.modules))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "1", "[]"], r.stdout


def test_a_module_that_starts_a_thread_makes_it_unsafe():
    code = (
        "import threading, time; from pipeline import spark_daemon as d; "
        "threading.Thread(target=time.sleep, args=(5,), daemon=True).start(); print(d.preload(()))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "False", r.stderr
