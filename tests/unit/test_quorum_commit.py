"""Quorum commit (replica.quorum.commit.enable), LeaderState's rules step by step: the high watermark passes silent
ISR members while a quorum of the replicas has the records, and a new leader recovers the most complete log among
enough replicas before it serves. tests/unit/test_replication_sim.py runs the same rules under random faults."""

from __future__ import annotations

from broker.replica.replication import HighWatermarkAdvanced, LeaderState, Recovered, RecoverFrom

LAG = 30_000


def leader(
    replicas: tuple[int, ...] = (1, 2, 3),
    min_isr: int = 2,
    leo: int = 10,
    hw: int = 0,
    quorum: bool = True,
    latest_epoch: int = 4,
    epoch: int = 5,
) -> LeaderState:
    """Broker 1 leading epoch `epoch` with every replica in the ISR."""
    return LeaderState(
        1, list(replicas), list(replicas), epoch, 7, leo, hw, LAG, 0, min_isr, quorum=quorum, latest_epoch=latest_epoch
    )


def recovered(ls: LeaderState, *reports: tuple[int, int, int]) -> LeaderState:
    for replica, epoch, leo in reports:
        ls.on_recovery_report(replica, epoch, leo)
    assert not ls.recovering
    return ls


def hw_of(actions: list) -> int | None:
    moved = [a.high_watermark for a in actions if isinstance(a, HighWatermarkAdvanced)]
    return moved[-1] if moved else None


def test_a_silent_isr_member_holds_the_high_watermark_back_only_under_kafkas_rules():
    for quorum, expected in ((True, 10), (False, None)):
        ls = leader(quorum=quorum)
        if quorum:
            recovered(ls, (2, 4, 10))
        ls.on_follower_fetch(3, 4, 10, 100)  # behind, then silent
        ls.on_follower_fetch(2, 10, 10, 100)
        assert ls.high_watermark == 4
        assert hw_of(ls.on_followers_silent({3})) == expected
        assert ls.isr == [1, 2, 3]  # the committed ISR is the controller's: only a proposal to drop 3 went out
        assert ls.pending_isr == [1, 2]


def test_no_quorum_without_the_silent_members_no_move():
    ls = recovered(leader(replicas=(1, 2, 3, 4, 5), min_isr=3), (2, 4, 10), (3, 4, 10))
    for r, at in ((2, 10), (3, 4), (4, 4), (5, 4)):
        ls.on_follower_fetch(r, at, 10, 100)
    assert ls.quorum_size == 3
    assert hw_of(ls.on_followers_silent({3, 4, 5})) is None  # leader and 2: two of five
    assert hw_of(ls.on_followers_silent({4, 5})) is None and ls.high_watermark == 4  # 3 counts, and it is at 4
    ls.on_follower_fetch(3, 10, 10, 200)
    assert ls.high_watermark == 10  # leader, 2 and 3: a quorum


def test_min_insync_replicas_above_a_majority_is_the_quorum():
    ls = leader(min_isr=3)
    assert ls.quorum_size == 3 and not ls.recovering  # every commit needs every replica: nothing to recover
    ls.on_follower_fetch(2, 10, 10, 100)
    ls.on_follower_fetch(3, 4, 10, 100)
    assert hw_of(ls.on_followers_silent({3})) is None and ls.high_watermark == 4


def test_a_silent_member_that_fetches_again_counts_again():
    ls = recovered(leader(), (2, 4, 10))
    ls.on_follower_fetch(2, 10, 10, 100)
    ls.on_follower_fetch(3, 4, 10, 100)
    ls.on_followers_silent({3})
    assert ls.high_watermark == 10
    ls.on_leader_append(20, 150)
    ls.on_follower_fetch(3, 12, 20, 160)  # back, and behind the leader's new records
    ls.on_follower_fetch(2, 20, 20, 170)
    assert ls.high_watermark == 12  # 3 holds it back again: it fetches, it is not silent


def test_a_new_leader_recovers_before_it_moves_the_high_watermark():
    ls = leader(leo=10, hw=6)
    assert ls.recovering and ls.recovery_reports_needed == 2
    assert ls.on_leader_append(10, 50) == [] and ls.tick(60, 10) == []
    assert ls.on_recovery_report(2, 4, 8) == [Recovered()]  # ours is the more complete log
    assert not ls.recovering and ls.leader_epoch_start_offset == 10
    assert ls.on_recovery_report(3, 4, 12) == []  # late reports change nothing


def test_a_more_complete_log_elsewhere_is_fetched_first():
    ls = leader(leo=10, hw=6)
    assert ls.on_recovery_report(2, 4, 14) == [RecoverFrom(2, 14, 4)]
    assert ls.recovering and ls.recovery_source == 2
    assert ls.on_recovery_report(3, 4, 20) == []  # the source is chosen: any enough reporters are safe
    actions = ls.on_recovered(14, 9)
    assert actions[0] == Recovered() and not ls.recovering
    assert ls.leader_epoch_start_offset == 14 and ls.leader_log_end_offset == 14 and ls.high_watermark == 9


def test_a_later_epoch_beats_a_longer_log():
    # Our epoch-4 tail is one no leader after epoch 4 kept; the replica with epoch-5 records has the committed log.
    ls = leader(leo=30, latest_epoch=4, epoch=6)
    assert ls.on_recovery_report(3, 5, 25) == [RecoverFrom(3, 25, 5)]


