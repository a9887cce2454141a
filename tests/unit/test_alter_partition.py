"""AlterPartition end to end, without sockets: the controller's error codes, the leader's outcome rule
(broker/replica/replication.py alter_partition_outcome), the broker's retry loop
(broker/replica/alter_partition_manager.py AlterPartitionManager.alter), the controller's incarnation and
overtaken-request checks (broker/controller/service.py), and the incarnation field of quorum fetches.
tests/sim/replication_sim.py runs the same rules under faults.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

import broker.replica.alter_partition_manager as apm_mod
from broker.controller.channel import ControllerChannel
from broker.controller.logic import AlterPartitionError, ControllerLogic, check_broker_incarnation
from broker.controller.service import ControllerService
from broker.metadata.image import MetadataImage
from broker.metrics.broker_metrics import BrokerMetrics
from broker.network.server import BadRequest
from broker.replica.alter_partition_manager import AlterPartitionManager
from broker.replica.replication import (
    AlterOutcome,
    HighWatermarkAdvanced,
    LeaderState,
    ProposeIsr,
    alter_partition_outcome,
    alter_partition_retry_wanted,
)
from broker.server.kafka_apis import KafkaApis
from election.messages import FetchRequest, from_wire
from net.errors import ErrorCode, KafkaLiteError, UnknownTopicOrPartitionError, error_for
from tests.unit.test_controller import apply


def cluster(n: int = 3) -> tuple[MetadataImage, ControllerLogic]:
    image = MetadataImage()
    logic = ControllerLogic(image)
    for b in range(1, n + 1):
        apply(image, logic.register_broker(b, "127.0.0.1", 9000 + b))
    apply(image, logic.create_topic("t", 1, 3, {}))
    return image, logic


def refusal(logic: ControllerLogic, *args: Any) -> ErrorCode:
    with pytest.raises(KafkaLiteError) as e:
        logic.alter_partition(*args)
    return e.value.code


# --- the controller's codes ------------------------------------------------------------------------


def test_each_kind_of_refusal_has_its_kafka_code():
    image, logic = cluster()
    p = image.topics["t"].partitions[0]
    other = next(r for r in p.replicas if r != p.leader)
    current = ("t", 0, p.leader, p.leader_epoch, p.partition_epoch)
    # Stale leader epoch, or not the leader: FENCED_LEADER_EPOCH (74).
    assert refusal(logic, "t", 0, p.leader, p.leader_epoch - 1, p.partition_epoch, [p.leader]) == 74
    assert refusal(logic, "t", 0, p.leader, p.leader_epoch + 1, p.partition_epoch, [p.leader]) == 74
    assert refusal(logic, "t", 0, other, p.leader_epoch, p.partition_epoch, [other]) == 74
    # Stale partition epoch: INVALID_UPDATE_VERSION (95), checked before the ISR itself.
    assert refusal(logic, "t", 0, p.leader, p.leader_epoch, p.partition_epoch + 1, [p.leader]) == 95
    assert refusal(logic, "t", 0, p.leader, p.leader_epoch, p.partition_epoch - 1, [99]) == 95
    # Against the current state: an invalid ISR or a fenced broker is INELIGIBLE_REPLICA (107).
    assert refusal(logic, *current, [other]) == 107  # leader missing
    assert refusal(logic, *current, [p.leader, 99]) == 107  # not a replica
    apply(image, logic.fence_broker(other))
    p = image.topics["t"].partitions[0]
    assert refusal(logic, "t", 0, p.leader, p.leader_epoch, p.partition_epoch, [p.leader, other]) == 107
    with pytest.raises(UnknownTopicOrPartitionError):
        logic.alter_partition("u", 0, p.leader, p.leader_epoch, p.partition_epoch, [p.leader])
    # All of them are AlterPartitionError, and survive the wire with their code.
    with pytest.raises(AlterPartitionError):
        logic.alter_partition("t", 0, p.leader, p.leader_epoch, p.partition_epoch + 1, [p.leader])
    assert error_for(95, "x").code == ErrorCode.INVALID_UPDATE_VERSION
    assert error_for(107, "x").code == ErrorCode.INELIGIBLE_REPLICA
    assert error_for(77, "x").code == ErrorCode.STALE_BROKER_EPOCH


def test_kafka_error_numbers():
    assert ErrorCode.OPERATION_NOT_ATTEMPTED == 55
    assert ErrorCode.FENCED_LEADER_EPOCH == 74
    assert ErrorCode.STALE_BROKER_EPOCH == 77
    assert ErrorCode.INVALID_UPDATE_VERSION == 95
    assert ErrorCode.INELIGIBLE_REPLICA == 107


def test_broker_incarnation_check():
    check_broker_incarnation(1, 5, 5)
    check_broker_incarnation(1, 6, 5)
    check_broker_incarnation(1, None, 5)  # a proposer that sends none is not checked
    with pytest.raises(AlterPartitionError) as e:
        check_broker_incarnation(1, 4, 5)
    assert e.value.code == ErrorCode.STALE_BROKER_EPOCH


# --- the leader's rule ---------------------------------------------------------------------------


def test_outcome_resets_only_on_a_definite_refusal():
    assert alter_partition_outcome(0) is AlterOutcome.COMMITTED
    for code in ("FENCED_LEADER_EPOCH", "INVALID_UPDATE_VERSION", "STALE_BROKER_EPOCH", "UNKNOWN_TOPIC_OR_PARTITION"):
        assert alter_partition_outcome(ErrorCode[code]) is AlterOutcome.AWAIT_METADATA, code
    for code in ("INELIGIBLE_REPLICA", "OPERATION_NOT_ATTEMPTED"):
        assert alter_partition_outcome(ErrorCode[code]) is AlterOutcome.REJECTED, code
    for code in ("REQUEST_TIMED_OUT", "NETWORK_EXCEPTION", "NOT_CONTROLLER", "UNKNOWN_SERVER_ERROR"):
        assert alter_partition_outcome(ErrorCode[code]) is AlterOutcome.RETRY, code
    assert alter_partition_outcome(12345) is AlterOutcome.RETRY  # a code we do not know: no verdict


def test_every_controller_refusal_matches_the_state_it_was_judged_on():
    # Refusals against a newer state must keep the proposal pending; ones against the current state reset it.
    image, logic = cluster()
    p = image.topics["t"].partitions[0]
    stale = [
        (p.leader, p.leader_epoch - 1, p.partition_epoch, [p.leader]),
        (p.leader, p.leader_epoch, p.partition_epoch + 1, [p.leader]),
    ]
    current = [(p.leader, p.leader_epoch, p.partition_epoch, [p.leader, 99])]
    for args in stale:
        assert alter_partition_outcome(refusal(logic, "t", 0, *args)) is AlterOutcome.AWAIT_METADATA
    for args in current:
        assert alter_partition_outcome(refusal(logic, "t", 0, *args)) is AlterOutcome.REJECTED


def leader_with_pending_expansion() -> tuple[LeaderState, ProposeIsr]:
    """Leader 1, ISR [1, 2]; replica 3 caught up, so [1, 2, 3] is proposed at partition epoch 0."""
    ls = LeaderState(1, [1, 2, 3], [1, 2], 0, 0, 10, 10, 1000, 0)
    ls.on_follower_fetch(2, 10, 10, 1)
    actions = ls.on_follower_fetch(3, 10, 10, 1)
    proposal = next(a for a in actions if isinstance(a, ProposeIsr))
    assert proposal.isr == (1, 2, 3) and ls.is_pending([1, 2, 3], 0)
    return ls, proposal


def test_a_proposal_without_verdict_keeps_bounding_the_high_watermark():
    ls, proposal = leader_with_pending_expansion()
    # The answer was lost (RETRY) or named a newer state (AWAIT_METADATA): nothing is reset, so 3 still
    # holds the HW back although only [1, 2] is committed as far as this leader knows.
    ls.on_leader_append(20, 2)
    ls.on_follower_fetch(2, 20, 20, 3)
    assert ls.high_watermark == 10
    assert alter_partition_retry_wanted(ls, 0, proposal.isr, proposal.partition_epoch)
    assert not alter_partition_retry_wanted(ls, 1, proposal.isr, proposal.partition_epoch)  # another leadership
    assert not alter_partition_retry_wanted(ls, 0, proposal.isr, 5)
    assert not alter_partition_retry_wanted(None, 0, proposal.isr, proposal.partition_epoch)
    # The committed state arrives by metadata and settles it.
    ls.on_isr_committed([1, 2, 3], 1)
    assert ls.pending_isr is None
    assert not alter_partition_retry_wanted(ls, 0, proposal.isr, proposal.partition_epoch)


def test_a_definite_refusal_lets_the_high_watermark_ignore_the_addition():
    ls, proposal = leader_with_pending_expansion()
    ls.on_leader_append(20, 2)
    ls.on_follower_fetch(2, 20, 20, 3)
    actions = ls.on_isr_rejected(list(proposal.isr), proposal.partition_epoch)
    assert HighWatermarkAdvanced(20) in actions and ls.pending_isr is None


# --- the broker's loop (alter_partition_manager.py AlterPartitionManager.alter) ------------------------


class FakePartition:
    def __init__(self, ls: LeaderState) -> None:
        self.topic, self.partition = "t", 0
        self.leader_epoch = ls.leader_epoch
        self.isr = ls.isr
        self.leader_state: LeaderState | None = ls
        self.high_watermark = ls.high_watermark

    def isr_change_rejected(self, isr: list[int], partition_epoch: int) -> None:  # Partition's
        if self.leader_state is not None:
            for a in self.leader_state.on_isr_rejected(isr, partition_epoch):
                if isinstance(a, HighWatermarkAdvanced):
                    self.high_watermark = a.high_watermark


class FakePeers:
    """The controller (broker 2) answers AlterPartition from `answers` (a body, or an exception to raise)."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.sent: list[dict] = []

    async def request(self, broker_id: int, api: Any, body: dict, timeout: float) -> dict:
        assert broker_id == 2
        self.sent.append(body)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def broker_with_controller(monkeypatch, answers: list[Any]) -> tuple[AlterPartitionManager, FakePeers]:
    """Broker 1's AlterPartitionManager (incarnation 7) whose controller is broker 2, recording requests."""
    monkeypatch.setattr(apm_mod, "ALTER_RETRY_BACKOFF_S", (0.001, 0.002))

    async def no_relay(body: dict, timeout: float) -> None:
        return None  # the custom mode: no path through the coordination service, requests go direct

    coordination = SimpleNamespace(controller_id=2, relay_to_controller=no_relay)
    peers = FakePeers(answers)
    channel = ControllerChannel(1, coordination, None, peers)  # type: ignore[arg-type]
    return AlterPartitionManager(1, 7, channel, BrokerMetrics(1)), peers


