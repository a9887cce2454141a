"""Drives the sans-IO QuorumNode inside a broker: the clock, the peer channels,
the persisted vote, and the committed metadata records handed to the broker.

Two broker-level rules live here because they ride on the quorum's fetches (both are modelled by
tests/sim/replication_sim.py, whose defaults this must match):

- Incarnations: every process of a broker has a larger incarnation than the previous one
  (`next_incarnation`) and sends it with its fetches; the driver remembers the newest one seen per broker
  (`broker_incarnation`), and the controller refuses AlterPartition requests from older processes
  (broker/controller/logic.py check_broker_incarnation; the simulator's MetaFetch.incarnation).
- Catch-up after start: committed records are handed to the broker only once its log has reached the
  committed end the controller reported in the first fetch answer this process got (KRaft's
  MetadataLoader; the simulator's catch_up_to), and then all at once, so the broker never publishes an
  image older than the cluster's state at its start (it could re-create a partition leader with an ISR
  the controller has since grown, and let the HW pass records the other members lack). A broker that
  becomes controller is caught up by definition (its log holds every committed record), so a cluster
  of one starts at once.

A peer whose process is gone (its connection closed and a reconnect refused: broker/network/peers.py) is reported to
the node as `PeerClosed` (a follower of that controller elects at once, a round stops waiting for its
state) and to the controller's liveness rule (fetch_liveness_expiry's `closed_at`: fenced now, not after
the session timeout). Both are hints the safety argument does not need (docs/ELECTION.md section 4); a
paused or cut-off peer gives none and is still judged by the timeouts.

Heartbeats (broker/controller/heartbeat.py) are exchanged by a thread of their own, so a busy event loop here
or at a peer does not look like a dead broker or a dead controller. At every timer the driver publishes its
controller and epoch to the heartbeat thread (and, with them, that this loop is alive), then feeds what the
thread heard into the node as `Heartbeat` inputs (they move its timers only) before ticking it; the
controller's liveness rule reads the thread's records directly (`broker_expires_at`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from pathlib import Path
from typing import Any, Callable

from broker.controller.heartbeat import HeartbeatBoard
from broker.log.checkpoint import atomic_write
from broker.network.peers import PeerChannel
from election import (
    BecameController,
    BecameFollower,
    Committed,
    FetchRequest,
    FetchResponse,
    Heartbeat,
    NotControllerError,
    Output,
    PeerClosed,
    Persist,
    QuorumConfig,
    QuorumNode,
    Send,
    Truncated,
    from_wire,
)
from election.coordination import LocalPauses, fetch_liveness_expiry
from election.log import MetadataLog
from net.errors import ErrorCode, KafkaLiteError
from net.protocol import ApiKey
from net.security import ClientSecurity
from net.wire_types import BROKER_ID, EPOCH

log = logging.getLogger("kafkalite.quorum")
STATE_FILE = "quorum-state"  # KRaft's name for the same thing
INCARNATION_FILE = "broker-incarnation"
# The quorum timer's longest sleep when the node has nothing due sooner (it was 50 ms until 28 November 2026: twenty
# wake-ups a second of every idle broker). Well below LocalPauses' 1 s, which reads a longer gap as our own stall.
TIMER_MAX_MS = 250


class NotControllerError_(KafkaLiteError):  # noqa: N801 - keeps the quorum's exception name free
    code = ErrorCode.NOT_CONTROLLER


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


def read_state(path: Path) -> tuple[int, int | None]:
    try:
        d = json.loads(path.read_text())
        return int(d["epoch"]), d.get("voted_for")
    except FileNotFoundError:
        return 0, None


def write_state(path: Path, epoch: int, voted_for: int | None) -> None:
    # Defensive: what is persisted must fit the wire (net/wire_types.py); decoding refuses anything else,
    # and an out-of-range epoch here would survive every restart.
    EPOCH.check(epoch, "quorum-state epoch")
    BROKER_ID.check_optional(voted_for, "quorum-state voted_for")
    atomic_write(path, json.dumps({"epoch": epoch, "voted_for": voted_for}))


def next_incarnation(state_dir: Path) -> int:
    """A number larger than any earlier process of this broker used (read, bumped and fsynced at start).

    The wall clock (ms) is a floor, so that a broker whose state directory was wiped still starts above its
    earlier processes (unless the clock also went back): an incarnation below one the controller has seen
    would have all its AlterPartition requests refused as stale."""
    path = state_dir / INCARNATION_FILE
    try:
        previous = int(json.loads(path.read_text())["incarnation"])
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        previous = 0
    incarnation = max(previous + 1, int(time.time() * 1000))
    atomic_write(path, json.dumps({"incarnation": incarnation}))
    return incarnation


class QuorumDriver:
    """The custom coordination mode (election/coordination.py `Coordination`)."""

    def __init__(
        self,
        broker_id: int,
        voters: dict[int, tuple[str, int]],
        mlog: MetadataLog,
        state_dir: Path,
        config: QuorumConfig,
        on_committed: Callable[[list[tuple[int, int, dict[str, Any]]]], None],
        on_role: Callable[[bool, int, int | None], None],
        incarnation: int = 0,
        security: ClientSecurity | None = None,
        heartbeats: HeartbeatBoard | None = None,
        discovery: ClientSecurity | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.incarnation = incarnation
        # Shared with the heartbeat thread (None: no heartbeats, e.g. a cluster of one).
        self.heartbeats = heartbeats
        self.own_pauses = LocalPauses()  # this loop's stalls, which the liveness rule does not hold against peers
        # broker -> newest incarnation seen in its fetches (ours: we never fetch from ourselves). Kept across
        # role changes: a process that once fetched exists, whoever is controller.
        self._incarnations: dict[int, int] = {broker_id: incarnation}
        # The committed end to reach before handing records to the broker: None until the first answer of a
        # controller to our fetch (or until we become controller ourselves).
        self.catch_up_to: int | None = None
        self.caught_up = False
        self._started_ms = _now_ms()
        self.mlog = mlog
        self.state_path = state_dir / STATE_FILE
        self.on_committed = on_committed
        self.on_role = on_role
        self.applied = 0  # next offset to apply
        # Called (with no arguments) after committed records were applied; the controller service uses it to
        # act the moment its new epoch's first record commits instead of at its next periodic tick.
        self.applied_listeners: list[Callable[[], None]] = []
        # Called when a peer's process is seen gone (_on_peer_closed); otherwise liveness here is the clock's.
        self.liveness_listeners: list[Callable[[], None]] = []
        self.voters = dict(voters)
        now = _now_ms()
        persisted = read_state(self.state_path)
        single = list(voters) == [broker_id]
        # A quorum of one need not wait out a failure-detection timeout before electing itself.
        start = now - config.election_timeout_ms - config.election_jitter_ms - 1 if single else now
        self.node = QuorumNode(broker_id, list(voters), mlog, config, persisted, start, random.Random(), incarnation)
        self.peers = {
            b: PeerChannel(
                broker_id, b, host, port, on_closed=self._on_peer_closed, security=security, discovery=discovery
            )
            for b, (host, port) in voters.items()
            if b != broker_id
        }
        # broker -> when (monotonic ms) its process was first seen gone, until it shows life again.
        self._closed_since: dict[int, int] = {}
        self._commit_waiters: list[tuple[int, asyncio.Future[Any]]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._timer_due_ms = 0
        self._stopped = False
        self.election_started_ms: int | None = None

    # --- lifecycle -----------------------------------------------------------

    def start(self) -> None:
        for p in self.peers.values():
            p.connect()  # the first election's messages must not be lost to connections not made yet
        self._schedule(0)

    def stop(self) -> None:
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
        for p in self.peers.values():
            p.close()
        self._fail_waiters(NotControllerError_("broker is shutting down"))

    @property
    def stopped(self) -> bool:
        return self._stopped

    def _schedule(self, delay_ms: int) -> None:
        if self._stopped:
            return
        if self._timer is not None:
            self._timer.cancel()
        delay_ms = max(delay_ms, 1)
        self._timer_due_ms = _now_ms() + delay_ms
        self._timer = asyncio.get_running_loop().call_later(delay_ms / 1000, self._on_timer)

    def _on_timer(self) -> None:
        now = _now_ms()
        # This timer runs at least every TIMER_MAX_MS: a gap of LocalPauses' threshold (1 s) is our own stall.
        paused = self.own_pauses.observe(now)
        if paused:
            # Our own stall (SIGSTOP, a starved CPU): the controller's fetch answers waited in our socket
            # meanwhile, so the silence is ours, not its (ELECTION.md section 3, "Own pauses").
            self.node.on_local_pause(paused)
        self._feed_heartbeats(now)  # first: a tick after a stall must see what the heartbeat thread heard
        self._execute(self.node.tick(now))
        self._schedule(min(self.node.next_deadline_ms() - _now_ms(), TIMER_MAX_MS))

    def _wake_sooner(self) -> None:
        """A message or a proposal may bring the node's next deadline forward (a follower's next fetch, an
        election's state-collection window): the timer is moved to it, so the node is ticked on time without the
        timer waking every few milliseconds in case."""
        if self._timer is not None and self.node.next_deadline_ms() < self._timer_due_ms:
            self._schedule(self.node.next_deadline_ms() - _now_ms())

    def _feed_heartbeats(self, now: int) -> None:
        board = self.heartbeats
        if board is None:
            return
        board.publish(self.node.epoch, self.node.leader_id, now)
        for peer, view in board.take_new():
            closed = self._closed_since.get(peer)
            if closed is not None and view.at_ms > closed:
                del self._closed_since[peer]  # it heartbeats: a process is there again
                log.info("broker %d is back (heartbeat)", peer)
            self._execute(self.node.receive(Heartbeat(peer, view.epoch, view.leader, view.at_ms), now))

    # --- inputs --------------------------------------------------------------

    def receive(self, wire: list[Any]) -> None:
        try:
            msg = from_wire(wire)
        except (ValueError, TypeError, IndexError) as e:
            log.warning("dropping malformed quorum message: %s", e)
            return
        sender = getattr(msg, "sender", None)
        if sender in self.peers:
            self.peers[sender].wake()  # our channel to it may be backing off after it refused us
        if sender in self._closed_since:
            del self._closed_since[sender]  # it speaks: a process is there again
            log.info("broker %d is back", sender)
        if isinstance(msg, FetchRequest) and msg.sender in self.node.voters and msg.sender != self.broker_id:
            # Any fetch proves its process started, whatever the quorum makes of it (the simulator's
            # controller records MetaFetch.incarnation the same way).
            if msg.incarnation > self._incarnations.get(msg.sender, 0):
                self._incarnations[msg.sender] = msg.incarnation
        outputs = self.node.receive(msg, _now_ms())
        if (
            self.catch_up_to is None
            and isinstance(msg, FetchResponse)
            and msg.error is None
            and msg.epoch == self.node.epoch
            and msg.sender == self.node.leader_id
        ):
            # The first answer of our controller: what it had committed then is what we must have applied
            # before acting on metadata at all.
            self._set_catch_up_target(msg.high_watermark)
            self._execute(outputs)
            self._apply(self.node.high_watermark)  # in case our log already reaches it (no new Committed)
            return
        self._execute(outputs)

    def _on_peer_closed(self, peer: int) -> None:
        """A peer channel's connection attempt was refused: nothing listens at `peer`'s address."""
        if self._stopped:
            return
        now = _now_ms()
        if peer not in self._closed_since:
            self._closed_since[peer] = now
            log.info("broker %d's process is gone (connection closed, reconnect refused)", peer)
            # The controller fences it now rather than after its session timeout (broker_expires_at).
            for listener in self.liveness_listeners:
                listener()
        self._execute(self.node.receive(PeerClosed(peer), now))

    @property
    def controller_id(self) -> int | None:
        return self.node.leader_id

    @property
    def controller_epoch(self) -> int:
        return int(self.node.epoch)

    async def relay_to_controller(self, body: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        """No relay in this mode: a broker that cannot reach the controller stops fetching metadata from it
        and is fenced, which moves its leaderships (election/coordination.py)."""
        return None

    @property
    def log_end_offset(self) -> int:
        return self.mlog.end_offset

    def known_brokers(self) -> dict[int, tuple[str, int]]:
        return self.voters

    def broker_expires_at(self, broker_id: int, epoch: int, since_ms: int, session_timeout_ms: int) -> int | None:
        """Fetches and heartbeats are signs of life: see election/coordination.py fetch_liveness_expiry. The
        heartbeat thread's record is read here, not only fed to the node: after a stall of this loop the
        controller's check must see the heartbeats that arrived meanwhile."""
        board = self.heartbeats
        return fetch_liveness_expiry(
            self.node.follower_last_fetch_ms(broker_id),
            broker_id in self.node.voters_seen_in_election(epoch),
            since_ms,
            session_timeout_ms,
            self._closed_since.get(broker_id),
            board.last_heard_ms(broker_id) if board is not None else None,
            # A broker that sent no state in our election but heartbeated this recently before we won is alive
            # (its loop was busy); a controller that died has been silent for an election timeout.
            self.node.config.election_timeout_ms // 2,
            self.own_pauses,
        )

    def broker_incarnation(self, broker_id: int) -> int:
        """The newest incarnation of `broker_id` seen in its fetches (0: none)."""
        return self._incarnations.get(broker_id, 0)

    def _set_catch_up_target(self, offset: int) -> None:
        self.catch_up_to = offset
        log.info("metadata: first committed end is %d; publishing once our log reaches it", offset)

    async def propose(self, records: list[dict[str, Any]], timeout: float = 10.0) -> int:
        """Append as controller and wait until committed; returns the last offset."""
        try:
            last, out = self.node.propose(records, _now_ms())
        except NotControllerError as e:
            raise NotControllerError_(f"broker {self.broker_id} is not the controller (leader {e}") from None
        fut = asyncio.get_running_loop().create_future()
        self._commit_waiters.append((last, fut))
        self._execute(out)
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout)
        except TimeoutError:
            raise KafkaLiteError("metadata change not committed in time", ErrorCode.REQUEST_TIMED_OUT) from None
        return last

    # --- outputs, in order ---------------------------------------------------

    def _execute(self, outputs: list[Output]) -> None:
        for o in outputs:
            if isinstance(o, Send):
                peer = self.peers.get(o.to)
                if peer is not None:
                    peer.send_oneway(ApiKey.QUORUM, {"m": o.msg.to_wire()})
            elif isinstance(o, Persist):
                # Must be durable before anything after it goes out: a small fsync, on purpose inline.
                write_state(self.state_path, o.epoch, o.voted_for)
                if self.election_started_ms is None:
                    self.election_started_ms = _now_ms()  # the first Persist of an election: it starts now
                if o.voted_for is not None:
                    log.info("voted for %d in epoch %d", o.voted_for, o.epoch)  # end of the state-collection window
            elif isinstance(o, Committed):
                self._apply(o.high_watermark)
            elif isinstance(o, BecameController):
                log.info("became controller in epoch %d", o.epoch)
                if self.heartbeats is not None:
                    self.heartbeats.publish(o.epoch, self.broker_id, _now_ms())
                if self.catch_up_to is None:
                    # Elected, so our log holds every committed record: our own high watermark is the target.
                    self._set_catch_up_target(0)
                self.on_role(True, o.epoch, self.broker_id)
            elif isinstance(o, BecameFollower):
                if self.heartbeats is not None:
                    self.heartbeats.publish(o.epoch, o.leader, _now_ms())
                if o.leader is not None:
                    log.info("following controller %d in epoch %d", o.leader, o.epoch)
                else:
                    log.info("no controller in epoch %d", o.epoch)  # an election runs, or we stepped down
                self._fail_waiters(NotControllerError_(f"controller changed (epoch {o.epoch})"))
                self.on_role(False, o.epoch, o.leader)
            elif isinstance(o, Truncated):
                log.info("metadata log truncated to %d", o.offset)
        self._wake_sooner()

    def _apply(self, hw: int) -> None:
        before = self.applied
        if not self.caught_up and self.catch_up_to is not None and hw >= self.catch_up_to:
            self.caught_up = True
            log.info(
                "metadata: caught up to committed offset %d, %d ms after start; publishing",
                hw,
                _now_ms() - self._started_ms,
            )
        if self.caught_up:
            # Everything committed we hold, in ONE call: the broker publishes the image once, so no partition
            # is acted on with a state that later records in the same batch have replaced (the simulator
            # applies a fetched batch the same way).
            pending: list[tuple[int, int, dict[str, Any]]] = []
            nxt = self.applied
            while nxt < hw:
                entries = [e for e in self.mlog.read(nxt, 1000) if e[0] < hw]
                if not entries:
                    break
                pending.extend(entries)
                nxt = entries[-1][0] + 1
            if pending:
                self.on_committed(pending)
                self.applied = nxt
        if self.applied > before:
            for listener in self.applied_listeners:
                listener()
        done = [(o, f) for o, f in self._commit_waiters if o < hw]
        self._commit_waiters = [(o, f) for o, f in self._commit_waiters if o >= hw]
        for _, f in done:
            if not f.done():
                f.set_result(None)

    def _fail_waiters(self, exc: Exception) -> None:
        waiters, self._commit_waiters = self._commit_waiters, []
        for _, f in waiters:
            if not f.done():
                f.set_exception(exc)