def test_recovery_needs_enough_reports_to_meet_every_quorum():
    # Five replicas, min.insync.replicas=3: commits need 3, so 3 reports meet every such quorum.
    ls = leader(replicas=(1, 2, 3, 4, 5), min_isr=3, leo=10)
    assert ls.recovery_reports_needed == 3
    assert ls.on_recovery_report(2, 4, 9) == [] and ls.recovering
    assert ls.on_recovery_report(9, 4, 50) == []  # not a replica: not counted
    assert ls.on_recovery_report(4, 4, 10) == [Recovered()]


def test_two_replicas_and_kafkas_rules_need_no_recovery():
    assert not leader(replicas=(1, 2), min_isr=2).recovering  # every commit needs both (a majority of 2)
    assert not leader(quorum=False).recovering


def test_a_minimum_below_a_majority_keeps_kafkas_rules():
    """min.insync.replicas=1 of 3 asks for a partition that stays available with one replica: any ISR member may
    lead alone, so no commit may leave one out, and a new leader serves at once."""
    ls = leader(min_isr=1)
    assert not ls.quorum and not ls.recovering
    ls.on_follower_fetch(2, 10, 10, 100)
    ls.on_follower_fetch(3, 4, 10, 100)
    assert hw_of(ls.on_followers_silent({3})) is None and ls.high_watermark == 4
    assert ls.pending_isr == [1, 2]  # the shrink through the controller, as before
    ls.on_isr_committed([1, 2], 8)
    assert ls.high_watermark == 10
    # Raising the minimum to a majority turns quorum commit on for this leadership's later silences.
    ls2 = leader(min_isr=1)
    ls2.set_min_insync_replicas(2)
    assert ls2.quorum


def test_a_lost_source_starts_the_count_again():
    ls = leader(leo=10)
    assert ls.on_recovery_report(2, 4, 14) == [RecoverFrom(2, 14, 4)]
    # Part of 2's log was fetched before 2 was lost: our report is what the log holds now.
    assert ls.on_recovery_source_lost(4, 12) == [] and ls.recovering and ls.recovery_source is None
    assert ls.on_recovery_report(3, 4, 11) == [Recovered()]  # 1 and 3 are enough reporters too
    assert ls.leader_epoch_start_offset == 12


def test_a_new_leader_does_not_wait_for_a_follower_that_has_not_fetched_yet():
    """Cut off when the leadership moved, a follower neither fetches nor is judged silent for a second: the others
    are a quorum, so the high watermark moves with them (Kafka's rule waits for its first fetch)."""
    ls = recovered(leader(leo=10, hw=6), (2, 4, 8))
    assert hw_of(ls.on_follower_fetch(2, 10, 10, 100)) == 10
    kafka = leader(leo=10, hw=6, quorum=False)
    assert hw_of(kafka.on_follower_fetch(2, 10, 10, 100)) is None and kafka.high_watermark == 6
    # Once it fetches it counts: behind, it holds the next records back.
    ls.on_leader_append(15, 150)
    ls.on_follower_fetch(3, 9, 15, 160)
    assert hw_of(ls.on_follower_fetch(2, 15, 15, 170)) is None and ls.high_watermark == 10


def test_a_partition_just_created_has_nothing_to_recover():
    created = LeaderState(1, [1, 2, 3], [1, 2, 3], 0, 0, 0, 0, LAG, 0, 2, quorum=True)
    assert created.quorum and not created.recovering
    restarted = LeaderState(1, [1, 2, 3], [1, 2, 3], 0, 0, 5, 0, LAG, 0, 2, quorum=True, latest_epoch=0)
    assert restarted.recovering  # the same epoch with records: a restart of its leader, which may lack some


def test_a_recovery_source_that_gives_nothing_is_given_up(tmp_path):
    """Partition.check_recovery: a recovery fetch that moves nothing for recovery_stall_ms (the source was paused or
    cut off, maybe by the next fault) starts the count again, with the leader's log as it is."""
    from broker.log.config import LogConfig
    from broker.log.log import Log
    from broker.metadata.image import PartitionState
    from broker.replica.partition import FetchSpec, Partition

    events: list[str] = []
    log = Log(tmp_path / "t-0", "t", 0, LogConfig.from_props({}), clean_shutdown=True)
    part = Partition(
        "t", 0, log, 1, 2, LAG, lambda *a: None, quorum_commit=True,
        on_recovery=lambda p, e: events.append(e), recovery_stall_ms=1000,
    )  # fmt: skip
    state = PartitionState(0, leader=1, leader_epoch=3, replicas=[1, 2, 3], isr=[1, 2, 3], partition_epoch=4)
    part.apply_state(state, 0)
    assert part.recovering
    part.read_for_follower(FetchSpec(("t", 0), 7, 1 << 20, 3, 2), 2, 10)  # broker 2 has 7 records of epoch 2
    assert events == ["fetch"] and part.fetch_source == 2
    part.check_recovery(100)
    part.check_recovery(900)
    assert events == ["fetch"]  # not a second yet
    part.check_recovery(1100)
    assert events == ["fetch", "stalled", "stop"] and part.recovering and part.fetch_source == 1
    answer = part.read_for_follower(FetchSpec(("t", 0), 0, 1 << 20, 3, -1), 3, 1200)  # broker 3: an empty log
    assert events[-1] == "done" and not part.recovering and answer.error == 0
