"""Physical ceilings for the benches: loopback TCP bandwidth (iperf3) and sequential fsynced disk writes."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time

from bench.peers._common import HOST, MB, free_port, need_binary, server, temp_dir

GIB = 1 << 30
BLOCK = 1 << 20


def loopback_bandwidth(seconds: int = 3) -> dict[str, float]:
    iperf3 = need_binary("iperf3", "iperf3")
    with temp_dir("limits-iperf3-") as d:
        port = free_port()
        with server([iperf3, "-s", "-1", "-B", HOST, "-p", str(port)], port, d, connect_probe=False):
            out = subprocess.run(
                [iperf3, "-c", HOST, "-p", str(port), "-J", "-t", str(seconds)],
                capture_output=True,
                text=True,
                timeout=seconds + 30,
                check=False,
            )
    data = json.loads(out.stdout or "{}")
    if out.returncode != 0 or "error" in data:
        raise RuntimeError(f"iperf3 failed ({out.returncode}): {data.get('error') or out.stderr.strip()}")
    bps = float(data["end"]["sum_received"]["bits_per_second"])
    return {"loopback_gbit_s": bps / 1e9, "loopback_mb_s": bps / 8 / MB}


def disk_write_bandwidth(data_dir: str, size: int = GIB) -> dict[str, float | str]:
    free = shutil.disk_usage(data_dir).free
    if free < 2 * size:
        raise RuntimeError(f"need {2 * size} free bytes in {data_dir}, have {free}")
    block = os.urandom(BLOCK)  # incompressible, in case the filesystem compresses
    fd, path = tempfile.mkstemp(prefix="limits-disk-", dir=data_dir)
    try:
        t0 = time.perf_counter()
        for _ in range(size // BLOCK):
            os.write(fd, block)
        os.fsync(fd)  # count the time to reach the device, not the page cache
        elapsed = time.perf_counter() - t0
    finally:
        os.close(fd)
        os.unlink(path)
    return {"disk_write_mb_s": size / elapsed / MB, "disk_dir": data_dir}


def run(data_dir: str | None = None) -> dict[str, float | str]:
    return {**loopback_bandwidth(), **disk_write_bandwidth(data_dir or tempfile.gettempdir())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data-dir", default=None, help="dir on the brokers' filesystem (default: TMPDIR)")
    print(json.dumps(run(ap.parse_args().data_dir), indent=2))


if __name__ == "__main__":
    main()
