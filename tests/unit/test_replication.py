"""broker/replica/replication.py: ISR and high watermark at the leader, fetch validation, follower truncation."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from broker.log.epoch import LeaderEpochFileCache
from broker.replica.replication import (
    Diverging,
    Fenced,
    FollowerState,
    HighWatermarkAdvanced,
    LeaderState,
    Ok,
    OutOfRange,
    ProposeIsr,
    TruncateTo,
    UnknownEpoch,
    validate_fetch,
)

LAG = 10_000


def leader(isr=(1, 2, 3), replicas=(1, 2, 3), leo=0, hw=0, now=0, leader_epoch=5, partition_epoch=7) -> LeaderState:
    return LeaderState(1, list(replicas), list(isr), leader_epoch, partition_epoch, leo, hw, LAG, now)


def hws(actions) -> list[int]:
    return [a.high_watermark for a in actions if isinstance(a, HighWatermarkAdvanced)]


def proposals(actions) -> list[ProposeIsr]:
    return [a for a in actions if isinstance(a, ProposeIsr)]


def commit(ls: LeaderState, actions) -> list:
    """Play the controller: accept the one proposal in `actions`."""
    (p,) = proposals(actions)
    assert ls.pending_isr == list(p.isr)
    return ls.on_isr_committed(list(p.isr), p.partition_epoch + 1)


# --- high watermark ------------------------------------------------------------------------------------


def test_hw_is_min_leo_over_isr():
    ls = leader(leo=10)
    assert ls.on_follower_fetch(2, 6, 10, 1) == []  # 3 has not fetched yet: its LEO is unknown
    assert ls.high_watermark == 0
    assert hws(ls.on_follower_fetch(3, 4, 10, 2)) == [4]
    assert hws(ls.on_follower_fetch(2, 10, 10, 3)) == []  # 3 still holds it at 4
    assert hws(ls.on_follower_fetch(3, 8, 10, 4)) == [8]
    assert ls.high_watermark == 8
    assert ls.follower_log_end_offset(2) == 10 and ls.follower_log_end_offset(3) == 8
    assert ls.follower_log_end_offset(1) == 10  # the leader itself


def test_replica_outside_isr_does_not_hold_back_hw():
    ls = leader(isr=(1, 2), leo=10)
    ls.on_follower_fetch(3, 0, 10, 1)
    assert hws(ls.on_follower_fetch(2, 10, 10, 2)) == [10]


def test_hw_never_decreases():
    ls = leader(isr=(1, 2), leo=10)
    ls.on_follower_fetch(2, 10, 10, 1)
    assert ls.high_watermark == 10
    # A follower that truncated (or a stale fetch) reports less: the HW stays.
    assert hws(ls.on_follower_fetch(2, 3, 10, 2)) == []
    assert ls.high_watermark == 10
    # A new leader starts from the HW it was given even though no follower has reported yet.
    ls2 = leader(isr=(1, 2), leo=20, hw=15)
    assert hws(ls2.on_follower_fetch(2, 12, 20, 1)) == [] and ls2.high_watermark == 15
    assert hws(ls2.on_follower_fetch(2, 18, 20, 2)) == [18]


def test_leader_alone_in_isr_commits_on_append():
    ls = leader(isr=(1,), leo=0)
    assert hws(ls.on_leader_append(5, 1)) == [5]
    assert hws(ls.on_leader_append(5, 2)) == []
    assert hws(ls.on_leader_append(9, 3)) == [9]
    # With a follower in the ISR an append alone commits nothing.
    ls2 = leader(isr=(1, 2), leo=0)
    assert ls2.on_leader_append(5, 1) == [] and ls2.high_watermark == 0


def test_no_hw_advance_while_isr_is_below_min_insync_replicas():
    """KIP-966: an ISR shrunk below min.insync.replicas commits nothing, even the leader alone."""
    ls = LeaderState(1, [1, 2, 3], [1, 2, 3], 5, 7, 10, 10, LAG, 0, min_insync_replicas=2)
    ls.on_follower_fetch(2, 10, 10, 0)
    ls.on_follower_fetch(3, 10, 10, 0)
    assert ls.on_isr_committed([1], 9) == []  # the controller took both followers out
    assert ls.on_leader_append(25, 1) == [] and ls.high_watermark == 10
    assert ls.tick(2, 25) == [] and ls.high_watermark == 10
    # Follower 2 catches up and is proposed back; only the committed ISR of 2 lets the HW move.
    actions = ls.on_follower_fetch(2, 25, 25, 3)
    assert proposals(actions) == [ProposeIsr((1, 2), 9)] and hws(actions) == []
    assert hws(commit(ls, actions)) == [25]


def test_min_insync_replicas_is_capped_at_the_replica_count_and_may_change():
    # min.insync.replicas=3 on an RF=2 topic: both replicas in sync is enough (Kafka's effectiveMinIsr).
    ls = LeaderState(1, [1, 2], [1, 2], 5, 7, 0, 0, LAG, 0, min_insync_replicas=3)
    ls.on_leader_append(4, 0)
    assert hws(ls.on_follower_fetch(2, 4, 4, 1)) == [4]
    # Alone in the ISR with min 2, the leader holds its appends until the setting is lowered.
    alone = LeaderState(1, [1, 2, 3], [1], 5, 7, 0, 0, LAG, 0, min_insync_replicas=2)
    assert alone.on_leader_append(6, 1) == []
    assert hws(alone.set_min_insync_replicas(1)) == [6]


# --- ISR shrink ----------------------------------------------------------------------------------------


def test_stuck_follower_is_dropped_after_lag_time():
    """Lecture's 'stuck follower': no fetch at all for replica.lag.time.max.ms."""
    ls = leader(leo=0)
    leo = 0
    for t in range(0, LAG + 1, 100):
        leo += 10
        ls.on_leader_append(leo, t)
        ls.on_follower_fetch(2, leo, leo, t)  # 2 keeps up; 3 never fetches
        assert proposals(ls.tick(t, leo)) == [], t  # within the allowance (lag == max is still in sync)
    actions = ls.tick(LAG + 1, leo)
    assert proposals(actions) == [ProposeIsr((1, 2), 7)]
    assert ls.isr == [1, 2, 3] and ls.pending_isr == [1, 2]
    assert ls.high_watermark == 0  # the shrink is not committed yet: 3 still counts
    assert hws(commit(ls, actions)) == [leo]
    assert ls.isr == [1, 2] and ls.partition_epoch == 8 and ls.pending_isr is None
    assert ls.is_under_replicated and ls.under_min_isr(3) and not ls.under_min_isr(2)