def err(code: ErrorCode) -> dict:
    return {"error_code": int(code), "error_message": code.name}


def test_broker_retries_until_a_verdict_and_keeps_a_stale_refused_proposal(monkeypatch):
    ls, proposal = leader_with_pending_expansion()
    part = FakePartition(ls)
    answers: list[Any] = [
        KafkaLiteError("timed out", ErrorCode.NETWORK_EXCEPTION),
        err(ErrorCode.NOT_CONTROLLER),
        err(ErrorCode.INVALID_UPDATE_VERSION),  # maybe our first attempt, committed: wait for metadata
    ]
    manager, peers = broker_with_controller(monkeypatch, answers)
    asyncio.run(manager.alter(part, list(proposal.isr), proposal.partition_epoch, list(proposal.silent)))  # type: ignore[arg-type]
    sent = peers.sent
    assert len(sent) == 3 and not answers
    assert [b["seq"] for b in sent] == [1, 2, 3] and {b["incarnation"] for b in sent} == {7}
    assert all(b["isr"] == [1, 2, 3] and b["partition_epoch"] == 0 and b["leader_epoch"] == 0 for b in sent)
    assert ls.is_pending([1, 2, 3], 0)


def test_broker_resets_on_a_definite_refusal(monkeypatch):
    ls, proposal = leader_with_pending_expansion()
    part = FakePartition(ls)
    manager, peers = broker_with_controller(monkeypatch, [err(ErrorCode.INELIGIBLE_REPLICA)])
    asyncio.run(manager.alter(part, list(proposal.isr), proposal.partition_epoch, list(proposal.silent)))  # type: ignore[arg-type]
    assert len(peers.sent) == 1 and ls.pending_isr is None


