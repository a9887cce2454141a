"""What a user saw on a busy 2-core machine (issue 24), as a test: a stressed 3-broker cluster (a CPU hog, two
acks=all producers) with, running together, the streaming source's driver and tasks (pipeline/stream.py's reader:
initialOffset / latestOffset / partitions / read, what Spark calls, without Spark's start-up), a second poller of
ListOffsets latest through pipeline's BrokerView, the console's ClusterWatcher, a /metrics scraper and a consumer
group; the leader of a partition is killed and restarted midway, as false fencing on a loaded machine moves leaders.

It asserts what each of them saw:
- the latest offset of a partition never goes back (KIP-207 at the new leader, leader epochs on ListOffsets); the
  streaming reader never fails with "its offsets went back";
- the high watermark is at most the log end in every /metrics scrape of every replica, and wherever the console
  shows both;
- every micro-batch range [start, end) is read exactly (every offset once, none outside), and at the end a range
  reads the same from the leader and from every replica's local files that committed it.
Bounded to about 25 s of load."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable

import pytest

from client.dashboard.watcher import ClusterWatcher, parse_metrics
from client.sync import Consumer
from net.errors import KafkaLiteError
from pipeline.arrow_reader import arrow_schema, raw_arrow_batches
from pipeline.remote import LATEST, BrokerView, OffsetRange, local_data_dirs, local_slices, read_range
from pipeline.segments import LogReadError
from tests.integration.cluster_harness import LoadProducer, wait_until

pytest.importorskip("pyspark")  # the streaming reader's base classes (the project's set-up installs pyspark)
from pyspark.sql.streaming.datasource import ReadAllAvailable  # noqa: E402

from pipeline.stream import KafkaLiteStreamReader, from_json  # noqa: E402

TOPIC = "tweets"
PARTITIONS = 3
CLIENT_OPTIONS = {
    "kafka.request.timeout.ms": "5000",
    "fetchoffset.numretries": "20",  # retriable answers (a failover, OFFSET_NOT_AVAILABLE) are asked again
    "fetchoffset.retryintervalms": "200",
}


class Observed:
    """What the concurrent observers saw; each violation is one line naming who saw what."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.violations: list[str] = []
        self.latest: dict[tuple[str, int], int] = {}
        self.counts: dict[str, int] = {}
        self.errors: list[str] = []

    def bad(self, text: str) -> None:
        with self.lock:
            self.violations.append(text)

    def count(self, what: str, n: int = 1) -> None:
        with self.lock:
            self.counts[what] = self.counts.get(what, 0) + n

    def latest_seen(self, who: str, offsets: dict[tuple[str, int], int]) -> None:
        with self.lock:
            for tp, off in offsets.items():
                prev = self.latest.get((who, *tp))  # type: ignore[call-overload]
                if prev is not None and off < prev:
                    self.violations.append(f"{who}: latest offset of {tp[0]}-{tp[1]} went back from {prev} to {off}")
                self.latest[(who, *tp)] = max(off, prev or 0)  # type: ignore[call-overload]


def loop_until(stop: threading.Event, obs: Observed, who: str, body: Callable[[], None], pause: float) -> None:
    while not stop.is_set():
        try:
            body()
        except KafkaLiteError as e:  # retriable trouble during the failover: noted, not a violation
            with obs.lock:
                obs.errors.append(f"{who}: {e}")
        except Exception as e:  # noqa: BLE001 - anything else ends this observer, and the test fails on it
            obs.bad(f"{who} failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            return
        stop.wait(pause)


def read_offsets(reader: KafkaLiteStreamReader, part) -> list[int]:  # type: ignore[no-untyped-def]
    return [o for b in reader.read(part) for o in b.column("offset").to_pylist()]


def stream_job(stop: threading.Event, obs: Observed, bootstrap: str) -> None:
    """The streaming query's driver and tasks: every trigger's range read, each checked to be exact."""
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": TOPIC,
        "startingOffsets": "earliest",
        **CLIENT_OPTIONS,
    }
    reader = KafkaLiteStreamReader(options)
    start = reader.initialOffset()

    def trigger() -> None:
        nonlocal start
        end = reader.latestOffset(start, ReadAllAvailable())
        obs.latest_seen("streaming reader", from_json(end))
        try:
            parts = reader.partitions(start, end)
        except LogReadError as e:
            obs.bad(f"streaming reader: {e}")
            start = end  # go on, to see what else happens
            return
        for part in parts:
            r: OffsetRange = part.value
            got = read_offsets(reader, part)
            if got != list(range(r.start, r.end)):
                obs.bad(
                    f"streaming reader: {r.name} [{r.start}, {r.end}) read {len(got)} offsets {got[:3]}..{got[-3:]}"
                )
            obs.count("streamed", len(got))
        obs.count("triggers")
        start = end

    try:
        loop_until(stop, obs, "streaming reader", trigger, 0.3)
    finally:
        reader.stop()


def offsets_poller(stop: threading.Event, obs: Observed, bootstrap: str) -> None:
    view = BrokerView({"kafka.bootstrap.servers": bootstrap, **CLIENT_OPTIONS})
    tps = [(TOPIC, p) for p in range(PARTITIONS)]
    try:
        loop_until(stop, obs, "BrokerView", lambda: obs.latest_seen("BrokerView", view.offsets(tps, LATEST)), 0.02)
    finally:
        view.close()


