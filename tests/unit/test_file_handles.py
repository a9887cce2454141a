"""The logs' bounded cache of open files (broker/log/file_handles.py) and lazy segment opening."""

from __future__ import annotations

import errno
import os
import threading

import pytest

from broker.log.config import LogConfig
from broker.log.file_handles import FILE_HANDLES, CachedFile, FileHandleCache, create_file
from broker.log.log import Log
from tests.unit.test_log_support import batch, headers


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def files(tmp_path, n: int, cache: FileHandleCache) -> list[CachedFile]:
    out = []
    for i in range(n):
        p = tmp_path / f"f{i}"
        create_file(p)
        out.append(CachedFile(p, os.O_RDWR | os.O_APPEND, cache))
    return out


def test_nothing_is_opened_before_first_use(tmp_path):
    cache = FileHandleCache(4)
    fs = files(tmp_path, 10, cache)
    assert cache.open_count == 0 and not any(f.is_open for f in fs)
    with fs[0].fd() as fd:
        os.write(fd, b"x")
    assert cache.open_count == 1 and fs[0].is_open


def test_least_recently_used_descriptors_are_closed_beyond_the_cap(tmp_path):
    cache = FileHandleCache(3)
    fs = files(tmp_path, 6, cache)
    for f in fs[:3]:
        with f.fd():
            pass
    with fs[0].fd():  # f0 is now the most recently used: f1 goes first
        pass
    with fs[3].fd():
        pass
    assert [f.is_open for f in fs[:4]] == [True, False, True, True]
    for i, f in enumerate(fs):  # each write lands in its own file even though descriptors come and go
        with f.fd() as fd:
            os.write(fd, bytes([65 + i]))
        assert cache.open_count <= 3
    assert [(tmp_path / f"f{i}").read_bytes()[-1:] for i in range(6)] == [bytes([65 + i]) for i in range(6)]
    assert cache.opens >= 7  # f1, f2 ... were reopened


def test_a_pinned_descriptor_is_never_closed_under_its_user(tmp_path):
    cache = FileHandleCache(1)
    a, b, c = files(tmp_path, 3, cache)
    with a.fd() as fd_a:
        with b.fd():
            with c.fd():
                assert cache.open_count == 3  # all pinned: over the cap while in use
        os.write(fd_a, b"still mine")
        assert a.is_open
    assert cache.open_count == 1
    assert (tmp_path / "f0").read_bytes() == b"still mine"


def test_close_while_pinned_happens_at_the_last_unpin(tmp_path):
    cache = FileHandleCache(4)
    (f,) = files(tmp_path, 1, cache)
    with f.fd() as fd:
        f.close()  # retention deleting a segment while a flush thread fsyncs it
        os.fsync(fd)
        assert f.is_open
    assert not f.is_open and cache.open_count == 0
    with pytest.raises(OSError) as e:
        with f.fd():
            pass
    assert e.value.errno == errno.EBADF


def test_a_renamed_file_is_reopened_under_its_new_name(tmp_path):
    cache = FileHandleCache(1)
    a, b = files(tmp_path, 2, cache)
    with a.fd() as fd:
        os.write(fd, b"a")
    os.rename(a.path, tmp_path / "moved")
    a.renamed(tmp_path / "moved")
    with b.fd():  # evicts a
        pass
    with a.fd() as fd:
        os.write(fd, b"b")
    assert (tmp_path / "moved").read_bytes() == b"ab"


def test_threads_sharing_a_small_cache_never_write_to_the_wrong_file(tmp_path):
    cache = FileHandleCache(2)
    fs = files(tmp_path, 8, cache)

    def work(i: int) -> None:
        for _ in range(200):
            with fs[i].fd() as fd:
                os.write(fd, bytes([48 + i]))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(8):
        assert (tmp_path / f"f{i}").read_bytes() == bytes([48 + i]) * 200


@pytest.fixture
def small_cache():
    old = FILE_HANDLES.capacity
    FILE_HANDLES.set_capacity(8)
    yield FILE_HANDLES
    FILE_HANDLES.set_capacity(old)


def test_empty_partitions_hold_no_open_files(tmp_path):
    before = open_fds()
    logs = [Log(tmp_path / f"t-{p}", "t", p, LogConfig()) for p in range(200)]
    assert open_fds() - before == 0  # segment, index and time index files exist but are not open
    assert all((lg.dir / "00000000000000000000.log").exists() for lg in logs)
    assert all(lg.read(0, 1000) == b"" for lg in logs)
    assert open_fds() - before == 0
    for lg in logs:
        lg.close()


def test_many_partitions_with_data_stay_under_the_cap(tmp_path, small_cache):
    logs = [Log(tmp_path / f"t-{p}", "t", p, LogConfig.from_props({"index.interval.bytes": 0})) for p in range(40)]
    before = open_fds()
    for _ in range(3):
        for lg in logs:
            lg.append_as_leader(batch(2, value=b"v" * 20), 0)
            assert small_cache.open_count <= 8
    assert open_fds() - before <= 8
    for lg in logs:  # every log reads back its own three batches: no descriptor mixed up
        assert [h.base_offset for h in headers(lg.read(0, 10**6))] == [0, 2, 4]
        lg.flush()
    for p, lg in enumerate(logs):
        lg.close()
        reopened = Log(tmp_path / f"t-{p}", "t", p, LogConfig(), clean_shutdown=True)
        assert reopened.log_end_offset == 6
        reopened.close()
    assert small_cache.open_count <= 8
