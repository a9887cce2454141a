"""Run a seeded nemesis against a ClusterHarness: idempotent producers and a consumer group under kills,
pauses, network cuts and kill-all, then heal and check every produced value (tests/integration/cluster_harness.py's
checker: lost acknowledged records, duplicates, per-producer order, replica divergence read from the
segment files) plus what the group handed out. With `kafka_clients`, Kafka's own clients take part through the
Kafka listeners (tests/nemesis/kafka_clients.py): a confluent-kafka idempotent producer, judged like ours, and
a kafkajs group member that must be handed every record."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from client.sync import Consumer
from net.errors import KafkaLiteError
from tests.integration.cluster_harness import ClusterHarness, LoadProducer, ProducerStats, full_check, wait_until
from tests.nemesis.kafka_clients import ConfluentLoadProducer, KafkajsMember
from tests.nemesis.schedule import Fault

TOPIC = "nemesis"
PARTITIONS = 3


class PollingConsumer:
    """A consumer polling in a thread, keeping every record it is handed (and committing after each poll when
    `commit`), going on through the errors of rebalances, coordinator and leader moves under the faults."""

    def __init__(self, consumer: Consumer, name: str, commit: bool = False) -> None:
        self.name = name
        self.records: list = []
        self.errors: list[str] = []
        self.consumer = consumer
        self.commit = commit
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"member-{name}", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                recs = self.consumer.poll(300)
                self.records.extend(recs)
                if recs and self.commit:
                    self.consumer.commit()
            except KafkaLiteError as e:
                self.errors.append(str(e))
                time.sleep(0.1)

    def start(self) -> PollingConsumer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)
        try:
            self.consumer.close(5)
        except KafkaLiteError:
            pass


class GroupMember(PollingConsumer):
    """A consumer-group member in a thread: keeps what it is handed, commits after each poll."""

    def __init__(self, bootstrap: str, group: str, name: str) -> None:
        consumer = Consumer(
            bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
            request_timeout_ms=5000,
        )
        consumer.subscribe([TOPIC])
        super().__init__(consumer, name, commit=True)


@dataclass
class NemesisRun:
    seed: int
    schedule: list[Fault]
    stats: list[ProducerStats] = field(default_factory=list)
    members: list[GroupMember] = field(default_factory=list)
    applied: list[str] = field(default_factory=list)
    confluent: list[ConfluentLoadProducer] = field(default_factory=list)
    kafkajs: list[KafkajsMember] = field(default_factory=list)

    def describe(self) -> str:
        return f"seed {self.seed}; faults: " + "; ".join(self.applied or [str(f) for f in self.schedule])


def apply(h: ClusterHarness, f: Fault, run: NemesisRun) -> None:
    run.applied.append(str(f))
    if f.kind == "kill":
        h.kill(f.broker)
        time.sleep(f.duration_s)
        h.restart(f.broker)
    elif f.kind == "pause":
        h[f.broker].pause()
        time.sleep(f.duration_s)
        h[f.broker].resume()
    elif f.kind == "cut":
        assert h.lab is not None, "a cut needs brokers on network-namespace hosts"
        others = [b for b in h.brokers if b != f.broker]
        for b in others:
            h.lab.cut(f.broker, b)
        time.sleep(f.duration_s)
        h.lab.heal_all()
    elif f.kind == "kill-all":
        for b in h.brokers:
            h.kill(b)
        time.sleep(f.duration_s)
        for b in h.brokers.values():
            b.start(wait=False)
        for b in h.brokers.values():
            b.wait_listening()
    else:
        raise ValueError(f"unknown fault {f.kind}")


def play(h: ClusterHarness, schedule: list[Fault], apply_fault: Callable[[Fault], None], until_s: float = 0) -> None:
    """Each fault at its time (from now), then, a second after the last (or at `until_s`), heal everything."""
    t0 = time.monotonic()
    try:
        for f in schedule:
            time.sleep(max(0.0, f.at_s - (time.monotonic() - t0)))
            apply_fault(f)
        time.sleep(max(1.0, until_s - (time.monotonic() - t0)))
    finally:
        if h.lab is not None:
            h.lab.heal_all()
        for b in h.brokers.values():  # heal whatever is left
            if b.paused:
                b.resume()
            if not b.alive:
                b.start()


def run_nemesis(
    h: ClusterHarness,
    seed: int,
    schedule: list[Fault],
    producers: int = 2,
    members: int = 2,
    kafka_clients: bool = False,
    **producer_config,
) -> NemesisRun:
    """Load, faults, heal, check. Raises AssertionError naming the anomaly and the seed."""
    run = NemesisRun(seed, schedule)
    h.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
    bs = h.bootstrap()
    cfg = dict(acks="all", enable_idempotence=True, request_timeout_ms=3000, delivery_timeout_ms=30000)
    cfg.update(producer_config)
    loads: list[LoadProducer | ConfluentLoadProducer]
    loads = [LoadProducer(bs, TOPIC, f"p{seed}x{i}", **cfg).start() for i in range(producers)]
    run.members = [GroupMember(bs, f"g{seed}", f"m{i}").start() for i in range(members)]
    if kafka_clients:
        run.confluent = [ConfluentLoadProducer(h.kafka_bootstrap(), TOPIC, f"c{seed}x0").start()]
        loads += run.confluent
        run.kafkajs = [KafkajsMember(h.kafka_bootstrap(), TOPIC, f"kjs{seed}")]
    play(h, schedule, lambda f: apply(h, f, run))
    run.stats = [lp.stop() for lp in loads]
    try:
        logged = full_check(h, TOPIC, PARTITIONS, run.stats, min_acked=1)
        check_group(run, logged)
        for c in run.confluent:
            assert c.stats.acked, f"confluent-kafka's producer had nothing acknowledged: {c.errors[-3:]}"
        for k in run.kafkajs:
            check_handed_everything(k, logged)
    except AssertionError as e:
        raise AssertionError(f"{e}\n  ({run.describe()})") from None
    finally:
        for m in run.members:
            m.stop()
        for k in run.kafkajs:
            k.stop()
    return run


def check_handed_everything(member: KafkajsMember, logged: dict[int, list]) -> None:
    """A group of one (a kafkajs consumer) is handed every record of the log, each as logged; a record handed
    twice is allowed (at least once across its restarts), one never handed is not."""
    want = {(p, r.offset): r.value for p, recs in logged.items() for r in recs}

    def got() -> dict[tuple[int, int], bytes]:
        return {(p, off): v for p, off, v in list(member.records)}

    try:
        wait_until(lambda: not (set(want) - set(got())), 60, "kafkajs handed every record", 0.3)
    except AssertionError:
        pass  # reported below, with what is missing
    seen = got()
    missing = sorted(set(want) - set(seen))
    assert not missing, f"kafkajs missed {len(missing)} records, first {missing[:5]}: {member.describe()}"
    wrong = [k for k, v in seen.items() if k in want and want[k] != v]
    assert not wrong, f"kafkajs was handed records that differ from the log at {wrong[:5]}"


def check_group(run: NemesisRun, logged: dict[int, list]) -> None:
    """Together, the members were handed every record of the log (they run until they reach its end);
    a record handed twice is allowed (at-least-once across rebalances), one never handed is not."""
    want = {(p, r.offset): r.value for p, recs in logged.items() for r in recs}

    def handed() -> set[tuple[int, int]]:
        return {(r.partition, r.offset) for m in run.members for r in list(m.records)}

    try:
        wait_until(lambda: not (set(want) - handed()), 60, "the group handed out every record", 0.3)
    except AssertionError:
        pass  # reported below, with what is missing
    got = {(r.partition, r.offset): r.value for m in run.members for r in list(m.records)}
    missing = sorted(set(want) - set(got))
    if missing:
        states = []
        for m in run.members:
            impl = m.consumer._impl
            st = {
                f"{tp.topic}-{tp.partition}": (s.position, s.fetch_position, s.high_watermark, len(s.buffer))
                for tp, s in impl._states.items()
            }
            states.append(f"{m.name}: (position, fetch position, hw, buffered) {st}; errors {m.errors[-3:]}")
        raise AssertionError(f"group members missing {len(missing)} records, first {missing[:5]}; " + "; ".join(states))
    wrong = [k for k, v in got.items() if k in want and want[k] != v]
    assert not wrong, f"group members handed records that differ from the log at {wrong[:5]}"