def metrics_scraper(stop: threading.Event, obs: Observed, urls: dict[int, str]) -> None:
    def scrape() -> None:
        for bid, url in urls.items():
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    m = parse_metrics(r.read().decode())
            except OSError:
                continue  # a killed broker
            ends = {(s["topic"], s["partition"]): v for s, v in m.get("kafkalite_log_end_offset", [])}
            for s, hw in m.get("kafkalite_high_watermark", []):
                end = ends.get((s["topic"], s["partition"]))
                if end is not None and hw > end:
                    obs.bad(
                        f"/metrics of broker {bid}: {s['topic']}-{s['partition']} high watermark {hw} > log end {end}"
                    )
            obs.count("scrapes")

    loop_until(stop, obs, "scraper", scrape, 0.1)


def console(stop: threading.Event, obs: Observed, bootstrap: str) -> None:
    async def run() -> None:
        w = ClusterWatcher(bootstrap, interval_s=0.5)
        await w.start()
        seen = 0
        try:
            while not stop.is_set():
                seen = await w.wait_change(seen, 1.0)
                for t in w.snapshot.get("topics", []):
                    for p in t["partitions"]:
                        hw, end = p.get("high_watermark"), p.get("log_end")
                        if hw is not None and end is not None and hw > end:
                            obs.bad(f"console: {t['name']}-{p['partition']} high watermark {hw} > log end {end}")
                        if t["name"] == TOPIC and hw is not None and end is not None:
                            obs.count("console rows")
        finally:
            await w.stop()

    asyncio.run(run())


def group_consumer(stop: threading.Event, obs: Observed, bootstrap: str) -> None:
    with Consumer(bootstrap, group_id="stress", auto_offset_reset="earliest", request_timeout_ms=5000) as c:
        c.subscribe([TOPIC])
        loop_until(stop, obs, "group consumer", lambda: obs.count("consumed", len(c.poll(300))), 0)


@pytest.mark.timeout(240)
@pytest.mark.serial  # its CPU hog would slow the other worker's tests too
def test_under_load_latest_offsets_never_go_back_and_ranges_are_read_exactly(cluster_factory):
    # High watermarks checkpointed every 0.5 s (5 s by default), so replicas' files are read at the end.
    h = cluster_factory(3, overrides=["replica.high.watermark.checkpoint.interval.ms=500"])
    h.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
    bootstrap = h.bootstrap()
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    producers = [LoadProducer(bootstrap, TOPIC, f"p{i}", rate_sleep=0.001).start() for i in range(2)]
    obs, stop = Observed(), threading.Event()
    urls = {b.id: f"http://{b.host}:{b.metrics_port}/metrics" for b in h.brokers.values()}
    observers = [
        threading.Thread(target=fn, args=(stop, obs, *args), name=fn.__name__, daemon=True)
        for fn, args in (
            (stream_job, (bootstrap,)),
            (offsets_poller, (bootstrap,)),
            (metrics_scraper, (urls,)),
            (console, (bootstrap,)),
            (group_consumer, (bootstrap,)),
        )
    ]
    try:
        for t in observers:
            t.start()
        running = lambda: obs.violations or (obs.counts.get("triggers", 0) >= 3 and obs.counts.get("consumed"))  # noqa: E731
        wait_until(running, 60, "observers running")
        time.sleep(2)
        victim = next(p.leader for p in h.describe(TOPIC) if p.partition == 0)
        h.kill(victim)  # leaders move, as when a loaded broker is fenced
        wait_until(lambda: all(p.leader not in (victim, -1) for p in h.describe(TOPIC)), 30, "leaders moved")
        time.sleep(2)
        h.brokers[victim].start()  # it comes back with its checkpointed high watermarks and catches up
        h.wait_isr_contains(TOPIC, victim, timeout=60)
        time.sleep(2)
    finally:
        stop.set()
        for t in observers:
            t.join(30)
        for p in producers:
            p.stop(10)
        hog.kill()
        hog.wait(10)
    print("observed:", obs.counts, f"{len(obs.errors)} retriable errors", obs.errors[:5])
    kinds: dict[str, list[str]] = {}
    for v in obs.violations:
        kinds.setdefault(v.split(":")[0], []).append(v)
    for who, vs in kinds.items():
        print(f"VIOLATIONS by {who}: {len(vs)}, e.g. {vs[:3]}")
    assert obs.violations == [], obs.counts
    assert not any(t.is_alive() for t in observers)
    for what in ("triggers", "streamed", "scrapes", "console rows", "consumed"):
        assert obs.counts.get(what, 0) > 0, what
    assert all(p.stats.acked for p in producers)

    # A planned range of each partition reads the same, exactly, from the leader and from every replica's files.
    options = {"kafka.bootstrap.servers": bootstrap, **CLIENT_OPTIONS}
    ends = h.high_watermarks(TOPIC, PARTITIONS)
    for p, end in ends.items():
        r = OffsetRange(TOPIC, p, max(0, end // 3 - 7), end)
        assert offsets_read(r, options, prefer_local=False) == list(range(r.start, r.end))
        for b in h.brokers.values():
            local = {**options, "path": str(b.data_dir)}
            # Once its checkpointed high watermark covers the range, each replica's files serve it.
            dirs = local_data_dirs(local)
            wait_until(lambda r=r, dirs=dirs: local_slices(r, dirs), 20, f"broker {b.id}'s checkpoint")
            assert offsets_read(r, local, prefer_local=True) == list(range(r.start, r.end)), f"broker {b.id} files"


def offsets_read(r: OffsetRange, options: dict, prefer_local: bool) -> list[int]:
    chunks = read_range(r, options, True, prefer_local)
    return [o for b in raw_arrow_batches(r.topic, r.partition, chunks, r.start, r.end, False, arrow_schema(False))
            for o in b.column("offset").to_pylist()]  # fmt: skip
