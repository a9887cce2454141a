"""Broker heartbeats on a path that request handling cannot starve (custom coordination mode).

Fetches of the metadata log ride on the broker's one event loop, so a loop that stalls for a while (a busy
2-core machine, a long fsync, a big batch of work) used to look exactly like a dead broker: the controller
fenced it after its session timeout, or a follower whose controller's answers were late started an
election. A killed broker does not need any of this (its closed connections tell its peers within
milliseconds, broker/network/peers.py), so liveness by timeout can be patient, and it can be judged on a
path of its own:

- `HeartbeatThread`: a thread with its own event loop, its own listening socket and its own connections to
  every other voter. Every `broker.heartbeat.interval.ms` it sends each peer a BROKER_HEARTBEAT (our id,
  incarnation, and the controller and epoch we follow) and records the answer (the peer's controller and
  epoch); it answers the peers' heartbeats the same way and records them. Its listener authenticates like
  the broker's inter-broker listener (TLS, SASL or the cluster secret, CLUSTER_ACTION on the cluster), so a
  forged heartbeat is refused and recorded nowhere. A peer learns the heartbeat port from the broker's
  native listener's ApiVersions answer (the port only).
- `HeartbeatBoard`: what the two threads share, under one lock. The broker's loop publishes the controller
  and epoch it follows, and that it is alive, at every quorum tick; the heartbeat thread records when it
  last heard from each peer. The quorum driver feeds the records into the sans-IO node as `Heartbeat`
  inputs (election/messages.py) and passes them to the liveness rule (election/coordination.py).

A watchdog keeps a wedged broker from heartbeating forever: the thread sends and answers only while the
broker's loop has shown progress (a quorum tick or a request handled) within `stall_limit_ms` (the session
timeout). A loop stall shorter than that costs nothing; a longer one is judged from its start like any
silence.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from broker.network.authenticator import ListenerSecurity
from broker.network.peers import listener_ports
from broker.network.server import ConnectionContext, NativeCodec, NetServer, error_body
from broker.utils.stall_sampler import StallSampler
from net.connection import BrokerConnection, raise_for_error
from net.errors import ErrorCode, KafkaLiteError, NetworkError
from net.protocol import ApiKey
from net.security import ClientSecurity
from net.wire_types import BROKER_ID, EPOCH, WireRangeError

log = logging.getLogger("kafkalite.heartbeat")


def now_ms() -> int:
    """The quorum driver's clock (monotonic ms), shared by both threads."""
    return int(time.monotonic() * 1000)


@dataclass(frozen=True, slots=True)
class PeerView:
    """One heartbeat exchanged with a peer: when, and the controller and epoch the peer followed then."""

    at_ms: int
    epoch: int
    leader: int | None


class HeartbeatBoard:
    """State shared by the broker's event loop and its heartbeat thread (each method takes the lock)."""

    def __init__(self, broker_id: int, incarnation: int, stall_limit_ms: int) -> None:
        self.broker_id = broker_id
        self.incarnation = incarnation
        self.stall_limit_ms = stall_limit_ms
        self._lock = threading.Lock()
        self._epoch = 0
        self._leader: int | None = None
        self._loop_alive_ms = now_ms()
        self.loop_thread: int | None = None  # the broker loop's thread, for the stall sampler's stacks
        self._heard: dict[int, PeerView] = {}
        self._fed: dict[int, int] = {}  # peer -> at_ms of the newest view handed to the quorum node

    # --- the broker's loop ---

    def publish(self, epoch: int, leader: int | None, at_ms: int) -> None:
        """The broker's loop is alive at `at_ms` and follows `leader` in `epoch`."""
        with self._lock:
            self._epoch, self._leader, self._loop_alive_ms = epoch, leader, at_ms
            self.loop_thread = threading.get_ident()

    def progress(self, at_ms: int) -> None:
        """The broker's loop handled a request at `at_ms`: alive, even while it is too busy to tick. On a
        starved machine one pass of the loop can handle requests for seconds before its next quorum tick
        (sampled under CPU hogs: 12 s); a wedged loop handles none. A plain store, no lock: the only writer
        is the loop's thread, and an int store is atomic."""
        self._loop_alive_ms = at_ms

    def take_new(self) -> list[tuple[int, PeerView]]:
        """Views recorded since the last call (newest per peer), for the quorum node."""
        with self._lock:
            new = [(p, v) for p, v in self._heard.items() if v.at_ms > self._fed.get(p, -1)]
            for p, v in new:
                self._fed[p] = v.at_ms
        return new

    def last_heard_ms(self, peer: int) -> int | None:
        with self._lock:
            v = self._heard.get(peer)
        return None if v is None else v.at_ms

    # --- the heartbeat thread ---

    def own_view(self, at_ms: int) -> tuple[int, int | None] | None:
        """(epoch, controller) to send or answer with; None while the broker's loop is stalled past the limit
        (a wedged broker must not look alive)."""
        with self._lock:
            if at_ms - self._loop_alive_ms > self.stall_limit_ms:
                return None
            return self._epoch, self._leader

    def loop_stalled_ms(self, at_ms: int) -> int:
        with self._lock:
            return at_ms - self._loop_alive_ms

    def record(self, peer: int, epoch: int, leader: int | None, at_ms: int) -> None:
        with self._lock:
            old = self._heard.get(peer)
            if old is None or at_ms >= old.at_ms:
                self._heard[peer] = PeerView(at_ms, epoch, leader)


