"""Drives the sans-IO QuorumNode inside a broker: the clock, the peer channels,
the persisted vote, and the committed metadata records handed to the broker.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import time
from pathlib import Path
from typing import Any, Callable

from election import (
    BecameController,
    BecameFollower,
    Committed,
    NotControllerError,
    Output,
    Persist,
    QuorumConfig,
    QuorumNode,
    Send,
    Truncated,
    from_wire,
)
from election.log import MetadataLog
from net.errors import ErrorCode, KafkaLiteError
from net.peers import PeerChannel
from net.protocol import ApiKey

log = logging.getLogger("kafkalite.quorum")
STATE_FILE = "quorum-state"  # KRaft's name for the same thing


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
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        json.dump({"epoch": epoch, "voted_for": voted_for}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class QuorumDriver:
    def __init__(
        self,
        broker_id: int,
        voters: dict[int, tuple[str, int]],
        mlog: MetadataLog,
        state_dir: Path,
        config: QuorumConfig,
        on_committed: Callable[[list[tuple[int, int, dict[str, Any]]]], None],
        on_role: Callable[[bool, int, int | None], None],
    ) -> None:
        self.broker_id = broker_id
        self.mlog = mlog
        self.state_path = state_dir / STATE_FILE
        self.on_committed = on_committed
        self.on_role = on_role
        self.applied = 0  # next offset to apply
        # Called (with no arguments) after committed records were applied; the controller service uses it to
        # act the moment its new epoch's first record commits instead of at its next periodic tick.
        self.applied_listeners: list[Callable[[], None]] = []
        now = _now_ms()
        persisted = read_state(self.state_path)
        single = list(voters) == [broker_id]
        # A quorum of one need not wait out a failure-detection timeout before electing itself.
        start = now - config.election_timeout_ms - config.election_jitter_ms - 1 if single else now
        self.node = QuorumNode(broker_id, list(voters), mlog, config, persisted, start, random.Random())
        self.peers = {b: PeerChannel(broker_id, b, host, port) for b, (host, port) in voters.items() if b != broker_id}
        self._commit_waiters: list[tuple[int, asyncio.Future]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._stopped = False
        self.election_started_ms: int | None = None

    # --- lifecycle -----------------------------------------------------------

    def start(self) -> None:
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
        self._timer = asyncio.get_running_loop().call_later(max(delay_ms, 1) / 1000, self._on_timer)

    def _on_timer(self) -> None:
        now = _now_ms()
        self._execute(self.node.tick(now))
        self._schedule(min(self.node.next_deadline_ms() - _now_ms(), 50))

    # --- inputs --------------------------------------------------------------

    def receive(self, wire: list) -> None:
        try:
            msg = from_wire(wire)
        except (ValueError, TypeError, IndexError) as e:
            log.warning("dropping malformed quorum message: %s", e)
            return
        self._execute(self.node.receive(msg, _now_ms()))

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
                self.on_role(True, o.epoch, self.broker_id)
            elif isinstance(o, BecameFollower):
                if o.leader is not None:
                    log.info("following controller %d in epoch %d", o.leader, o.epoch)
                else:
                    log.info("no controller in epoch %d", o.epoch)  # an election runs, or we stepped down
                self._fail_waiters(NotControllerError_(f"controller changed (epoch {o.epoch})"))
                self.on_role(False, o.epoch, o.leader)
            elif isinstance(o, Truncated):
                log.info("metadata log truncated to %d", o.offset)

    def _apply(self, hw: int) -> None:
        before = self.applied
        while self.applied < hw:
            entries = self.mlog.read(self.applied, 1000)
            entries = [e for e in entries if e[0] < hw]
            if not entries:
                break
            self.on_committed(entries)
            self.applied = entries[-1][0] + 1
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
