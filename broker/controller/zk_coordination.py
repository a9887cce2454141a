"""ZooKeeperCoordination: the `coordination=zookeeper` mode of election/coordination.py, through kazoo.

Layout under the chroot (default /kafkalite, or the `/path` suffix of zookeeper.connect, like Kafka's):

    /brokers/ids/<id>              ephemeral, {"host", "port", "incarnation"}: the broker is alive while
                                   its ZooKeeper session is (zookeeper.session.timeout.ms replaces heartbeats)
    /controller                    ephemeral, {"brokerid", "epoch"}: who is controller
    /controller_epoch              the controller epoch; bumped with a version-checked set by each winner
    /metadata/log/r-<10 digits>    persistent sequential, msgpack {"epoch", "records"}: one proposal each
    /controller_requests/q-<10 digits>
                                   ephemeral sequential, msgpack {"from", "body"[, "response"]}: an
                                   AlterPartition relayed to the controller, answered in place (below)

The metadata log is the same records the custom mode keeps in `__cluster_metadata-0`, and every broker
applies the znodes in sequence order; a record's offset is its position over all znodes, so it is the
same on every broker. A proposal is a ZooKeeper transaction of `check(/controller_epoch, version won)`
and the create: a controller that has been replaced can never append (the epoch fencing). The classic
`/brokers/topics/...` layout is not written: the log is the only copy (docs/ELECTION.md section 8).

Partition leaders send their ISR changes (AlterPartition) through ZooKeeper, not over a connection to the
controller: a leader cut off from the controller but not from ZooKeeper still gets its ISR shrunk, as
Kafka's ZooKeeper-mode leaders wrote ISR changes to ZooKeeper themselves. The leader creates a request
znode and watches it; the controller watches the requests, runs each through the same handler as a direct
AlterPartition (every epoch, incarnation and sequence check included) and writes the answer into the znode;
the leader reads it and deletes the znode. Request znodes are ephemeral, so a dead leader leaves none.

kazoo runs its own threads. Its watch and state callbacks only hand events to the asyncio loop
(`call_soon_threadsafe`); requests use kazoo's *_async calls, whose results are bridged to asyncio
futures, so nothing here blocks the event loop. Decisions that need no IO are pure functions
(parse_connect, new_log_entries, election/coordination.py registration_expiry).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import uuid
from typing import Any, Awaitable, Callable

import msgpack
from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
)
from kazoo.protocol.states import KazooState
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from kazoo.retry import KazooRetry

from election.coordination import Entry, OnCommitted, OnRole, registration_expiry
from net.errors import ErrorCode, KafkaLiteError, error_code_of

log = logging.getLogger("kafkalite.zookeeper")
DEFAULT_CHROOT = "/kafkalite"
LOG_PREFIX = "r-"
REQUEST_PREFIX = "q-"
RETRY_MIN_S = 0.5  # the least time left in which a proposal cut off by a connection loss is sent again
APPLIED_KEPT = 1024  # applied znodes remembered for a proposer that learns its sequence number late


class NotControllerError_(KafkaLiteError):  # noqa: N801 - same name as broker/controller/quorum_driver.py's
    code = ErrorCode.NOT_CONTROLLER


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


# --- pure helpers ------------------------------------------------------------------------------------


def parse_connect(connect: str) -> tuple[str, str]:
    """zookeeper.connect "h1:p1,h2:p2/chroot" -> ("h1:p1,h2:p2", "/chroot"); chroot default /kafkalite."""
    hosts, slash, chroot = connect.strip().partition("/")
    chroot = "/" + chroot.strip("/") if slash and chroot.strip("/") else DEFAULT_CHROOT
    if not hosts:
        raise ValueError(f"no host in {connect!r}")
    for hp in hosts.split(","):
        host, colon, port = hp.rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"expected HOST:PORT, got {hp!r}")
    return hosts, chroot


def seq_of(name: str) -> int:
    return int(name[len(LOG_PREFIX) :])


def encode_proposal(epoch: int, records: list[dict[str, Any]], token: str | None = None) -> bytes:
    """`token`: the proposer's own id for this proposal, so that after a connection loss it can tell whether
    the create went through (proposal_token); readers ignore it."""
    body: dict[str, Any] = {"epoch": epoch, "records": records}
    if token is not None:
        body["token"] = token
    return msgpack.packb(body, use_bin_type=True)


def proposal_token(data: bytes) -> str | None:
    d = msgpack.unpackb(data, raw=False, strict_map_key=False)
    token = d.get("token") if isinstance(d, dict) else None
    return token if isinstance(token, str) else None


def decode_proposal(data: bytes) -> tuple[int, list[dict[str, Any]]]:
    d = msgpack.unpackb(data, raw=False, strict_map_key=False)
    return int(d["epoch"]), list(d["records"])


def new_log_entries(next_offset: int, proposals: list[tuple[int, bytes]]) -> tuple[list[Entry], dict[int, int], int]:
    """Znodes (seq, data) in sequence order -> (entries, seq -> last offset of its records, next offset)."""
    entries: list[Entry] = []
    last_of: dict[int, int] = {}
    for seq, data in proposals:
        epoch, records = decode_proposal(data)
        for r in records:
            entries.append((next_offset, epoch, r))
            next_offset += 1
        last_of[seq] = next_offset - 1
    return entries, last_of, next_offset


# --- the driver --------------------------------------------------------------------------------------


class ZooKeeperCoordination:
    """election/coordination.py `Coordination`, backed by ZooKeeper."""

    def __init__(
        self,
        broker_id: int,
        address: tuple[str, int],
        connect: str,
        session_timeout_ms: int,
        on_committed: OnCommitted,
        on_role: OnRole,
        incarnation: int,
        peers: dict[int, tuple[str, int]] | None = None,
        request_handler: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]] | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.address = address
        self.incarnation = incarnation
        self.on_committed = on_committed
        self.on_role = on_role
        self.session_timeout_ms = session_timeout_ms
        hosts, root = parse_connect(connect)
        self.connect = connect
        self.p_ids = f"{root}/brokers/ids"
        self.p_controller = f"{root}/controller"
        self.p_epoch = f"{root}/controller_epoch"
        self.p_log = f"{root}/metadata/log"
        self.p_requests = f"{root}/controller_requests"
        # Reconnect forever, quickly: while ZooKeeper is away the broker keeps serving its last image.
        self.zk = KazooClient(
            hosts=hosts,
            timeout=session_timeout_ms / 1000,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0),
        )
        self.applied = 0
        self.applied_listeners: list[Callable[[], None]] = []
        self.liveness_listeners: list[Callable[[], None]] = []
        self.election_started_ms: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped = False
        self._tasks: set[asyncio.Task[None]] = set()
        # Connection: None while disconnected; else when (monotonic ms) the current connection began.
        self._connected_since: int | None = None
        # Role: the controller we know of and its epoch; ours when _epoch_version is set.
        self._controller: int | None = None
        self._epoch = 0
        self._epoch_version: int | None = None  # /controller_epoch's version when we won: our fencing token
        self._electing = False
        # Brokers: registered ids (znodes present), their addresses and newest incarnations.
        self._registered: set[int] = set()
        self._addresses: dict[int, tuple[str, int]] = {**(peers or {}), broker_id: address}
        self._incarnations: dict[int, int] = {broker_id: incarnation}
        self._broker_children: list[str] = []
        self._brokers_lock = asyncio.Lock()
        # The metadata log: newest children list seen, the last applied znode, waiters of our proposals.
        self._log_children: set[str] = set()
        self._last_seq = -1
        self._apply_lock = asyncio.Lock()
        self._waiters: dict[int, asyncio.Future[Any]] = {}
        self._applied_last: dict[int, int] = {}  # the newest applied znodes: seq -> last offset of its records
        self._watches_set = False
        # Relayed AlterPartition requests: the controller's handler (set by the broker), the newest list of
        # request znodes, and the ones this broker is serving or has served.
        # As the active controller: answers the AlterPartition requests relayed by relay_to_controller.
        self.request_handler = request_handler
        self._request_children: list[str] = []
        self._serving: set[str] = set()

    # --- lifecycle -----------------------------------------------------------

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.zk.add_listener(self._state_listener)
        self.zk.start_async()  # connects in kazoo's thread; CONNECTED arrives through _state_listener
        log.info("connecting to ZooKeeper at %s", self.connect)

    def stop(self) -> None:
        self._stopped = True
        for t in list(self._tasks):
            t.cancel()
        self._fail_waiters(NotControllerError_("broker is shutting down"))

        def close() -> None:
            # Closing the session deletes our ephemeral znodes at once: a clean shutdown hands the
            # controller role over without waiting out the session timeout.
            try:
                self.zk.stop()
                self.zk.close()
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass

        # kazoo's stop() joins its threads: off the loop, but waited for briefly so that the session is
        # closed before the process exits (a ZooKeeper that is away must not hold the shutdown up).
        closer = threading.Thread(target=close, name="zk-close", daemon=True)
        closer.start()
        closer.join(1.0)

    @property
    def stopped(self) -> bool:
        return self._stopped

    # --- the interface -------------------------------------------------------

    @property
    def controller_id(self) -> int | None:
        return self._controller

    @property
    def controller_epoch(self) -> int:
        return self._epoch  # /controller_epoch as last seen

    @property
    def log_end_offset(self) -> int:
        # A new controller applies every znode before announcing its role (_elect), so what it holds is
        # what it has applied.
        return self.applied

    def known_brokers(self) -> dict[int, tuple[str, int]]:
        return self._addresses

    def broker_incarnation(self, broker_id: int) -> int:
        return self._incarnations.get(broker_id, 0)

    def broker_expires_at(self, broker_id: int, epoch: int, since_ms: int, session_timeout_ms: int) -> int | None:
        return registration_expiry(broker_id in self._registered, self._connected_since, session_timeout_ms)

    def receive(self, wire: list[Any]) -> None:
        raise KafkaLiteError(
            f"broker {self.broker_id} runs coordination=zookeeper and takes no controller-quorum messages "
            "(are brokers of both modes mixed in one cluster?)",
            ErrorCode.INVALID_REQUEST,
        )

    async def propose(self, records: list[dict[str, Any]], timeout: float = 10.0) -> int:
        if self._epoch_version is None:
            raise NotControllerError_(
                f"broker {self.broker_id} is not the controller"
                + (f" (controller is {self._controller})" if self._controller is not None else "")
            )
        if self._connected_since is None:
            # Fail at once rather than queue in kazoo until ZooKeeper returns: admin requests must not hang.
            # REQUEST_TIMED_OUT, not NOT_CONTROLLER: nothing else can do better (clients would only chase the
            # controller until their timeout), and the outcome is definite but the message must reach them.
            raise KafkaLiteError(
                f"ZooKeeper at {self.connect} is unreachable: no metadata change (topics, ISR, leaders) until "
                "it is back",
                ErrorCode.REQUEST_TIMED_OUT,
            )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        token = uuid.uuid4().hex
        payload = encode_proposal(self._epoch, records, token)
        # The role the records were computed under: proposed again only under that same role (a session lost
        # and a new election won meanwhile is a new epoch, whose controller must compute its own records).
        won = self._epoch_version
        while True:
            # Every znode created from here on has a higher sequence number than any seen yet.
            floor = max((seq_of(n) for n in self._log_children), default=-1)
            tx = self.zk.transaction()
            tx.check(self.p_epoch, self._epoch_version)
            tx.create(f"{self.p_log}/{LOG_PREFIX}", payload, sequence=True)
            try:
                results = await asyncio.wait_for(self._aio(tx.commit_async()), max(deadline - loop.time(), 0))
            except TimeoutError:
                raise KafkaLiteError(
                    f"metadata change not acknowledged by ZooKeeper at {self.connect} in time",
                    ErrorCode.REQUEST_TIMED_OUT,
                ) from None
            except (ConnectionLoss, SessionExpiredError) as e:
                # The connection dropped with the transaction in flight: it may or may not have been applied.
                # Find out once reconnected (a loaded machine's short sessions meet this), rather than answer
                # "outcome unknown": applied, it is ours; not applied, it is proposed again, still fenced.
                log.info("ZooKeeper %s with a metadata change in flight; resolving its outcome", type(e).__name__)
                found = await self._find_proposal(token, floor, deadline)
                if found is not None:
                    seq = found
                    break
                if self._epoch_version is None or self._epoch_version != won:
                    raise NotControllerError_(
                        f"broker {self.broker_id} lost the controller role meanwhile (the change was not made)"
                    ) from None
                if deadline - loop.time() < RETRY_MIN_S:
                    # Too late to send it again: a transaction queued now would likely commit after the answer.
                    raise KafkaLiteError(
                        "metadata change not made: ZooKeeper's connection was lost and there is no time left to "
                        "propose it again",
                        ErrorCode.REQUEST_TIMED_OUT,
                    ) from None
                continue
            except KazooException as e:
                raise KafkaLiteError(
                    f"metadata change: ZooKeeper error {type(e).__name__} (outcome unknown)",
                    ErrorCode.REQUEST_TIMED_OUT,
                ) from None
            if isinstance(results[0], (BadVersionError, NoNodeError)):
                # Another broker won a later epoch: we are deposed, and the write was refused (nothing applied).
                self._set_role(None, self._epoch)
                raise NotControllerError_(f"broker {self.broker_id} was deposed as controller (epoch moved)")
            if isinstance(results[1], Exception):
                raise KafkaLiteError(
                    f"metadata change refused by ZooKeeper: {results[1]!r}", ErrorCode.REQUEST_TIMED_OUT
                )
            seq = seq_of(str(results[1]).rsplit("/", 1)[1])
            break
        if seq in self._applied_last:
            return self._applied_last[seq]  # applied already (found after a connection loss, say)
        fut = loop.create_future()
        self._waiters[seq] = fut
        self._log_children.add(f"{LOG_PREFIX}{seq:010d}")
        self._spawn(self._apply_new())
        try:
            return await asyncio.wait_for(asyncio.shield(fut), max(deadline - loop.time(), 0.1))
        except TimeoutError:
            raise KafkaLiteError(
                "metadata change committed but not applied in time", ErrorCode.REQUEST_TIMED_OUT
            ) from None

    async def _find_proposal(self, token: str, floor: int, deadline: float) -> int | None:
        """The sequence number of the log znode above `floor` that carries `token`, or None if there is none
        once the connection is back (then the proposal was not applied: ZooKeeper applies a session's requests
        in order, and `sync` makes this server's view catch up with the leader's). A connection lost again
        meanwhile is waited out too. REQUEST_TIMED_OUT if the answer is not known by `deadline`."""
        loop = asyncio.get_running_loop()

        def left() -> float:
            return max(deadline - loop.time(), 0.05)

        def unknown(why: str) -> KafkaLiteError:
            return KafkaLiteError(f"metadata change: {why} (outcome unknown)", ErrorCode.REQUEST_TIMED_OUT)

        while True:
            while self._connected_since is None:
                if self._stopped or loop.time() >= deadline:
                    raise unknown(f"ZooKeeper at {self.connect} did not come back in time")
                await asyncio.sleep(0.05)
            try:
                await asyncio.wait_for(self._aio(self.zk.sync_async(self.p_log)), left())
                children = await asyncio.wait_for(self._aio(self.zk.get_children_async(self.p_log)), left())
                for name in sorted((n for n in children if seq_of(n) > floor), key=seq_of):
                    data, _ = await asyncio.wait_for(self._aio(self.zk.get_async(f"{self.p_log}/{name}")), left())
                    if proposal_token(data) == token:
                        return seq_of(name)
                return None
            except (ConnectionLoss, SessionExpiredError):
                continue  # lost again while looking: look again once it is back
            except (TimeoutError, KazooException) as e:
                raise unknown(f"ZooKeeper error {type(e).__name__} while resolving it") from None

    # --- kazoo thread -> event loop ---------------------------------------------------

    def _post(self, fn: Callable[..., None], *args: Any) -> None:
        loop = self._loop
        if loop is None or self._stopped:
            return
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            pass  # the loop is closed: shutting down

    def _aio(self, async_result: Any) -> asyncio.Future[Any]:
        """A kazoo IAsyncResult as an asyncio future (resolved on the loop)."""
        assert self._loop is not None
        fut = self._loop.create_future()

        def settle(ok: bool, value: Any) -> None:
            if not fut.done():
                fut.set_result(value) if ok else fut.set_exception(value)

        def done(ar: Any) -> None:
            try:
                value, ok = ar.get(), True
            except Exception as e:  # noqa: BLE001 - handed to the awaiting coroutine
                value, ok = e, False
            self._post(settle, ok, value)

        async_result.rawlink(done)
        return fut

    def _spawn(self, coro: Any) -> None:
        if self._stopped:
            coro.close()
            return
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None and not self._stopped:
            log.warning("ZooKeeper task failed: %r", task.exception())

    def _state_listener(self, state: str) -> None:  # kazoo thread: must not block
        self._post(self._on_state, state)

    # --- connection state ---------------------------------------------------------

    def _on_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            log.info("ZooKeeper connected (session 0x%x)", self.zk.client_id[0] if self.zk.client_id else 0)
            self._connected_since = _now_ms()
            self._spawn(self._on_connected())
            return
        self._connected_since = None
        if state == KazooState.SUSPENDED:
            # The session may still be alive: keep the role (nothing can be written anyway; proposals fail
            # fast) and keep serving the last image.
            # A proposal already committed waits on: its znode is applied after the reconnect (_on_connected),
            # or its proposer's own deadline answers it.
            log.warning("ZooKeeper connection suspended; serving the last metadata, no metadata changes")
        else:  # LOST: the session expired, and our ephemeral znodes with it
            log.warning("ZooKeeper session lost; will re-register and re-run the controller election on reconnect")
            # Proposals already committed still wait: their znodes passed the epoch check, so every broker
            # applies them (this one after the reconnect), and a NOT_CONTROLLER would report a made change as not.
            self._set_role(None, self._epoch)

    async def _on_connected(self) -> None:
        await self._ensure_paths()
        await self._register()
        if not self._watches_set:
            # kazoo's recipes re-arm themselves after reconnects and new sessions.
            self._watches_set = True
            ChildrenWatch(self.zk, self.p_ids, lambda ch: self._post(self._on_broker_children, ch))
            ChildrenWatch(self.zk, self.p_log, lambda ch: self._post(self._on_log_children, ch))
            ChildrenWatch(self.zk, self.p_requests, lambda ch: self._post(self._on_request_children, ch))
            DataWatch(self.zk, self.p_controller, lambda d, s: self._post(self._on_controller_data, d, s))
        else:
            self._spawn(self._elect())
            self._spawn(self._apply_new(refresh=True))
        # After a reconnect, liveness answers change (the grace period starts now).
        self._notify_liveness()

    async def _ensure_paths(self) -> None:
        for path in (self.p_ids, self.p_log, self.p_requests):
            await self._aio(self.zk.ensure_path_async(path))
        try:
            await self._aio(self.zk.create_async(self.p_epoch, b"0"))
        except NodeExistsError:
            pass

    async def _register(self) -> None:
        path = f"{self.p_ids}/{self.broker_id}"
        host, port = self.address
        data = json.dumps({"host": host, "port": port, "incarnation": self.incarnation}).encode()
        session = self.zk.client_id[0] if self.zk.client_id else None
        for _ in range(5):
            try:
                await self._aio(self.zk.create_async(path, data, ephemeral=True))
                log.info("registered in ZooKeeper as %s", path)
                return
            except NodeExistsError:
                try:
                    old, stat = await self._aio(self.zk.get_async(path))
                except NoNodeError:
                    continue
                if stat.ephemeralOwner == session:
                    return  # ours: the session survived a disconnection
                prev = json.loads(old or b"{}").get("incarnation", 0)
                if prev >= self.incarnation:
                    raise KafkaLiteError(
                        f"broker id {self.broker_id} is registered by another live process (incarnation {prev})",
                        ErrorCode.INVALID_REQUEST,
                    ) from None
                # Our previous process, killed before its session expired: this process replaces it.
                log.info("replacing the registration of our previous process (incarnation %d)", prev)
                try:
                    await self._aio(self.zk.delete_async(path, version=stat.version))
                except (NoNodeError, BadVersionError):
                    pass

    # --- brokers -------------------------------------------------------------------

    def _on_broker_children(self, children: list[str]) -> None:
        self._broker_children = children
        self._spawn(self._refresh_brokers())

    async def _refresh_brokers(self) -> None:
        async with self._brokers_lock:
            children = self._broker_children
            ids = {int(c) for c in children if c.isdigit()}
            for bid in sorted(ids - self._registered):
                try:
                    data, _ = await self._aio(self.zk.get_async(f"{self.p_ids}/{bid}"))
                except NoNodeError:
                    ids.discard(bid)
                    continue
                d = json.loads(data)
                self._addresses[bid] = (str(d["host"]), int(d["port"]))
                self._incarnations[bid] = max(self._incarnations.get(bid, 0), int(d.get("incarnation", 0)))
            if ids != self._registered:
                log.info("registered brokers: %s", sorted(ids))
            self._registered = ids
        self._notify_liveness()

    def _notify_liveness(self) -> None:
        for listener in self.liveness_listeners:
            listener()

    # --- the controller -------------------------------------------------------------

    def _on_controller_data(self, data: bytes | None, stat: Any) -> None:
        if data is None:
            if self._controller is not None or self._epoch_version is not None:
                log.info("no controller in ZooKeeper; electing")
            if self.election_started_ms is None:
                self.election_started_ms = _now_ms()
            self._set_role(None, self._epoch)
            self._spawn(self._elect())
            return
        d = json.loads(data)
        bid, epoch = int(d["brokerid"]), int(d["epoch"])
        session = self.zk.client_id[0] if self.zk.client_id else None
        if bid == self.broker_id and stat is not None and stat.ephemeralOwner != session:
            # Our previous process's controller znode (killed within its session timeout): it is dead, so
            # hand the role on now rather than after the session expires.
            log.info("removing the controller znode of our previous process (epoch %d)", epoch)
            self._spawn(self._delete_stale_controller(stat.version))
            return
        if bid != self.broker_id:
            self._set_role(bid, epoch)
        # Our own win is announced by _elect, once we have applied the whole log.

    async def _delete_stale_controller(self, version: int) -> None:
        try:
            await self._aio(self.zk.delete_async(self.p_controller, version=version))
        except (NoNodeError, BadVersionError):
            pass

    async def _elect(self) -> None:
        """Kafka's election: create the ephemeral /controller; here atomically with the version-checked bump
        of /controller_epoch, so that the epoch a winner holds is one no other broker ever held."""
        if self._electing or self._stopped:
            return
        self._electing = True
        try:
            while self._connected_since is not None and not self._stopped and self._epoch_version is None:
                try:
                    data, _ = await self._aio(self.zk.get_async(self.p_controller))
                    d = json.loads(data)
                    if int(d["brokerid"]) != self.broker_id:
                        self._set_role(int(d["brokerid"]), int(d["epoch"]))
                    return  # a controller exists; the DataWatch tells us when it goes
                except NoNodeError:
                    pass
                raw, stat = await self._aio(self.zk.get_async(self.p_epoch))
                epoch = int(raw or b"0") + 1
                tx = self.zk.transaction()
                tx.create(
                    self.p_controller, json.dumps({"brokerid": self.broker_id, "epoch": epoch}).encode(), ephemeral=True
                )
                tx.set_data(self.p_epoch, str(epoch).encode(), version=stat.version)
                results = await self._aio(tx.commit_async())
                if any(isinstance(r, Exception) for r in results):
                    continue  # lost the race (or the epoch moved): look again
                self._epoch = epoch
                await self._apply_new(refresh=True)  # the whole log, before acting on it
                self._epoch_version = stat.version + 1
                self._set_role(self.broker_id, epoch)
        except KazooException as e:
            log.warning("controller election interrupted: %s", type(e).__name__)
        finally:
            self._electing = False

    def _set_role(self, controller: int | None, epoch: int) -> None:
        """Record who is controller now and tell the broker when it changed."""
        was_controller = self._epoch_version is not None
        if controller != self.broker_id:
            self._epoch_version = None
        if controller == self._controller and epoch == self._epoch and (controller == self.broker_id) == was_controller:
            return
        self._controller, self._epoch = controller, epoch
        if controller == self.broker_id:
            log.info("became controller in epoch %d", epoch)
        else:
            # Our committed proposals still wait for their znodes to be applied (they passed the epoch check):
            # deposed, we apply the log as every broker does, and they are answered as made.
            log.info("controller is %s in epoch %d", controller if controller is not None else "none", epoch)
        self.on_role(controller == self.broker_id, epoch, controller)
        if controller == self.broker_id:
            # Act at once (fence the broker whose loss made us controller), not at the next periodic tick.
            for listener in self.applied_listeners:
                listener()
            self._on_request_children(self._request_children)  # requests left for the previous controller

    # --- AlterPartition through ZooKeeper ----------------------------------------------

    async def relay_to_controller(self, body: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        """Leader side: the controller's answer to an AlterPartition `body`, through a request znode.
        Raises REQUEST_TIMED_OUT (no verdict: the leader retries) if ZooKeeper or the controller does not
        answer in time."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        changed = asyncio.Event()
        path: str | None = None
        try:
            data = msgpack.packb({"from": self.broker_id, "body": body}, use_bin_type=True)
            path = await asyncio.wait_for(
                self._aio(
                    self.zk.create_async(f"{self.p_requests}/{REQUEST_PREFIX}", data, ephemeral=True, sequence=True)
                ),
                timeout,
            )
            while True:
                changed.clear()
                raw, _ = await asyncio.wait_for(
                    self._aio(self.zk.get_async(path, watch=lambda _e: self._post(changed.set))),
                    max(deadline - loop.time(), 0.001),
                )
                request = msgpack.unpackb(raw, raw=False, strict_map_key=False)
                if "response" in request:
                    return dict(request["response"])
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise TimeoutError
                try:
                    await asyncio.wait_for(changed.wait(), remaining)
                except TimeoutError:
                    pass
        except (TimeoutError, KazooException) as e:
            raise KafkaLiteError(
                f"no answer from the controller through ZooKeeper in {timeout}s ({type(e).__name__})",
                ErrorCode.REQUEST_TIMED_OUT,
            ) from None
        finally:
            if path is not None:
                self._spawn(self._delete_request(path))

    async def _delete_request(self, path: str) -> None:
        try:
            await self._aio(self.zk.delete_async(path))
        except KazooException:
            pass  # gone already, or ZooKeeper away: an ephemeral znode goes with our session anyway

    def _on_request_children(self, children: list[str]) -> None:
        self._request_children = children
        self._serving &= set(children)
        if self._epoch_version is None or self.request_handler is None:
            return  # only the controller serves them
        for name in sorted(children):
            if name not in self._serving:
                self._serving.add(name)
                self._spawn(self._serve_request(name))

    async def _serve_request(self, name: str) -> None:
        """Controller side: answer one relayed request in its znode (version-checked: one answer only)."""
        path = f"{self.p_requests}/{name}"
        try:
            raw, stat = await self._aio(self.zk.get_async(path))
        except NoNodeError:
            return
        request = msgpack.unpackb(raw, raw=False, strict_map_key=False)
        handler = self.request_handler
        if "response" in request or handler is None:
            return
        try:
            response = await handler(dict(request["body"]))
        except Exception as e:  # noqa: BLE001 - every failure is an answer the leader can act on
            code, message = error_code_of(e)
            response = {"error_code": int(code), "error_message": message}
        request["response"] = response
        try:
            await self._aio(self.zk.set_async(path, msgpack.packb(request, use_bin_type=True), version=stat.version))
        except (NoNodeError, BadVersionError):
            pass  # the leader gave up (and retries), or another controller answered first

    # --- the metadata log ------------------------------------------------------------

    def _on_log_children(self, children: list[str]) -> None:
        self._log_children.update(children)
        self._spawn(self._apply_new())

    async def _apply_new(self, refresh: bool = False) -> None:
        """Apply every znode after the last applied one, in sequence order, in one on_committed call."""
        async with self._apply_lock:
            if refresh:
                self._log_children.update(await self._aio(self.zk.get_children_async(self.p_log)))
            names = sorted((n for n in self._log_children if seq_of(n) > self._last_seq), key=seq_of)
            if not names:
                return
            datas = await asyncio.gather(*(self._aio(self.zk.get_async(f"{self.p_log}/{n}")) for n in names))
            entries, last_of, nxt = new_log_entries(self.applied, [(seq_of(n), d[0]) for n, d in zip(names, datas)])
            if entries:
                self.on_committed(entries)
            self.applied = nxt
            self._last_seq = seq_of(names[-1])
            self._applied_last.update(last_of)
            while len(self._applied_last) > APPLIED_KEPT:
                del self._applied_last[next(iter(self._applied_last))]
            for seq, last in last_of.items():
                fut = self._waiters.pop(seq, None)
                if fut is not None and not fut.done():
                    fut.set_result(last)
        for listener in self.applied_listeners:
            listener()

    def _fail_waiters(self, exc: Exception) -> None:
        waiters, self._waiters = self._waiters, {}
        for fut in waiters.values():
            if not fut.done():
                fut.set_exception(exc)