def test_slow_follower_is_dropped_after_lag_time():
    """Lecture's 'slow follower': fetches all the time but its newest record stays older than the lag time."""
    ls = leader(leo=0)
    leo, slow = 0, 0
    dropped_at = None
    for t in range(100, 3 * LAG, 100):
        leo += 10
        ls.on_leader_append(leo, t)
        ls.on_follower_fetch(2, leo, leo, t)
        slow += 3  # under a third of the produce rate: never reaches any LEO the leader had
        ls.on_follower_fetch(3, slow, leo, t)
        if proposals(ls.tick(t, leo)):
            dropped_at = t
            break
    assert dropped_at == LAG + 100  # last caught up at 0 (in the ISR when leadership began)
    assert ls.pending_isr == [1, 2]


def test_follower_with_nothing_to_fetch_stays_in_isr():
    ls = leader(isr=(1, 2), leo=10)
    ls.on_follower_fetch(2, 10, 10, 0)
    # Idle partition: 2 does not need to fetch anything to be in sync.
    assert ls.tick(5 * LAG, 10) == [] and ls.isr == [1, 2]
    # The first append after a long silence makes it out of sync right away.
    ls.on_leader_append(11, 5 * LAG)
    assert proposals(ls.tick(5 * LAG + 1, 11)) == [ProposeIsr((1,), 7)]