def test_broker_stops_retrying_once_metadata_settled_the_proposal(monkeypatch):
    ls, proposal = leader_with_pending_expansion()
    part = FakePartition(ls)
    answers: list[Any] = [err(ErrorCode.REQUEST_TIMED_OUT), err(ErrorCode.REQUEST_TIMED_OUT)]
    manager, peers = broker_with_controller(monkeypatch, answers)
    original = peers.request

    async def then_committed(*args: Any) -> dict:
        try:
            return await original(*args)
        finally:
            ls.on_isr_committed([1, 2, 3], 1)  # the commit reaches the leader by metadata meanwhile

    peers.request = then_committed  # type: ignore[method-assign]
    asyncio.run(manager.alter(part, list(proposal.isr), proposal.partition_epoch, list(proposal.silent)))  # type: ignore[arg-type]
    assert len(peers.sent) == 1


# --- the controller's checks (controller/service.py) ----------------------------------------------------


class FakeQuorum:
    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.applied_listeners: list[Any] = []
        self.liveness_listeners: list[Any] = []
        self.stopped = False
        self.applied = 0
        self.log_end_offset = 0
        self.controller_id = 1
        self.incarnations: dict[int, int] = {}
        self.commits = 0

    def broker_incarnation(self, broker_id: int) -> int:
        return self.incarnations.get(broker_id, 0)

    def known_brokers(self) -> dict[int, tuple[str, int]]:
        return {}

    def broker_expires_at(self, broker_id: int, epoch: int, since_ms: int, session_timeout_ms: int) -> int | None:
        return since_ms  # nobody has fetched: every other broker counts as dead

    async def propose(self, records: list[dict], timeout: float = 10.0) -> int:
        for rec in records:  # as ControllerService writes them to the log: dicts
            self.image.apply(self.image.offset + 1, rec)
        self.commits += 1
        return self.image.offset


