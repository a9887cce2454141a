"""The Spark source reads exactly the offsets it planned (issue 24: `kl-spark stats --bootstrap-server` planned
tweets-0 up to 20,853 and counted 22,060): the plan kl-spark prints is the one Spark runs, and a range [start, end)
is cut exactly, also where a batch straddles its ends, from the leader and from a local replica's files.

No Spark here: the same driver and task functions Spark calls (pipeline/remote.py, pipeline/arrow_reader.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from client.admin import NewTopic
from client.sync import Admin, Producer
from pipeline import options as opt
from pipeline.arrow_reader import arrow_schema, raw_arrow_batches
from pipeline.remote import OffsetRange, local_data_dirs, local_slices, plan_remote_read, read_range
from tests.conftest import BrokerProcess

# A hang guard, well above a loaded machine's time: a timeout inside a py4j call leaves the Spark session's
# gateway unusable, so every later test of the module would fail with it.
pytestmark = pytest.mark.timeout(300)

TOPIC = "exact"


def produce_batches(bootstrap: str, batches: int, per_batch: int = 10) -> None:
    with Producer(bootstrap, acks="all", linger_ms=1000, batch_size=1 << 20) as p:
        for _ in range(batches):
            for i in range(per_batch):
                p.send(TOPIC, b"v%d" % i)
            p.flush()  # one batch of `per_batch` records


def offsets_read(r: OffsetRange, options: dict, prefer_local: bool, headers: bool) -> list[int]:
    chunks = read_range(r, options, True, prefer_local)
    out: list[int] = []
    for b in raw_arrow_batches(r.topic, r.partition, chunks, r.start, r.end, headers, arrow_schema(headers)):
        out += b.column("offset").to_pylist()
    return out


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("exact") / "data-1")
    try:
        b.start()
        with Admin(b.bootstrap) as a:
            a.create_topics([NewTopic(TOPIC, 1, 1)])
        produce_batches(b.bootstrap, 10)
        yield b
    finally:
        b.cleanup()


def test_the_printed_plan_is_the_one_every_planning_reads(broker):
    options = {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": TOPIC}
    plan = plan_remote_read(options)
    (start, end) = plan.spans[(TOPIC, 0)]
    assert start == 0 and end >= 100
    pinned = opt.pin_offsets(options, plan.spans)
    produce_batches(broker.bootstrap, 3)  # what Spark's start took: the cluster moved on
    assert plan_remote_read(options).spans == {(TOPIC, 0): (0, end + 30)}  # "latest" again: another plan
    again = plan_remote_read(pinned)
    assert again.spans == plan.spans and again.ranges == plan.ranges


@pytest.mark.parametrize("headers", [False, True], ids=["columnar", "with-headers"])
def test_a_range_is_read_exactly_from_the_leader_and_from_local_files(broker, headers):
    options = {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": TOPIC, "path": str(broker.data_dir)}
    # Both ends inside 10-record batches: [3, 95) starts in the first batch and ends in the last.
    r = OffsetRange(TOPIC, 0, 3, 95)
    assert local_slices(r, local_data_dirs(options)) is not None  # the local path is taken below
    want = list(range(3, 95))
    assert offsets_read(r, options, prefer_local=False, headers=headers) == want
    assert offsets_read(r, options, prefer_local=True, headers=headers) == want