def test_an_idle_followers_repeated_fetch_moves_nothing_but_keeps_it_caught_up():
    """The same fetch again (an idle partition of a follower's fetch: thousands after a flood) answers no
    action, yet still counts as the follower being caught up now."""
    ls = leader(isr=(1, 2), leo=10, hw=10)
    for t in range(0, 5 * LAG, 1000):
        assert ls.on_follower_fetch(2, 10, 10, t) == []
    last = 5 * LAG - 1000
    ls.on_leader_append(11, last + 10)
    assert proposals(ls.tick(last + LAG, 11)) == []  # caught up at its last fetch: within the allowance
    assert proposals(ls.tick(last + LAG + 1, 11)) == [ProposeIsr((1,), 7)]


def test_a_repeated_fetch_from_outside_the_isr_still_proposes_it():
    ls = leader(isr=(1, 2), leo=20, hw=20)
    ls.on_follower_fetch(2, 20, 20, 1)
    actions = ls.remove_replicas([2])  # a proposal in flight: 3 cannot be proposed meanwhile
    assert proposals(actions) == [ProposeIsr((1,), 7)]
    assert ls.on_follower_fetch(3, 20, 20, 2) == []
    ls.on_isr_rejected()
    # The same position against the same log end as its last fetch, but 3 is not in the ISR: it joins.
    assert proposals(ls.on_follower_fetch(3, 20, 20, 3)) == [ProposeIsr((1, 2, 3), 7)]


def test_last_caught_up_rule_keeps_a_one_round_trip_behind_follower_in_sync():
    """Producers append between every pair of fetches, so the follower never equals the leader's LEO at
    fetch time; it fetches the LEO the leader had at its previous fetch, which counts as caught up."""
    ls = leader(isr=(1, 2), replicas=(1, 2))
    leo, prev_leo = 0, 0
    for t in range(100, 6 * LAG, 100):
        leo += 7
        ls.on_leader_append(leo, t)
        ls.on_follower_fetch(2, prev_leo, leo, t)
        prev_leo = leo
        assert proposals(ls.tick(t, leo)) == [], t
    assert ls.isr == [1, 2] and ls.high_watermark == prev_leo - 7

    # One record further behind than that, and it is out after the lag time.
    ls = leader(isr=(1, 2), replicas=(1, 2))
    leo, prev_leo, out = 0, 0, None
    for t in range(100, 6 * LAG, 100):
        leo += 7
        ls.on_leader_append(leo, t)
        ls.on_follower_fetch(2, max(prev_leo - 1, 0), leo, t)
        prev_leo = leo
        if proposals(ls.tick(t, leo)):
            out = t
            break
    assert out is not None and LAG < out <= LAG + 200


# --- ISR expansion -------------------------------------------------------------------------------------


def test_follower_joins_isr_when_caught_up_to_hw():
    ls = leader(isr=(1, 2), leo=20)
    ls.on_follower_fetch(2, 20, 20, 1)
    assert ls.high_watermark == 20
    assert ls.on_follower_fetch(3, 10, 20, 2) == []  # below the HW
    actions = ls.on_follower_fetch(3, 20, 20, 3)
    assert proposals(actions) == [ProposeIsr((1, 2, 3), 7)]
    assert ls.pending_isr == [1, 2, 3] and ls.isr == [1, 2]
    # Only one proposal in flight: more fetches propose nothing new.
    assert proposals(ls.on_follower_fetch(3, 20, 20, 4)) == []
    commit(ls, actions)
    assert ls.isr == [1, 2, 3] and not ls.is_under_replicated


def test_joining_needs_the_leader_epoch_start_offset():
    # New leader with records past the HW from its old epochs: a follower between the two may still hold a
    # divergent tail of an old epoch there, so it is not in sync yet.
    ls = leader(isr=(1, 2), leo=50, hw=30)
    ls.on_follower_fetch(2, 30, 50, 1)
    assert ls.on_follower_fetch(3, 40, 50, 1) == []  # above the HW, below the epoch start
    assert proposals(ls.on_follower_fetch(3, 50, 50, 2)) == [ProposeIsr((1, 2, 3), 7)]