class HeartbeatApis:
    """The heartbeat listener's only handler: BROKER_HEARTBEAT from a broker with CLUSTER_ACTION."""

    def __init__(self, board: HeartbeatBoard, voters: set[int], authorize: Callable[[ConnectionContext], bool]) -> None:
        self.board = board
        self.voters = voters
        self.authorize = authorize
        self.refused = 0  # heartbeats refused (unauthorized or malformed), for the tests and the logs

    def handle(self, api_key: int, version: int, body: dict[str, Any], ctx: ConnectionContext) -> dict[str, Any]:
        if api_key != ApiKey.BROKER_HEARTBEAT:
            return error_body(ErrorCode.UNSUPPORTED_VERSION, "this is a broker's heartbeat listener")
        if not self._authorized(ctx):
            self.refused += 1
            log.warning("refused a heartbeat from %s at %s: no ClusterAction on the cluster", ctx.principal, ctx.peer)
            return error_body(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "heartbeats need ClusterAction on the cluster")
        sender, epoch, leader = body.get("broker_id"), body.get("epoch"), body.get("leader")
        if sender not in self.voters or sender == self.board.broker_id:
            self.refused += 1
            return error_body(ErrorCode.INVALID_REQUEST, f"not a heartbeat of a peer broker: {sender!r}")
        try:
            epoch = EPOCH.check(epoch, "epoch")
            BROKER_ID.check_optional(leader, "leader")
        except WireRangeError as e:
            self.refused += 1
            return error_body(ErrorCode.INVALID_REQUEST, str(e))
        at = now_ms()
        self.board.record(sender, epoch, leader, at)
        view = self.board.own_view(at)
        if view is None:
            stalled = self.board.loop_stalled_ms(at)
            return error_body(ErrorCode.BROKER_NOT_AVAILABLE, f"broker's event loop stalled for {stalled} ms")
        return {"error_code": 0, "epoch": view[0], "leader": view[1]}

    def _authorized(self, ctx: ConnectionContext) -> bool:
        # The ACLs are the metadata image's, changed by the broker's loop meanwhile: a set that changes size
        # while it is read raises, and a second read sees the new set.
        for _ in range(3):
            try:
                return self.authorize(ctx)
            except RuntimeError:
                continue
        return False


class _PeerBeat:
    """One peer's heartbeat outcomes, for the logs: a streak of failures is logged once, at its start."""

    def __init__(self, peer: int) -> None:
        self.peer = peer
        self.last_answer = time.monotonic()  # of the current connection
        self.failing = False
        self.ever_answered = False

    def answered(self) -> None:
        self.last_answer = time.monotonic()
        self.ever_answered = True
        if self.failing:
            log.info("heartbeats to broker %d answered again", self.peer)
            self.failing = False

    def failed(self, e: BaseException) -> None:
        if not self.failing:
            # Before the first answer the peer may simply not be up yet: not worth a line.
            log.log(
                logging.INFO if self.ever_answered else logging.DEBUG, "heartbeat to broker %d failed: %s", self.peer, e
            )
            self.failing = True


STALL_REPORT_MS = 2000  # a loop stall this long is logged with where the loop's thread was


