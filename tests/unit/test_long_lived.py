"""broker/utils/long_lived.py: after a large metadata apply (a flood of partitions, applied in slices) the replicas it
made are out of reach of CPython's full garbage collections (issue 25 §4). Left in, every full collection of a
broker walked the whole flood again: 0.2-1 s pauses every few seconds, and acks=all waited for them."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

import pytest

from broker.log.config import LogConfig
from broker.log.deferred_files import FREEZE_EVERY
from broker.log.manager import LogManager
from broker.metadata.image import MetadataImage, PartitionState, partition_record
from broker.metadata.records import BrokerRecord, MetadataRecord, RemoveTopicRecord, TopicRecord
from broker.replica.replica_manager import APPLY_AT_ONCE, ReplicaManager

ME = 1


@pytest.fixture
def unfrozen():
    gc.unfreeze()
    yield
    gc.unfreeze()  # what the test froze goes back to the oldest generation, as before


def records(topic: str, partitions: int) -> list[dict]:
    """A flood's records as the metadata log holds them."""
    out: list[MetadataRecord] = [BrokerRecord(b, "h", 9000 + b, False) for b in (1, 2, 3)]
    out.append(TopicRecord(topic, "id-" + topic, {}))
    # Led here and by the others in turn, as a flood's replicas are.
    replicas = [1, 2, 3]
    out += [partition_record(topic, PartitionState(p, 1 + p % 3, 0, replicas, replicas, 0)) for p in range(partitions)]
    return [r.to_dict() for r in out]


def tracked(objs: list[object]) -> int:
    """How many of `objs` a full collection would walk (the frozen ones are in no generation)."""
    ids = {id(o) for o in objs}
    return sum(1 for o in gc.get_objects() if id(o) in ids)


def test_a_large_apply_leaves_its_replicas_out_of_the_full_collections(tmp_path: Path, unfrozen):
    async def flood() -> ReplicaManager:
        rm = ReplicaManager(ME, LogManager([tmp_path], LogConfig()), lambda _t: LogConfig(), 30_000, lambda *a: None)
        rm.on_follow = lambda p: None
        rm.publish(MetadataImage(), [(i, 0, r) for i, r in enumerate(records("flood", APPLY_AT_ONCE * 2))])
        assert rm._applier is not None  # large: applied in slices
        await rm.settled()
        return rm

    rm = asyncio.run(flood())
    try:
        parts = list(rm.partitions.values())
        assert len(parts) == APPLY_AT_ONCE * 2
        objs: list[object] = [o for p in parts for o in (p, p.log)]
        assert tracked(objs) == 0
        gc.unfreeze()  # and `tracked` does see them where they are in a generation
        assert tracked(objs) == len(objs)
    finally:
        rm.close()


def test_replicas_removed_after_the_freeze_are_reclaimed(tmp_path: Path, unfrozen):
    """A removed replica's objects hold reference cycles, which a frozen generation would keep forever: a flood
    created and deleted again and again would grow the broker without bound."""

    async def flood_and_delete() -> ReplicaManager:
        rm = ReplicaManager(ME, LogManager([tmp_path], LogConfig()), lambda _t: LogConfig(), 30_000, lambda *a: None)
        rm.on_follow = rm.on_unfollow = lambda p: None
        image = MetadataImage()
        created = records("flood", APPLY_AT_ONCE * 2)
        rm.publish(image, [(i, 0, r) for i, r in enumerate(created)])
        await rm.settled()
        assert len(rm.partitions) == APPLY_AT_ONCE * 2
        rm.publish(image, [(len(created), 0, RemoveTopicRecord("flood").to_dict())])
        await rm.settled()
        return rm

    rm = asyncio.run(flood_and_delete())
    assert not rm.partitions
    # Nothing unreachable is left frozen: thawing and collecting finds no garbage from the removed replicas.
    gc.unfreeze()
    assert gc.collect() < APPLY_AT_ONCE  # ~50 per removed replica (25,000 here) when they stay frozen
    rm.close()


def test_the_files_a_flood_is_given_in_the_worker_thread_are_frozen_too(tmp_path: Path, unfrozen):
    """The segments and indexes the deferred file creator makes come after the apply's freezes: left in the
    generations, every full collection walked them again (pauses growing to 0.4 s while 5,000 logs got files)."""
    m = LogManager([tmp_path], LogConfig())
    try:
        logs = [m.get_or_create_log("flood", p, defer_files=True) for p in range(FREEZE_EVERY + 10)]
        assert m.file_creator.wait_idle(60) and all(lg.on_disk for lg in logs)
        made = [o for lg in logs for o in (lg, *lg.segments)]
        assert tracked(made) == 0
    finally:
        m.shutdown()


def _python(code: str) -> str:
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_kl_broker_pauses_the_collector_while_it_imports_and_starts(tmp_path):
    """broker/cli.py pauses cyclic collection for its imports and the broker's start (issue 29 §3): an importer
    gets it back as it was, and a started broker runs with it on (frozen survivors, long_lived.py)."""
    assert _python("import gc, broker.cli; print(gc.isenabled())") == "True"
    assert _python("import gc; gc.disable(); import broker.cli; print(gc.isenabled())") == "False"
    seen = _python(
        f"""
import asyncio, gc, os, signal
import broker.cli, broker.server.broker_server
from broker.server.config import BrokerConfig

real = broker.server.broker_server.BrokerServer.start
seen = []

async def start(self):  # the real start, with the collector's state seen on either side
    seen.append(gc.isenabled())
    await real(self)
    seen.append(gc.isenabled())
    os.kill(os.getpid(), signal.SIGTERM)  # a clean stop once started

broker.server.broker_server.BrokerServer.start = start
cfg = BrokerConfig.from_props({{"broker.id": "1", "port": "0", "log.dirs": {str(tmp_path)!r}}})
asyncio.run(broker.cli._run(cfg))
print(seen, gc.isenabled())
"""
    )
    assert seen == "[False, False] True"