def test_maximal_isr_holds_hw_during_pending_expansion():
    ls = leader(isr=(1, 2), leo=20)
    ls.on_follower_fetch(2, 20, 20, 1)
    (p,) = proposals(ls.on_follower_fetch(3, 20, 20, 2))
    assert ls.maximal_isr == [1, 2, 3]
    ls.on_leader_append(40, 3)
    # The committed ISR {1, 2} has 40, but the proposal may already be committed with 3 at 20.
    assert hws(ls.on_follower_fetch(2, 40, 40, 4)) == []
    assert ls.high_watermark == 20
    assert hws(ls.on_isr_committed([1, 2, 3], 8)) == []
    assert hws(ls.on_follower_fetch(3, 40, 40, 5)) == [40]


def test_rejected_expansion_releases_hw():
    ls = leader(isr=(1, 2), leo=20)
    ls.on_follower_fetch(2, 20, 20, 1)
    (p,) = proposals(ls.on_follower_fetch(3, 20, 20, 2))
    ls.on_leader_append(40, 3)
    ls.on_follower_fetch(2, 40, 40, 4)
    # A rejection naming a different proposal is someone else's: ignored.
    assert ls.on_isr_rejected([1, 2, 3], 6) == [] and ls.pending_isr == [1, 2, 3]
    assert hws(ls.on_isr_rejected(list(p.isr), p.partition_epoch)) == [40]
    assert ls.pending_isr is None
    # The next fetch may propose again.
    assert proposals(ls.on_follower_fetch(3, 40, 40, 5)) == [ProposeIsr((1, 2, 3), 7)]


def test_pending_shrink_takes_effect_only_when_committed():
    ls = leader(leo=10)
    ls.on_follower_fetch(2, 10, 10, 0)
    ls.on_follower_fetch(3, 10, 10, 0)
    ls.on_leader_append(30, 1)
    ls.on_follower_fetch(2, 30, 30, LAG + 5)
    actions = ls.tick(LAG + 5, 30)
    assert proposals(actions) == [ProposeIsr((1, 2), 7)] and ls.high_watermark == 10
    ls.on_follower_fetch(2, 30, 30, LAG + 6)
    assert ls.high_watermark == 10  # 3 is still in the committed ISR
    after = commit(ls, actions)
    assert hws(after) == [30]
    assert proposals(after) == []  # 3 (at 10) is below the new HW: not proposed straight back in


def test_stale_and_repeated_commits_are_ignored():
    ls = leader(leo=10)
    assert ls.on_isr_committed([1, 2], 7) == [] and ls.isr == [1, 2, 3]  # same epoch
    assert ls.on_isr_committed([1], 3) == [] and ls.isr == [1, 2, 3]  # older epoch
    # A newer commit (someone else's change) replaces the ISR and ends our in-flight proposal.
    ls.remove_replicas([3])
    assert ls.pending_isr == [1, 2]
    ls.on_isr_committed([1, 2, 3], 9)
    assert ls.isr == [1, 2, 3] and ls.partition_epoch == 9


# --- fenced replicas -----------------------------------------------------------------------------------


def test_fenced_replicas_are_removed_without_waiting_for_lag_time():
    ls = leader(leo=10)
    ls.on_follower_fetch(2, 10, 10, 0)
    ls.on_follower_fetch(3, 4, 10, 0)
    actions = ls.remove_replicas([3, 1])  # the leader never proposes itself out
    assert proposals(actions) == [ProposeIsr((1, 2), 7)]
    assert ls.high_watermark == 4
    assert hws(commit(ls, actions)) == [10]
    # Not proposed back in while fenced, even when caught up (the controller would refuse it)...
    ls2 = leader(isr=(1, 2), leo=10)
    ls2.on_follower_fetch(2, 10, 10, 0)
    (p,) = proposals(ls2.on_follower_fetch(3, 10, 10, 0))
    assert ls2.remove_replicas([3]) == []  # fenced while its expansion is in flight
    ls2.on_isr_rejected(list(p.isr), p.partition_epoch)
    assert ls2.on_isr_committed([1, 2], 8) == []  # a commit re-checks expansion: 3 is still fenced
    # ...but a fetch shows it is alive again, and then it may rejoin.
    assert proposals(ls2.on_follower_fetch(3, 10, 10, 1)) == [ProposeIsr((1, 2, 3), 8)]


