"""The coordination interface: what the broker and its ControllerService need from "the cluster's
metadata authority", whichever mechanism provides it.

Two implementations:

- broker/controller/quorum_driver.py `QuorumDriver` (the default, `coordination=custom`): the brokers' own controller
  quorum (election/quorum.py) and its replicated metadata log `__cluster_metadata-0`.
- broker/controller/zk_coordination.py `ZooKeeperCoordination` (`coordination=zookeeper`): ZooKeeper's ephemeral
  znodes for liveness and the controller, and persistent sequential znodes for the metadata log.

Both deliver the same thing: committed metadata records, in one order, with the same offsets on every
broker, through `on_committed(entries)`; role changes through `on_role(is_controller, epoch, controller)`;
and a `propose` that only the active controller of the current epoch can make succeed. Everything
above it (ControllerLogic, MetadataImage, ReplicaManager, replication) is the same code in both modes.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable, Protocol

# (offset, epoch, record): the shape of committed metadata entries in both modes.
Entry = tuple[int, int, dict[str, Any]]
OnCommitted = Callable[[list[Entry]], None]
# (is_controller, epoch, controller id or None while there is none)
OnRole = Callable[[bool, int, "int | None"], None]

MODES = ("custom", "zookeeper")


class Coordination(Protocol):
    broker_id: int
    incarnation: int
    # Next metadata offset to hand to the broker (everything below it was passed to on_committed).
    applied: int
    # Called with no arguments after committed records were applied (the controller acts on its new
    # epoch's first applied record at once instead of at its next tick).
    applied_listeners: list[Callable[[], None]]
    # Called with no arguments when broker liveness may have changed outside the periodic tick (ZooKeeper's
    # child watch on /brokers/ids); the custom mode's liveness moves with the clock, so it never calls them.
    liveness_listeners: list[Callable[[], None]]
    # Monotonic ms at which the current controller election began (None: none running); for the metrics.
    election_started_ms: int | None

    def start(self) -> None: ...

    def stop(self) -> None: ...

    @property
    def stopped(self) -> bool: ...

    @property
    def controller_id(self) -> int | None:
        """The controller this broker currently knows of (None: none, e.g. an election runs)."""
        ...

    @property
    def controller_epoch(self) -> int:
        """The epoch of the controller this broker follows (Kafka's controller epoch; 0 before any)."""
        ...

    @property
    def log_end_offset(self) -> int:
        """The end of the metadata this broker holds (committed or not). A new controller acts only once it
        has applied up to here: records of earlier epochs are part of the state it decides on."""
        ...

    async def propose(self, records: list[dict[str, Any]], timeout: float = 10.0) -> int:
        """Commit `records` as the active controller; returns the last offset once it is applied locally.
        Raises a NOT_CONTROLLER-coded error when this broker cannot commit (not controller, deposed, or the
        coordination service is unreachable) and REQUEST_TIMED_OUT when the outcome is unknown."""
        ...

    def receive(self, wire: list[Any]) -> None:
        """A QUORUM message from a peer broker."""
        ...

    async def relay_to_controller(self, body: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        """Carry an AlterPartition `body` to the active controller through the coordination service and
        return its answer, when the mode has such a path. ZooKeeper has (a request znode the controller
        answers): a partition leader cut off from the controller but not from ZooKeeper can still shrink its
        ISR. None: no such path (the custom quorum, where a broker that cannot reach the controller is fenced
        anyway); the caller sends the request to the controller directly."""
        ...

    def broker_incarnation(self, broker_id: int) -> int:
        """The newest incarnation of `broker_id`'s process seen (0: none)."""
        ...

    def broker_expires_at(self, broker_id: int, epoch: int, since_ms: int, session_timeout_ms: int) -> int | None:
        """For the active controller of `epoch` (since `since_ms`, monotonic ms): the time from which
        `broker_id` counts as dead unless it shows life again; None: alive with no expiry in sight."""
        ...

    def known_brokers(self) -> dict[int, tuple[str, int]]:
        """Every broker of the cluster this broker knows of, with its address."""
        ...


class LocalPauses:
    """The judge's own pauses, so that a silence it caused is not held against the brokers it judges (as
    Cassandra's failure detector convicts nobody after a local pause).

    A controller whose loop or process did not run for seconds (a CPU-starved machine: test_busy_machine saw
    brokers' loops stalled 2-13 s) has not read the fetches and heartbeats that waited in its sockets meanwhile;
    judged on its clock alone, a broker that kept sending looked silent for the session timeout and was
    fenced right after the controller's own stall ended. `observe(now)` at every turn of the controller's
    timer records a gap of at least `threshold_ms` as a pause; a broker's expiry moves on by the pauses
    after its last sign of life. A dead broker is fenced at most that much later (its closed connections
    still fence a killed one at once); fencing is never what keeps the cluster safe (epochs do)."""

    def __init__(self, threshold_ms: int = 1000, keep_ms: int = 120_000) -> None:
        self.threshold_ms = threshold_ms
        self.keep_ms = keep_ms
        self._last: int | None = None
        self._spans: deque[tuple[int, int]] = deque()

    def observe(self, now_ms: int) -> int:
        """One turn of the judge's timer at `now_ms`. Returns the pause that ended here (ms), 0 if none."""
        last, self._last = self._last, now_ms
        paused = 0
        if last is not None and now_ms - last >= self.threshold_ms:
            self._spans.append((last, now_ms))
            paused = now_ms - last
        while self._spans and self._spans[0][1] < now_ms - self.keep_ms:
            self._spans.popleft()
        return paused

    def after(self, since_ms: int) -> int:
        """How long the judge was paused after `since_ms` (ms)."""
        return sum(max(0, end - max(start, since_ms)) for start, end in self._spans)


def fetch_liveness_expiry(
    last_fetch_ms: int | None,
    seen_in_election: bool,
    since_ms: int,
    session_timeout_ms: int,
    closed_at_ms: int | None = None,
    last_heartbeat_ms: int | None = None,
    recent_window_ms: int = 0,
    own_pauses: LocalPauses | None = None,
) -> int:
    """The custom mode's rule (fetches of the metadata log and heartbeats are signs of life), moved here from
    ControllerService so that tests/sim/replication_sim.py and QuorumDriver share it.

    A broker is dead one session timeout after its last sign of life: its last fetch from this controller,
    or its last heartbeat (`last_heartbeat_ms`: exchanged on the brokers' heartbeat path, a thread of their
    own that a busy event loop does not delay; broker/controller/heartbeat.py). One that has not fetched yet
    this epoch gets a session timeout from the controller's start if it took part in the election that made
    it controller. One that sent no state in the election is almost surely the controller that died: fenced
    at once, unless it heartbeated within `recent_window_ms` before this controller's start (its event loop
    was busy through the election; a controller that died has been silent for an election timeout, longer
    than that window). If it is alive after all, its next fetch registers it again. `own_pauses`: the
    controller's own pauses after the last sign of life extend the session (LocalPauses).
    `closed_at_ms`: when the driver saw the broker's process gone (a refused reconnect, broker/network/peers.py); with
    no sign of life since, it is dead from then. Fencing a broker early is never unsafe, only disruptive if
    wrong, and a wrong hint is undone by the broker's next fetch, like any fencing (docs/ELECTION.md section 4)."""
    heartbeat_counts = last_heartbeat_ms is not None and (
        seen_in_election or last_heartbeat_ms >= since_ms - recent_window_ms
    )
    signs = [t for t in (last_fetch_ms, last_heartbeat_ms if heartbeat_counts else None) if t is not None]
    last_sign = max(signs) if signs else None
    election_expiry = since_ms + (session_timeout_ms if seen_in_election else 0)
    if seen_in_election and own_pauses is not None:
        election_expiry += own_pauses.after(since_ms)
    silence_expiry = None
    if last_sign is not None:
        silence_expiry = last_sign + session_timeout_ms + (own_pauses.after(last_sign) if own_pauses else 0)
    expiry = election_expiry if silence_expiry is None else max(silence_expiry, election_expiry)
    if closed_at_ms is not None and (last_sign is None or closed_at_ms >= last_sign):
        return min(expiry, closed_at_ms)
    return expiry


def registration_expiry(registered: bool, connected_since_ms: int | None, session_timeout_ms: int) -> int | None:
    """The ZooKeeper mode's rule: a broker is alive while its ephemeral znode exists (ZooKeeper's own
    session timeout already decided when a silent broker is gone). A missing znode means dead, except
    within a session timeout of our own (re)connection: brokers whose sessions rode out the same outage
    may not have re-registered yet, and the gap is in our view, not in their liveness.
    connected_since_ms None: we are disconnected and cannot tell, so nobody expires (we cannot commit a
    fencing anyway)."""
    if registered or connected_since_ms is None:
        return None
    return connected_since_ms + session_timeout_ms