def test_controller_refuses_a_restarted_leaders_old_proposals_and_overtaken_requests():
    image, _ = cluster()
    quorum = FakeQuorum(image)
    service = ControllerService(1, image, quorum, {}, 2000, "c")  # type: ignore[arg-type]
    service.on_role(True, 1, 1)
    p = image.topics["t"].partitions[0]
    leader = p.leader

    def alter(isr: list[int], incarnation: int | None, seq: int | None) -> ErrorCode:
        st = image.topics["t"].partitions[0]
        try:
            asyncio.run(
                service.alter_partition("t", 0, leader, st.leader_epoch, st.partition_epoch, isr, incarnation, seq)
            )
        except KafkaLiteError as e:
            return e.code
        return ErrorCode.NONE

    quorum.incarnations[leader] = 5
    assert alter([leader], 5, 1) == ErrorCode.NONE
    # The leader restarted: its new process (6) fetched. A request of process 5, late, must not apply.
    quorum.incarnations[leader] = 6
    assert alter(sorted(p.replicas), 5, 2) == ErrorCode.STALE_BROKER_EPOCH
    assert alter_partition_outcome(ErrorCode.STALE_BROKER_EPOCH) is AlterOutcome.AWAIT_METADATA
    assert alter(sorted(p.replicas), 6, 4) == ErrorCode.NONE
    # An older request of the same process arriving after a newer one was taken: no verdict, not applied.
    st = image.topics["t"].partitions[0]
    assert alter([leader], 6, 3) == ErrorCode.REQUEST_TIMED_OUT
    assert alter_partition_outcome(ErrorCode.REQUEST_TIMED_OUT) is AlterOutcome.RETRY
    assert image.topics["t"].partitions[0] == st
    # Brokers that send neither field are not checked.
    assert alter([leader], None, None) == ErrorCode.NONE
    assert quorum.commits == 3


# --- which dropped followers are silent (the isolated-leader rule's evidence) ---------------------------


def test_the_broker_sends_which_dropped_followers_are_silent_on_every_attempt(monkeypatch):
    ls = LeaderState(1, [1, 2, 3], [1, 2, 3], 0, 0, 5, 0, 100, 0, min_insync_replicas=2)
    ls.on_follower_fetch(2, 5, 5, 0)
    ls.on_follower_fetch(3, 5, 5, 0)
    ls.on_leader_append(50, 1)
    ls.on_follower_fetch(2, 6, 50, 200)  # 2 fetches but lags; 3 went quiet at t=0
    [proposal] = [a for a in ls.tick(220, 50) if isinstance(a, ProposeIsr)]
    answers: list[Any] = [err(ErrorCode.REQUEST_TIMED_OUT), err(ErrorCode.INELIGIBLE_REPLICA)]
    manager, peers = broker_with_controller(monkeypatch, answers)
    part = FakePartition(ls)
    asyncio.run(manager.alter(part, list(proposal.isr), proposal.partition_epoch, list(proposal.silent)))  # type: ignore[arg-type]
    assert [(b["isr"], b["silent"]) for b in peers.sent] == [([1], [3]), ([1], [3])]


def handled(body: dict) -> tuple:
    """The arguments KafkaApis.handle_alter_partition passes to the controller for a request `body`."""
    apis = SimpleNamespace(_alter_partition=lambda args: args)
    return KafkaApis.handle_alter_partition(apis, body, None)  # type: ignore[arg-type]


def test_the_silent_field_is_optional_and_typed_on_the_wire():
    body = {"topic": "t", "partition": 0, "leader": 1, "leader_epoch": 3, "partition_epoch": 4, "isr": [1]}
    assert handled(body)[-1] is None  # a broker from before the field: the controller moves nothing
    assert handled({**body, "silent": [2, 3]})[-1] == [2, 3]
    for bad in ("2,3", [2, "3"], {"2": 1}):
        with pytest.raises(BadRequest, match="silent"):
            handled({**body, "silent": bad})