def test_fencing_during_a_pending_proposal_is_proposed_after_it():
    ls = leader(isr=(1, 2), leo=10)
    ls.on_follower_fetch(2, 10, 10, 0)
    (p,) = proposals(ls.on_follower_fetch(3, 10, 10, 1))
    assert ls.remove_replicas([2]) == []  # one proposal at a time
    actions = ls.on_isr_committed(list(p.isr), 8)
    assert proposals(actions) == [ProposeIsr((1, 3), 8)]


# --- validate_fetch ------------------------------------------------------------------------------------


def cache(tmp_path: Path, name: str, entries: list[tuple[int, int]]) -> LeaderEpochFileCache:
    c = LeaderEpochFileCache(tmp_path / name)
    for epoch, start in entries:
        c.assign(epoch, start)
    return c


def test_validate_fetch_every_branch(tmp_path):
    # Leader in epoch 3, log [0, 15), epochs: 1 from 0, 3 from 10 (never led in epoch 2).
    c = cache(tmp_path, "leader", [(1, 0), (3, 10)])

    def check(cur, offset, last_epoch, start=0, leo=15):
        return validate_fetch(cur, 3, offset, last_epoch, lambda e: c.end_offset_for_epoch(e, leo), start, leo)

    assert check(2, 12, 3) == Fenced()
    assert check(4, 12, 3) == UnknownEpoch()
    assert check(3, 12, 3) == Ok()
    assert check(3, 15, 3) == Ok()
    assert check(-1, 12, 3) == Ok()  # no current epoch sent: not checked
    assert check(3, 12, -1) == Ok()  # no last fetched epoch (empty follower log): only the range
    # Our epoch-1 records end at 10; the follower has epoch-1 records up to 12.
    assert check(3, 12, 1) == Diverging(1, 10)
    assert check(3, 10, 1) == Ok()
    # We never had epoch 2: what the follower holds of it is not ours; ours of epoch <= 2 ends at 10.
    assert check(3, 11, 2) == Diverging(1, 10)
    # Same epoch, but the follower claims more than we have.
    assert check(3, 17, 3) == Diverging(3, 15)
    assert check(3, 20, -1) == OutOfRange()
    assert check(3, 2, 1, start=5) == OutOfRange()  # below our log start, divergent or not
    assert check(3, 2, -1, start=5) == OutOfRange()
    assert check(3, 12, 9) == OutOfRange()  # an epoch newer than ours: cannot be placed


def test_validate_fetch_before_first_append_in_the_leader_epoch(tmp_path):
    # Log records an epoch at its first append; the new leader (epoch 6) has not appended yet. A deposed
    # leader that wrote epoch 5 from offset 5 must still learn where to truncate.
    c = cache(tmp_path, "leader", [(4, 0)])
    end = lambda e: c.end_offset_for_epoch(e, 10)  # noqa: E731
    assert validate_fetch(6, 6, 12, 5, end, 0, 10) == Diverging(4, 10)
    assert validate_fetch(6, 6, 10, 4, end, 0, 10) == Ok()
    empty = cache(tmp_path, "empty", [])
    assert validate_fetch(6, 6, 12, 5, lambda e: empty.end_offset_for_epoch(e, 0), 0, 0) == Diverging(5, 0)


# --- follower divergence (KIP-101 / KIP-279) -----------------------------------------------------------