class HeartbeatThread:
    """Sends and answers heartbeats from a thread with its own event loop (see the module docstring)."""

    def __init__(
        self,
        board: HeartbeatBoard,
        peers: dict[int, tuple[str, int]],
        interval_ms: int,
        sock: socket.socket,
        listener: tuple[ListenerSecurity, ssl.SSLContext | None],
        authorize: Callable[[ConnectionContext], bool],
        security: ClientSecurity | None = None,
        max_frame: int = 1 << 20,
        discovery: ClientSecurity | None = None,
    ) -> None:
        self.board = board
        self.discovery = discovery  # how to ask a peer's native listener for its heartbeat port
        self.peers = {b: a for b, a in peers.items() if b != board.broker_id}
        self.interval_s = interval_ms / 1000
        # How long a connection may go without any answer before it is given up (the session timeout: by
        # then the peer is judged silent anyway), and how long a connection or login may take.
        self.patience_s = max(self.interval_s, board.stall_limit_ms / 1000)
        self.security = security
        self._sock = sock
        self.port: int = sock.getsockname()[1]
        self._listener = listener
        self._max_frame = max_frame
        self.apis = HeartbeatApis(board, set(peers), authorize)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._client_id = f"broker-{board.broker_id}-heartbeat"
        # From this thread, where the broker's loop thread is when it stalls for STALL_REPORT_MS or more.
        self.stall_sampler = StallSampler(
            lambda: board.loop_stalled_ms(now_ms()), lambda: board.loop_thread, STALL_REPORT_MS
        )

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{self.board.broker_id}", daemon=True)
        self._thread.start()
        self._ready.wait(10)

    def stop(self, timeout: float = 5.0) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:
                pass  # the loop already ended
        if self._thread is not None:
            self._thread.join(timeout)
        else:
            self._sock.close()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._main())
        except Exception:
            log.exception("the heartbeat thread failed")
        finally:
            loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        security, ssl_ctx = self._listener
        server = NetServer(self.apis, self._sock, self._max_frame, NativeCodec, "heartbeat", security, ssl_ctx)
        await server.start()
        tasks = [asyncio.create_task(self._beat(b, host, port)) for b, (host, port) in self.peers.items()]
        tasks.append(asyncio.create_task(self.stall_sampler.run()))
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await server.stop()

    async def _beat(self, peer: int, host: str, port: int) -> None:
        """Heartbeat `peer` every interval, on a connection of our own to its heartbeat listener.

        Beats are pipelined: each goes out on time whether or not the last was answered, and an answer counts
        whenever it arrives. A slow answer is not silence: on a CPU-starved machine (test_busy_machine) a
        round trip took up to seconds, and when each beat had two seconds, a timed-out beat closed the
        connection, and the next connection's login through two starved threads timed out in turn, so
        peers that were answering went unheard until they were fenced. The connection is given up only when
        it breaks, or when nothing has come back on it for the session timeout."""
        state = _PeerBeat(peer)
        conn: BrokerConnection | None = None
        heartbeat_port: int | None = None
        while True:
            started = time.monotonic()
            view = self.board.own_view(now_ms())
            if view is not None:  # else our loop is stalled past the limit: stay silent
                connected = False
                try:
                    if conn is None or not conn.connected:
                        if heartbeat_port is None:
                            heartbeat_port = await self._discover(host, port)
                        conn = BrokerConnection(host, heartbeat_port, self._client_id, self.security)
                        await conn.connect(timeout=self.patience_s)
                        state.last_answer = time.monotonic()
                    connected = True
                    if time.monotonic() - state.last_answer > self.patience_s:
                        raise NetworkError(f"no heartbeat answered for {self.patience_s:.1f}s")
                    body = {
                        "broker_id": self.board.broker_id,
                        "incarnation": self.board.incarnation,
                        "epoch": view[0],
                        "leader": view[1],
                    }
                    fut = conn.send(ApiKey.BROKER_HEARTBEAT, body)
                    assert fut is not None  # a response is expected
                    fut.add_done_callback(lambda f: self._answered(state, f))
                except (KafkaLiteError, TimeoutError, OSError) as e:
                    state.failed(e)
                    if conn is not None:
                        conn.close()
                        conn = None
                    if not connected:  # it may have restarted on another port: ask again
                        heartbeat_port = None
                    # Else the port stays: its heartbeat listener took our connection, and asking again goes
                    # through the peer's event loop, on a starved machine the slowest path it has.
            await asyncio.sleep(max(0.0, self.interval_s - (time.monotonic() - started)))

    def _answered(self, state: "_PeerBeat", fut: asyncio.Future[Any]) -> None:
        """A beat's answer (or its connection's failure), whenever it comes."""
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            state.failed(exc)
            return
        answer = fut.result()
        try:
            raise_for_error(answer)
            epoch, leader = answer.get("epoch"), answer.get("leader")
            try:
                epoch = EPOCH.check(epoch, "epoch")
                BROKER_ID.check_optional(leader, "leader")
            except WireRangeError as e:
                raise KafkaLiteError(f"malformed heartbeat answer: {e}", ErrorCode.INVALID_REQUEST) from None
        except KafkaLiteError as e:  # the peer answered, but not as alive (its loop stalled) or not well
            state.failed(e)
            return
        self.board.record(state.peer, epoch, leader, now_ms())
        state.answered()

    async def _discover(self, host: str, port: int) -> int:
        """The peer's heartbeat port, from its native listener's ApiVersions (served by the peer's loop: asked
        only when a heartbeat connection has to be made)."""
        answer = await listener_ports(host, port, self._client_id, self.discovery, self.patience_s)
        raise_for_error(answer)
        hb_port = answer.get("heartbeat_port")
        if not isinstance(hb_port, int) or isinstance(hb_port, bool) or not 0 < hb_port <= 65535:
            raise KafkaLiteError(f"broker at {host}:{port} names no heartbeat listener", ErrorCode.INVALID_REQUEST)
        return hb_port