@pytest.mark.parametrize("silent", [False, True], ids=["slow", "silent"])
def test_the_controller_service_moves_a_leader_only_off_silent_followers(silent: bool):
    image, _ = cluster()
    image.topics["t"].configs["min.insync.replicas"] = "2"
    service = ControllerService(1, image, FakeQuorum(image), {}, 2000, "c")  # type: ignore[arg-type]
    service.on_role(True, 1, 1)
    p = image.topics["t"].partitions[0]
    dropped = [r for r in p.isr if r != p.leader]
    shrink = service.alter_partition(
        "t", 0, p.leader, p.leader_epoch, p.partition_epoch, [p.leader], silent=dropped if silent else []
    )
    if not silent:
        asyncio.run(shrink)  # an ordinary shrink, committed as asked
        q = image.topics["t"].partitions[0]
        assert (q.leader, q.leader_epoch, q.isr) == (p.leader, p.leader_epoch, [p.leader])
        return
    with pytest.raises(AlterPartitionError) as e:
        asyncio.run(shrink)
    q = image.topics["t"].partitions[0]
    assert e.value.code == ErrorCode.FENCED_LEADER_EPOCH
    assert q.leader in dropped and q.leader_epoch == p.leader_epoch + 1 and sorted(q.isr) == sorted(dropped)


# --- the incarnation on quorum fetches ---------------------------------------------------------------


def test_fetch_request_incarnation_is_optional_on_the_wire():
    assert FetchRequest(3, 2, 10, 2, 99).to_wire() == ["fq", 3, 2, 10, 2, 99, 0]  # then max_wait_ms
    assert from_wire(["fq", 3, 2, 10, 2]) == FetchRequest(3, 2, 10, 2, 0)  # from a broker without the field
    assert from_wire(FetchRequest(3, 2, 10, 2, 99).to_wire()).incarnation == 99  # type: ignore[union-attr]


def active_controller(partitions: int) -> tuple[ControllerService, FakeQuorum, dict[int, Any]]:
    """An active ControllerService over three brokers and topic t of `partitions` partitions (RF 3); its fake
    quorum counts commits."""
    image = MetadataImage()
    logic = ControllerLogic(image)
    for b in (1, 2, 3):
        apply(image, logic.register_broker(b, "127.0.0.1", 9000 + b))
    apply(image, logic.create_topic("t", partitions, 3, {}))
    quorum = FakeQuorum(image)
    service = ControllerService(1, image, quorum, {}, 2000, "c")  # type: ignore[arg-type]
    service.on_role(True, 1, 1)
    return service, quorum, image.topics["t"].partitions


def shrink_to_two(service: ControllerService, parts: dict[int, Any], p: int) -> Any:
    """The AlterPartition of p's leader dropping one follower (the higher id)."""
    st = parts[p]
    isr = [st.leader, min(x for x in st.replicas if x != st.leader)]
    return service.alter_partition("t", p, st.leader, st.leader_epoch, st.partition_epoch, isr)


def test_the_controller_commits_the_alter_partitions_waiting_together():
    """Group commit: AlterPartitions that arrive while a commit is under way go in the next one together, each
    judged on its own; a second proposal for a partition already in the batch is judged after the first."""
    service, quorum, parts = active_controller(6)

    async def main() -> list[Any]:
        calls = [shrink_to_two(service, parts, p) for p in range(6)]
        calls.append(shrink_to_two(service, parts, 0))  # the same partition again, on a soon stale epoch
        calls.append(service.alter_partition("t", 1, parts[1].leader, parts[1].leader_epoch + 7, 0, [1]))
        return await asyncio.gather(*calls, return_exceptions=True)

    before = {p: st.partition_epoch for p, st in parts.items()}
    results = asyncio.run(main())
    assert results[:6] == [None] * 6
    assert isinstance(results[6], KafkaLiteError) and results[6].code == ErrorCode.INVALID_UPDATE_VERSION
    assert isinstance(results[7], KafkaLiteError) and results[7].code == ErrorCode.FENCED_LEADER_EPOCH
    assert all(len(parts[p].isr) == 2 and parts[p].partition_epoch == before[p] + 1 for p in range(6))
    assert quorum.commits == 1  # six changes, one commit round


def test_a_group_commit_carries_at_most_so_many_alter_partitions(monkeypatch):
    monkeypatch.setattr("broker.controller.service.ALTERS_PER_COMMIT", 4)
    service, quorum, parts = active_controller(10)

    async def main() -> list[Any]:
        return await asyncio.gather(*(shrink_to_two(service, parts, p) for p in parts))

    assert asyncio.run(main()) == [None] * 10
    assert quorum.commits == 3  # 4 + 4 + 2