class Replica:
    """A log reduced to the epoch of each offset, with a real epoch cache over it."""

    def __init__(self, tmp_path: Path, name: str, epochs: list[int]) -> None:
        self.epochs: list[int] = []
        self.cache = LeaderEpochFileCache(tmp_path / name)
        self.append(epochs)

    @property
    def leo(self) -> int:
        return len(self.epochs)

    def append(self, epochs: list[int]) -> None:
        for e in epochs:
            self.cache.assign(e, len(self.epochs))
            self.epochs.append(e)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.cache.end_offset_for_epoch(epoch, self.leo)

    def truncate(self, offset: int) -> None:
        del self.epochs[offset:]
        self.cache.truncate_from_end(offset)


def catch_up(follower: Replica, leader_log: Replica, leader_epoch: int) -> list[TruncateTo]:
    """Run fetches until the follower is in sync; returns the truncations it made on the way."""
    fs = FollowerState(2, 1, leader_epoch, follower.leo, follower.cache.latest_epoch)
    truncations = []
    for _ in range(10):
        offset, last_epoch, cur = fs.next_fetch()
        d = validate_fetch(cur, leader_epoch, offset, last_epoch, leader_log.end_offset_for_epoch, 0, leader_log.leo)
        if isinstance(d, Diverging):
            t = fs.on_diverging(d.epoch, d.end_offset, follower.end_offset_for_epoch)
            truncations.append(t)
            follower.truncate(t.offset)
            fs.on_records_appended(follower.leo, follower.cache.latest_epoch)
            continue
        assert d == Ok()
        follower.append(leader_log.epochs[offset:])
        fs.on_records_appended(follower.leo, follower.cache.latest_epoch)
        return truncations
    raise AssertionError("did not converge")


def test_kip101_uncommitted_tail_of_old_leader_is_truncated(tmp_path):
    # Epoch 0: A leads and writes 0..9; B has replicated 0..7 when A dies.
    a = Replica(tmp_path, "a", [0] * 10)
    b = Replica(tmp_path, "b", [0] * 8)
    # B leads epoch 1 and writes 8..11. A's 8, 9 (epoch 0) conflict with B's 8, 9 (epoch 1).
    b.append([1] * 4)
    assert catch_up(a, b, leader_epoch=1) == [TruncateTo(8)]
    assert a.epochs == b.epochs == [0] * 8 + [1] * 4
    assert a.cache.entries == b.cache.entries == [(0, 0), (1, 8)]


def test_kip279_two_consecutive_leader_changes(tmp_path):
    # Epoch 1: A writes 0, 1; B copies only 0. Epoch 2: B leads, writes 1, dies before A copies it.
    # Epoch 3: A leads again (its own epoch-1 record at 1 stays) and writes 2. Now B follows A.
    a = Replica(tmp_path, "a", [1, 1])
    b = Replica(tmp_path, "b", [1])
    b.append([2])
    a.append([3])
    # A never had epoch 2: it answers with its epoch-1 end (2); B's epoch 1 ends at 1, so B cuts there.
    assert catch_up(b, a, leader_epoch=3) == [TruncateTo(1)]
    assert b.epochs == a.epochs == [1, 1, 3]


def test_follower_without_the_leaders_epoch_truncates_in_steps(tmp_path):
    leader_log = Replica(tmp_path, "l", [1, 1, 1, 2, 2, 2, 2, 5, 5, 5])
    follower = Replica(tmp_path, "f", [1, 1, 1, 1, 1, 4, 4, 4, 4])
    # Leader: ours of epoch <= 4 end at 7, in epoch 2, which the follower never had: it cuts to the end of
    # its own epoch 1 (5), asks again, and learns the leader's epoch 1 ends at 3.
    assert catch_up(follower, leader_log, leader_epoch=5) == [TruncateTo(5, complete=False), TruncateTo(3)]
    assert follower.epochs == leader_log.epochs


def test_follower_truncates_below_its_high_watermark_when_the_rule_says_so():
    # After an unclean election the new leader may lack what this follower saw committed.
    fs = FollowerState(2, 1, 4, log_end_offset=10, latest_epoch=3, high_watermark=9)
    own = {3: (3, 10)}
    t = fs.on_diverging(3, 6, lambda e: own.get(e, (-1, -1)))
    assert t == TruncateTo(6)
    fs.on_records_appended(6, 3)
    assert fs.high_watermark == 6


