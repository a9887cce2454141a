"""QuorumNode: one voter of the controller quorum, as a deterministic sans-IO state machine.

Inputs are `tick(now)`, `receive(msg, now)` and `propose(records, now)`; each returns an ORDERED list
of outputs (election/messages.py) that the driver executes in order. A `Persist` must be durable
before anything after it in the same list is executed: the vote it records is what makes "one
controller per epoch" hold across restarts. The node reads no clock, does no I/O and draws
randomness only from the `rng` it is given, so a simulator can replay any run from its seed.

See docs/ELECTION.md for the protocol and the safety argument.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from enum import StrEnum

from election.config import QuorumConfig
from election.log import Entry, MetadataLog, Record
from election.messages import (
    FENCED_EPOCH,
    NOT_CONTROLLER,
    BecameController,
    BecameFollower,
    BeginEpoch,
    Committed,
    ElectionState,
    Evaluation,
    FetchRequest,
    FetchResponse,
    Heartbeat,
    Input,
    Output,
    PeerClosed,
    Persist,
    Send,
    Truncated,
)
from election.replication import FollowerTracker, diverging, truncation_offset
from election.vote import ElectionRound, choose
from net.wire_types import EPOCH


class Role(StrEnum):
    FOLLOWER = "follower"
    ELECTING = "electing"
    CONTROLLER = "controller"


class NotControllerError(Exception):
    def __init__(self, epoch: int, leader: int | None) -> None:
        super().__init__(f"not the controller (epoch {epoch}, controller {leader})")
        self.epoch = epoch
        self.leader = leader


class InvariantError(AssertionError):
    """The protocol reached a state its safety argument rules out; continuing could lose committed data."""


def leader_change_record(epoch: int, leader: int, voters: Sequence[int]) -> Record:
    return {"type": "leader_change", "epoch": epoch, "leader": leader, "voters": list(voters)}


class QuorumNode:
    def __init__(
        self,
        node_id: int,
        voters: Sequence[int],
        log: MetadataLog,
        config: QuorumConfig | None = None,
        persisted: tuple[int, int | None] = (0, None),
        now_ms: int = 0,
        rng: random.Random | None = None,
        incarnation: int = 0,
    ) -> None:
        if node_id not in voters:
            raise ValueError(f"node {node_id} is not among the voters {list(voters)}")
        self.id = node_id
        self.voters: tuple[int, ...] = tuple(sorted(set(voters)))
        self._others: tuple[int, ...] = tuple(v for v in self.voters if v != node_id)
        self._majority = len(self.voters) // 2 + 1
        self.log = log
        self.incarnation = incarnation  # this process, sent with fetches (see FetchRequest.incarnation)
        self.config = config or QuorumConfig()
        self._rng = rng or random.Random(node_id)
        epoch, voted_for = persisted
        if log.last_epoch > epoch:
            # Records of an epoch are appended in the same call that moves the node into it, and the
            # driver may crash before executing that call's Persist. The node cannot have voted in
            # that epoch (a vote is persisted before it is sent), so the epoch with no vote is exact.
            epoch, voted_for = log.last_epoch, None
        self._epoch = epoch
        self._voted_for = voted_for
        self._role = Role.FOLLOWER
        self._leader: int | None = None
        self._hw = 0
        self.leaderships = 0
        self._round: ElectionRound | None = None
        self._tracker: FollowerTracker | None = None
        # The last epoch whose election this incarnation took part in. After a restart we do not know
        # whether we already sent an ElectionState (with a log that may have grown since) or counted
        # votes in the persisted epoch, so we sit that epoch out and only join newer ones.
        self._joined_epoch = epoch
        self._won: tuple[int, frozenset[int]] | None = None
        self._election_deadline = now_ms + self._timeout()
        self._next_fetch_ms = now_ms
        # Voters whose process the driver reported gone (PeerClosed) and that have not spoken since: a round
        # need not wait for their states (see _states_complete).
        self._closed: set[int] = set()
        # Voters that answered our discovery fetches (see _discover) that they know no controller in our
        # epoch either; reset with every epoch change and whenever we follow someone.
        self._leaderless: set[int] = set()
        # Controller only: the fetches held because they found nothing new (long polling, see
        # QuorumConfig.fetch_max_wait_ms), one per follower, with the time each must be answered by.
        self._parked: dict[int, tuple[FetchRequest, int]] = {}

    # --- public state ------------------------------------------------------------------------------

    @property
    def role(self) -> Role:
        return self._role

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def voted_for(self) -> int | None:
        return self._voted_for

    @property
    def leader_id(self) -> int | None:
        return self._leader

    @property
    def high_watermark(self) -> int:
        return self._hw

    def follower_last_fetch_ms(self, node: int) -> int | None:
        """When `node` last fetched from us in our current epoch; None if never or if we are not controller."""
        if self._tracker is None:
            return None
        return self._tracker.last_fetch_ms.get(node)

    def follower_end(self, node: int) -> int | None:
        """How far `node`'s log is known to match ours in our current epoch (DescribeQuorum's log_end_offset); None
        if it has not fetched or we are not controller."""
        if self._tracker is None:
            return None
        return self._tracker.end.get(node)

    def voters_seen_in_election(self, epoch: int) -> frozenset[int]:
        """Ids whose ElectionState we had when we won `epoch` (us included); empty if we did not win it."""
        if self._won is not None and self._won[0] == epoch:
            return self._won[1]
        return frozenset()

    def next_deadline_ms(self) -> int:
        """The earliest time at which `tick` may have something to do (drivers may tick more often)."""
        if self._role is Role.CONTROLLER:
            # _next_fetch_ms is re-used as the controller's housekeeping cadence
            return min([self._next_fetch_ms, *(due for _, due in self._parked.values())])
        if self._role is Role.ELECTING and self._round is not None:
            r = self._round
            return r.collect_deadline_ms if not r.voted else (r.decide_deadline_ms or r.collect_deadline_ms)
        # A follower fetches from its controller, or looks for one (_discover), every fetch interval.
        return min(self._next_fetch_ms, self._election_deadline)

    # --- inputs ------------------------------------------------------------------------------------

    def tick(self, now_ms: int) -> list[Output]:
        out: list[Output] = []
        if self._role is Role.FOLLOWER:
            if now_ms >= self._election_deadline:
                self._start_election(self._epoch + 1, now_ms, out)
            elif now_ms >= self._next_fetch_ms:
                if self._leader is not None:
                    self._send_fetch(now_ms, out)
                else:
                    self._discover(now_ms, out)
        elif self._role is Role.ELECTING:
            r = self._round
            assert r is not None
            if not r.voted and now_ms >= r.collect_deadline_ms:
                self._evaluate(now_ms, out)
            elif r.voted and r.decide_deadline_ms is not None and now_ms >= r.decide_deadline_ms:
                self._start_election(self._epoch + 1, now_ms, out)
        else:
            self._controller_tick(now_ms, out)
        return out

    def receive(self, msg: Input, now_ms: int) -> list[Output]:
        out: list[Output] = []
        sender = msg.leader if isinstance(msg, BeginEpoch) else msg.sender
        if sender == self.id or sender not in self.voters:
            return out  # not part of this quorum (or our own echo): ignore rather than trust it
        if isinstance(msg, PeerClosed):
            self._on_peer_closed(msg.sender, now_ms, out)
            return out
        if isinstance(msg, Heartbeat):
            self._closed.discard(sender)  # it answered: its process is there
            self._on_heartbeat(msg)
            return out
        if not isinstance(msg, BeginEpoch):  # a BeginEpoch may be relayed: it proves nothing of its leader
            self._closed.discard(sender)  # it speaks, so it is back
        if isinstance(msg, ElectionState):
            self._on_election_state(msg, now_ms, out)
        elif isinstance(msg, Evaluation):
            self._on_evaluation(msg, now_ms, out)
        elif isinstance(msg, BeginEpoch):
            self._on_begin_epoch(msg, now_ms, out)
        elif isinstance(msg, FetchRequest):
            self._on_fetch_request(msg, now_ms, out)
        elif isinstance(msg, FetchResponse):
            self._on_fetch_response(msg, now_ms, out)
        else:
            raise TypeError(f"not a quorum message: {msg!r}")
        return out

    def propose(self, records: list[Record], now_ms: int) -> tuple[int, list[Output]]:
        """Controller only: append `records` in the current epoch; returns (last offset, outputs)."""
        if self._role is not Role.CONTROLLER:
            raise NotControllerError(self._epoch, self._leader)
        if not records:
            raise ValueError("nothing to propose")
        last = self.log.append(records, self._epoch)
        out: list[Output] = []
        self._answer_parked(out)  # the held fetches have records now
        self._advance_hw_as_controller(out)  # a single-voter quorum commits at once
        return last, out

    # --- election ----------------------------------------------------------------------------------

    def _timeout(self) -> int:
        return self.config.election_timeout_ms + self._rng.randint(0, self.config.election_jitter_ms)

    def _own_state(self) -> ElectionState:
        return ElectionState(self._epoch, self.id, self.log.last_epoch, self.log.end_offset, self.leaderships)

    def _enter_epoch(self, epoch: int, out: list[Output]) -> None:
        """Move to a newer epoch with no vote and no leader; the caller sets the role."""
        if epoch <= self._epoch:
            raise InvariantError(f"epoch must grow: {self._epoch} -> {epoch}")
        if epoch > EPOCH.hi:
            raise InvariantError(f"epoch {epoch} does not fit Kafka's int32 epoch")
        self._epoch = epoch
        self._voted_for = None
        self._leader = None
        self._round = None
        self._tracker = None
        self._parked.clear()  # held fetches of an office we no longer hold: their followers fetch again
        self._leaderless = set()
        out.append(Persist(epoch, None))  # first: nothing of the new epoch may be sent before it is durable

    def _start_election(self, epoch: int, now_ms: int, out: list[Output], trigger: ElectionState | None = None) -> None:
        """Step 1: enter `epoch` (newer, or our own epoch if we may still join it) and announce our state."""
        if epoch > EPOCH.hi:
            # Kafka's epochs are int32: past the last one no batch or message could carry the epoch. Only an
            # epoch taken from a corrupt or forged message gets here; stay put rather than persist it.
            return
        if epoch > self._epoch:
            self._enter_epoch(epoch, out)
        self._role = Role.ELECTING
        self._leader = None
        self._tracker = None
        self._parked.clear()  # held fetches of an office we no longer hold: their followers fetch again
        self._joined_epoch = epoch
        r = ElectionRound(epoch, self._own_state(), now_ms + self.config.state_collection_ms)
        self._round = r
        if trigger is not None:
            r.states[trigger.sender] = trigger
        out.append(BecameFollower(epoch, None))
        for v in self._others:
            out.append(Send(v, r.own))
        if self._states_complete(r):
            self._evaluate(now_ms, out)

    def _states_complete(self, r: ElectionRound) -> bool:
        """Step 2 may start before the window ends: every voter's state is in, or at least a majority's are
        and each missing voter was reported gone (PeerClosed). Waiting for a dead voter's state only delays
        the vote; the window's length decides which states a vote compares, never whether it is safe."""
        missing = [v for v in self.voters if v not in r.states]
        return not missing or (len(r.states) >= self._majority and all(v in self._closed for v in missing))

    def _on_peer_closed(self, peer: int, now_ms: int, out: list[Output]) -> None:
        """The driver saw `peer`'s process go (closed connection, refused reconnect). Only a hint: each
        reaction below is one a timeout could have caused at this moment, so a wrong hint costs an election,
        never safety (docs/ELECTION.md section 4). A paused or cut-off peer produces no hint and is left to
        the timeouts."""
        self._closed.add(peer)
        if self._role is Role.FOLLOWER and self._leader == peer:
            # Our controller is gone: no fetch of ours will be answered again, so do not wait for the
            # election timeout to say so.
            self._start_election(self._epoch + 1, now_ms, out)
        elif self._role is Role.ELECTING:
            r = self._round
            assert r is not None
            if not r.voted and self._states_complete(r):
                self._evaluate(now_ms, out)

    def _on_heartbeat(self, m: Heartbeat) -> None:
        """The driver's heartbeat path heard from `m.sender` at `m.at_ms`. Only timers move, and only as far as
        a fetch at that moment would have moved them (section 4: timers are not part of the safety argument):
        a follower whose controller said it still leads our epoch does not start an election; a controller
        counts a follower of its epoch as heard from for check-quorum. A busy event loop (ours or the
        peer's) delays fetches, not heartbeats, so it no longer looks like a dead controller."""
        if self._role is Role.FOLLOWER:
            if m.sender == self._leader and m.epoch == self._epoch and m.leader == m.sender:
                self._election_deadline = max(self._election_deadline, m.at_ms + self._timeout())
        elif self._role is Role.CONTROLLER and m.epoch == self._epoch and m.leader == self.id:
            assert self._tracker is not None
            self._tracker.on_heard(m.sender, m.at_ms)

    def on_local_pause(self, paused_ms: int) -> None:
        """The driver's loop or process did not run for `paused_ms` (a gap between two turns of its timer far
        longer than their cadence). A follower's election timer counts only time it ran: the controller's fetch
        answers and heartbeats that arrived meanwhile are still unread in its sockets. Without this a broker
        resumed after a pause longer than the election timeout started an election at its first tick, before
        reading them, and its higher epoch deposed a healthy controller (an election round, leadership moves).
        Timers are outside the safety argument (section 4); a controller that did die during the pause is
        replaced by the others' timers, or by ours up to one timeout after the resume."""
        if self._role is Role.FOLLOWER and paused_ms > 0:
            self._election_deadline += paused_ms

    def _evaluate(self, now_ms: int, out: list[Output]) -> None:
        """Step 2: vote, once per epoch, for the most up-to-date state collected (ours included)."""
        r = self._round
        assert r is not None and not r.voted and self._voted_for is None
        choice = choose(r.states.values())
        r.voted = True
        r.decide_deadline_ms = (
            now_ms + self.config.evaluation_timeout_ms + self._rng.randint(0, self.config.election_jitter_ms)
        )
        self._voted_for = choice
        out.append(Persist(self._epoch, choice))
        ev = Evaluation(self._epoch, self.id, choice)
        for v in self._others:
            out.append(Send(v, ev))
        if choice == self.id:
            self._count_vote(self.id, now_ms, out)

    def _count_vote(self, voter: int, now_ms: int, out: list[Output]) -> None:
        """Step 3: a majority of evaluations naming us makes us the controller of this epoch."""
        r = self._round
        assert r is not None
        r.votes_for_me.add(voter)
        if len(r.votes_for_me) >= self._majority:
            self._become_controller(now_ms, out)

    def _become_controller(self, now_ms: int, out: list[Output]) -> None:
        r = self._round
        assert r is not None
        self._won = (self._epoch, frozenset(r.states))
        self._round = None
        self._role = Role.CONTROLLER
        self._leader = self.id
        self._tracker = FollowerTracker(now_ms)
        begin = BeginEpoch(self._epoch, self.id)
        for v in self._others:
            out.append(Send(v, begin))
            self._tracker.begin_sent_ms[v] = now_ms
        out.append(BecameController(self._epoch))
        # Records of earlier epochs only commit once a record of our epoch is replicated on a majority
        # (Raft §5.4.2); appending one now commits them without waiting for the next proposal.
        self.log.append([leader_change_record(self._epoch, self.id, self.voters)], self._epoch)
        self._next_fetch_ms = now_ms + self.config.begin_epoch_resend_ms
        self._advance_hw_as_controller(out)

    def _can_join_current(self) -> bool:
        return (
            self._role is Role.FOLLOWER
            and self._leader is None
            and self._voted_for is None
            and self._joined_epoch < self._epoch
        )

    def _tell_newer(self, to: int, out: list[Output]) -> None:
        """Answer a message from an older epoch so that its sender catches up."""
        if self._leader is not None:
            out.append(Send(to, BeginEpoch(self._epoch, self._leader)))
        elif self._role is Role.ELECTING and self._round is not None:
            out.append(Send(to, self._round.own))

    def _on_election_state(self, m: ElectionState, now_ms: int, out: list[Output]) -> None:
        if m.epoch > self._epoch:
            self._start_election(m.epoch, now_ms, out, trigger=m)
        elif m.epoch < self._epoch:
            self._tell_newer(m.sender, out)
        elif self._role is Role.ELECTING:
            r = self._round
            assert r is not None
            if not r.voted:
                r.states[m.sender] = m
                if self._states_complete(r):
                    self._evaluate(now_ms, out)
            elif self._voted_for is not None:
                # The sender may have missed our vote (loss, or it restarted); votes are idempotent.
                out.append(Send(m.sender, Evaluation(self._epoch, self.id, self._voted_for)))
        elif self._leader is not None:
            out.append(Send(m.sender, BeginEpoch(self._epoch, self._leader)))
        elif self._can_join_current():
            self._start_election(m.epoch, now_ms, out, trigger=m)

    def _on_evaluation(self, m: Evaluation, now_ms: int, out: list[Output]) -> None:
        if m.epoch > self._epoch:
            # An election we missed is under way; its vote cannot be for us (we sent no state in it).
            self._start_election(m.epoch, now_ms, out)
        elif m.epoch < self._epoch:
            self._tell_newer(m.sender, out)
        elif self._role is Role.ELECTING:
            if m.choice == self.id:
                self._count_vote(m.sender, now_ms, out)
        elif self._leader is not None:
            out.append(Send(m.sender, BeginEpoch(self._epoch, self._leader)))
        elif self._can_join_current():
            self._start_election(m.epoch, now_ms, out)

    def _on_begin_epoch(self, m: BeginEpoch, now_ms: int, out: list[Output]) -> None:
        if m.epoch < self._epoch:
            self._tell_newer(m.leader, out)
            return
        if m.epoch == self._epoch:
            if self._role is Role.CONTROLLER:
                raise InvariantError(f"node {m.leader} claims epoch {m.epoch}, which node {self.id} leads")
            if self._leader == m.leader:
                return
        else:
            self._enter_epoch(m.epoch, out)
        self._follow(m.leader, now_ms, out)

    def _follow(self, leader: int, now_ms: int, out: list[Output], fetch: bool = True) -> None:
        self._role = Role.FOLLOWER
        self._leader = leader
        self._round = None
        self._tracker = None
        self._parked.clear()  # held fetches of an office we no longer hold: their followers fetch again
        self._leaderless = set()
        self._election_deadline = now_ms + self._timeout()
        out.append(BecameFollower(self._epoch, leader))
        if fetch:
            self._send_fetch(now_ms, out)

    def _step_down(self, now_ms: int, out: list[Output]) -> None:
        """Stop acting as controller while staying in the epoch; a later timeout starts an election."""
        self._role = Role.FOLLOWER
        self._leader = None
        self._tracker = None
        self._parked.clear()  # held fetches of an office we no longer hold: their followers fetch again
        self._election_deadline = now_ms + self._timeout()
        out.append(BecameFollower(self._epoch, None))

    # --- replication: controller side ----------------------------------------------------------------

    def _controller_tick(self, now_ms: int, out: list[Output]) -> None:
        t = self._tracker
        assert t is not None
        timeout = self.config.election_timeout_ms
        if now_ms - t.since_ms >= timeout and t.live_voters(self._others, now_ms, timeout) < self._majority:
            # (Heard from = a fetch, or a heartbeat of a follower of our epoch on the driver's own path.)
            # Check-quorum: a controller cut off from a majority must stop, or it would keep answering
            # (and fencing brokers) while the majority elects someone else.
            self._step_down(now_ms, out)
            return
        due = [v for v, (_, at) in self._parked.items() if now_ms >= at]
        if due:
            self._answer_parked(out, due)
        if now_ms >= self._next_fetch_ms:
            # Housekeeping (BeginEpoch re-sends) at their own cadence: held fetches and check-quorum need no
            # more, and an idle controller's timer then wakes a few times a second rather than twenty.
            self._next_fetch_ms = now_ms + self.config.begin_epoch_resend_ms
            resend = self.config.begin_epoch_resend_ms
            # A follower that fetches does so at least every fetch_max_wait_ms (plus a round trip): one quiet for
            # longer, with no fetch held, may have missed BeginEpoch.
            quiet = resend + self.config.fetch_max_wait_ms
            begin = BeginEpoch(self._epoch, self.id)
            for v in self._others:
                last = t.last_fetch_ms.get(v)
                if (
                    v not in self._parked
                    and (last is None or now_ms - last >= quiet)
                    and now_ms - t.begin_sent_ms.get(v, -resend) >= resend
                ):
                    t.begin_sent_ms[v] = now_ms
                    out.append(Send(v, begin))

    def _on_fetch_request(self, m: FetchRequest, now_ms: int, out: list[Output]) -> None:
        if m.epoch > self._epoch:
            # The sender follows a newer controller than we know of: we are stale, stop at once.
            self._enter_epoch(m.epoch, out)
            self._step_down(now_ms, out)
            return
        if m.epoch < self._epoch or self._role is not Role.CONTROLLER:
            error = FENCED_EPOCH if m.epoch < self._epoch else NOT_CONTROLLER
            out.append(Send(m.sender, self._response(m, error=error)))
            return
        t = self._tracker
        assert t is not None
        div = diverging(self.log, m.fetch_offset, m.last_fetched_epoch)
        if div is not None:
            t.on_fetch(m.sender, now_ms, None)
            out.append(Send(m.sender, self._response(m, diverging_at=div)))
            return
        t.on_fetch(m.sender, now_ms, m.fetch_offset)
        earlier = self._parked.pop(m.sender, None)
        if earlier is not None:
            # A newer fetch from the same follower (it gave up waiting, or it does not long-poll): the held
            # one is answered now, so a follower that never waits still hears from us at every fetch.
            self._answer(earlier[0], out)
        self._advance_hw_as_controller(out)
        wait = min(m.max_wait_ms, self.config.fetch_max_wait_ms)
        if wait > 0 and m.fetch_offset == self.log.end_offset and t.sent_hw.get(m.sender) == self._hw:
            # Nothing new for it, not even the high watermark: hold the fetch until a record is appended, the
            # high watermark moves, or the wait ends (_answer_parked).
            self._parked[m.sender] = (m, now_ms + wait)
            return
        self._answer(m, out)

    def _answer(self, m: FetchRequest, out: list[Output]) -> None:
        """A successful answer to a fetch whose prefix matches our log: the records after it, and our HW."""
        t = self._tracker
        assert t is not None
        records = tuple(self.log.read(m.fetch_offset, self.config.fetch_max_records))
        t.sent_hw[m.sender] = self._hw
        out.append(Send(m.sender, self._response(m, records=records)))

    def _answer_parked(self, out: list[Output], voters: Sequence[int] | None = None) -> None:
        """Answer the held fetches of `voters` (all when None). Within our epoch our log only grows, so a held
        fetch's prefix still matches it."""
        for v in list(self._parked) if voters is None else voters:
            m, _ = self._parked.pop(v)
            self._answer(m, out)

    def _response(
        self,
        m: FetchRequest,
        *,
        error: str | None = None,
        records: tuple[Entry, ...] = (),
        diverging_at: tuple[int, int] | None = None,
    ) -> FetchResponse:
        return FetchResponse(
            epoch=self._epoch,
            leader=self._leader,
            sender=self.id,
            records=records,
            high_watermark=self._hw,
            diverging_epoch=None if diverging_at is None else diverging_at[0],
            diverging_end_offset=None if diverging_at is None else diverging_at[1],
            error=error,
            fetch_offset=m.fetch_offset,
            last_fetched_epoch=m.last_fetched_epoch,
        )

    def _advance_hw_as_controller(self, out: list[Output]) -> None:
        t = self._tracker
        assert t is not None
        n = t.majority_end(self.log.end_offset, self._others, self._majority)
        # Only a record of our own epoch may be counted: an older record on a majority can still be
        # overwritten by a controller that never had it (Raft §5.4.2, Figure 8).
        if n > self._hw and self.log.epoch_of(n - 1) == self._epoch:
            self._set_hw(n, out)

    def _set_hw(self, hw: int, out: list[Output]) -> None:
        if hw > self._hw:
            self._hw = hw
            out.append(Committed(hw))
            if self._parked:
                self._answer_parked(out)  # the followers learn the new high watermark at once

    # --- replication: follower side ------------------------------------------------------------------

    def _send_fetch(self, now_ms: int, out: list[Output]) -> None:
        assert self._leader is not None
        wait = self.config.fetch_max_wait_ms
        # Sent again if unanswered by then (lost, or its controller is gone); an answer schedules the next one.
        self._next_fetch_ms = now_ms + wait + self.config.fetch_interval_ms
        req = FetchRequest(
            self._epoch, self.id, self.log.end_offset, self.log.last_epoch, self.incarnation, max_wait_ms=wait
        )
        out.append(Send(self._leader, req))

    def _discover(self, now_ms: int, out: list[Output]) -> None:
        """A follower that knows no controller (just restarted, or stepped down) sends its fetch to every
        voter. The controller of our epoch answers it like any fetch; the others answer with the controller
        they know (we follow it), or a newer epoch (we join it), or say that they know none. When a majority,
        us included, know none, no controller can be in office for long, so we start the election the
        timeout would start later. Whether an election may start is never a safety question (section 4);
        this only decides when. A restarted node thus finds a live controller within a round trip and,
        after a restart of every broker, the election starts as soon as a majority is up."""
        self._next_fetch_ms = now_ms + self.config.fetch_interval_ms
        req = FetchRequest(self._epoch, self.id, self.log.end_offset, self.log.last_epoch, self.incarnation)
        for v in self._others:
            out.append(Send(v, req))

    def _on_fetch_response(self, m: FetchResponse, now_ms: int, out: list[Output]) -> None:
        if m.epoch < self._epoch:
            return  # from a deposed controller, or an answer to a fetch of ours from an older epoch
        if m.epoch > self._epoch:
            self._enter_epoch(m.epoch, out)
            if m.leader is not None and m.leader != self.id:
                self._follow(m.leader, now_ms, out)
            else:
                self._step_down(now_ms, out)
            return
        if m.error is not None:
            if self._role is Role.FOLLOWER and self._leader is None:
                if m.leader not in (None, self.id):
                    self._follow(m.leader, now_ms, out)
                elif m.leader is None:
                    # An answer to _discover: the sender knows no controller of our epoch either.
                    self._leaderless.add(m.sender)
                    if len(self._leaderless) + 1 >= self._majority:
                        self._start_election(self._epoch + 1, now_ms, out)
            return
        # A successful response of our epoch can only come from its controller.
        if self._role is Role.CONTROLLER:
            raise InvariantError(f"node {m.sender} answers fetches in epoch {m.epoch}, which node {self.id} leads")
        if self._leader != m.sender:
            if self._leader is not None:
                raise InvariantError(f"two controllers in epoch {m.epoch}: {self._leader} and {m.sender}")
            # BeginEpoch was lost but the controller answered; the response below decides the next fetch.
            self._follow(m.sender, now_ms, out, fetch=False)
        self._election_deadline = now_ms + self._timeout()
        if (self.log.end_offset, self.log.last_epoch) != (m.fetch_offset, m.last_fetched_epoch):
            return  # answers a log state we have left (duplicate or reordered response)
        if m.diverging_epoch is not None and m.diverging_end_offset is not None:
            offset = truncation_offset(self.log, m.diverging_epoch, m.diverging_end_offset)
            if offset < self._hw:
                raise InvariantError(f"truncation to {offset} would drop committed records below {self._hw}")
            if offset < self.log.end_offset:
                self.log.truncate_to(offset)
                out.append(Truncated(offset))
            self._send_fetch(now_ms, out)
            return
        if m.records:
            self.log.append_replicated(m.records)
        # Our log now matches the controller's up to its end, so its HW holds for us up to there.
        self._set_hw(min(m.high_watermark, self.log.end_offset), out)
        if m.records:
            self._send_fetch(now_ms, out)
        else:
            self._next_fetch_ms = now_ms + self.config.fetch_interval_ms
