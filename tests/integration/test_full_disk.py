"""A full disk: produce fails with KAFKA_STORAGE_ERROR, the broker stays up, the log stays whole, and
writes resume once space is freed. Uses a small tmpfs, so it needs root (CI runs as root)."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from client.admin import NewTopic
from client.consumer import TopicPartition
from client.producer import ProduceError
from client.sync import Admin, Consumer, Producer
from net.errors import ErrorCode
from tests.conftest import BrokerProcess

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def small_fs(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], check=True)
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def produce_until_error(bootstrap: str, acked: list[int], rounds: int) -> ProduceError | None:
    def on_delivery(err, md):
        if err is None:
            acked.append(md.offset)

    with Producer(bootstrap, linger_ms=0, batch_size=16384, delivery_timeout_ms=5000, retries=1) as p:
        for r in range(rounds):
            for i in range(100):
                p.send("fill", f"{r:05d}-{i:03d}".encode() + b"x" * 200, on_delivery=on_delivery)
            try:
                p.flush(30)
            except ProduceError as e:
                return e
    return None


def read_all(bootstrap: str) -> list:
    got: list = []
    with Consumer(bootstrap, auto_offset_reset="earliest", max_poll_records=100000) as c:
        tp = TopicPartition("fill", 0)
        c.assign([tp])
        end = c.list_offsets([tp], -1)[tp]
        deadline = time.monotonic() + 30
        while len(got) < end and time.monotonic() < deadline:
            got.extend(c.poll(1000))
    return got


def test_full_disk_is_an_error_not_a_corruption(small_fs):
    reserve = small_fs / "reserve"
    reserve.write_bytes(b"\0" * 1024 * 1024)
    b = BrokerProcess(small_fs / "data")
    b.start()
    try:
        with Admin(b.bootstrap) as admin:
            admin.create_topics([NewTopic("fill", 1, 1)])
        acked: list[int] = []
        err = produce_until_error(b.bootstrap, acked, rounds=1000)
        assert err is not None, "a 4 MiB filesystem must fill up"
        assert err.code == ErrorCode.KAFKA_STORAGE_ERROR, err
        assert b.proc.poll() is None, "the broker must survive a full disk"
        assert len(acked) > 1000

        reserve.unlink()  # free space: the same process writes again without a restart
        more: list[int] = []
        assert produce_until_error(b.bootstrap, more, rounds=5) is None
        assert len(more) == 500

        got = read_all(b.bootstrap)
        offsets = [r.offset for r in got]
        assert offsets == list(range(len(offsets))), "no gap and no half batch in the log"
        assert set(acked) | set(more) <= set(offsets), "every acknowledged record is readable"

        b.kill()  # and the log recovers cleanly after a crash on a disk that was full
        b.start()
        assert [r.offset for r in read_all(b.bootstrap)] == offsets
        assert "KAFKA_STORAGE_ERROR" in b.logs()
    finally:
        b.cleanup()