def test_follower_without_epochs_truncates_to_the_leaders_end():
    fs = FollowerState(2, 1, 4, log_end_offset=10, latest_epoch=-1)
    assert fs.on_diverging(2, 7, lambda e: (-1, -1)) == TruncateTo(7)
    assert fs.on_diverging(2, 12, lambda e: (-1, -1)) == TruncateTo(10)


def test_follower_fetch_position_and_high_watermark():
    fs = FollowerState(2, 1, 4, log_end_offset=5, latest_epoch=3)
    assert fs.next_fetch() == (5, 3, 4)
    assert hws(fs.on_high_watermark(20)) == [5]  # capped by what we hold
    fs.on_records_appended(12, 4)
    assert fs.next_fetch() == (12, 4, 4)
    assert hws(fs.on_high_watermark(20)) == [12]
    assert fs.on_high_watermark(8) == [] and fs.high_watermark == 12  # a lagging response never lowers it


# --- randomized ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_random_schedules_keep_hw_within_every_committed_isr_member(seed):
    rng = random.Random(seed)
    replicas = [1, 2, 3, 4]
    isr = [1] + [r for r in replicas[1:] if rng.random() < 0.6]
    leo = 5
    true_leo = {r: rng.randint(0, leo) for r in replicas[1:]}  # what each follower really holds
    now, hw = 0, 0
    ctrl_isr, ctrl_epoch = list(isr), 0  # the controller's committed state
    in_flight: list[ProposeIsr] = []  # proposals the controller has not answered yet
    ls = LeaderState(1, replicas, isr, 1, 0, leo, 0, 1000, now)
    seen = {"expand": 0, "shrink": 0, "rejected": 0}

    def take(actions):
        nonlocal hw
        for a in actions:
            if isinstance(a, HighWatermarkAdvanced):
                assert a.high_watermark > hw
                hw = a.high_watermark
            elif isinstance(a, ProposeIsr):
                in_flight.append(a)

    for _ in range(5000):
        op = rng.random()
        now += rng.randint(0, 300)
        if op < 0.2:
            leo += rng.randint(1, 5)
            take(ls.on_leader_append(leo, now))
        elif op < 0.6:
            r = rng.choice(replicas[1:])
            if rng.random() < 0.8:  # some followers stall for a while
                true_leo[r] = rng.randint(true_leo[r], leo)
                take(ls.on_follower_fetch(r, true_leo[r], leo, now))
        elif op < 0.75:
            take(ls.tick(now, leo))
        elif op < 0.95 and in_flight:
            p = in_flight.pop(0)
            if p.partition_epoch == ctrl_epoch and rng.random() < 0.9:
                seen["expand" if len(p.isr) > len(ctrl_isr) else "shrink"] += 1
                ctrl_isr, ctrl_epoch = list(p.isr), ctrl_epoch + 1
                take(ls.on_isr_committed(ctrl_isr, ctrl_epoch))
            else:
                seen["rejected"] += 1
                take(ls.on_isr_rejected(list(p.isr), p.partition_epoch))
        elif op >= 0.98:
            # The controller fences a broker itself (its own commit), and tells the leader.
            r = rng.choice(replicas[1:])
            if r in ctrl_isr:
                ctrl_isr, ctrl_epoch = [x for x in ctrl_isr if x != r], ctrl_epoch + 1
                take(ls.on_isr_committed(ctrl_isr, ctrl_epoch))
            take(ls.remove_replicas([r]))

        assert ls.high_watermark == hw <= leo
        assert ls.isr == ctrl_isr
        for r in ctrl_isr:
            if r != 1:
                assert hw <= true_leo[r], (r, hw, true_leo, ctrl_isr)
                known = ls.follower_log_end_offset(r)
                assert known is None or hw <= known
    assert seen["expand"] > 10 and seen["shrink"] > 10 and seen["rejected"] > 0
    assert hw > leo // 2  # the HW did make progress
