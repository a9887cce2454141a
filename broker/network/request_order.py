"""When a connection's next request may start: Kafka's order, with only the overlaps no client can see.

Kafka handles a connection's requests one at a time: its socket server mutes a channel from the moment a
request is read until that request's response is sent, a waiting produce (acks=all) and a long-poll fetch
included. So request N+1 always sees every effect of request N. Kafka Lite starts a connection's requests in
arrival order and lets a request start while earlier ones are still waiting only where that cannot be told
apart from Kafka's order:

- A Fetch changes nothing a later request reads (a consumer's fetch; a follower's fetch is the inter-broker
  listener's, which is not ordered): a later request need not wait for a fetch's long poll. A fetch itself
  waits for every earlier request, so it sees their effects.
- A Produce appends when it starts; what it then waits for (replication up to the high watermark, acks=all)
  is seen by a ListOffsets, a Fetch, ... but by no later Produce: a produce appends at the log end and checks
  sequences against what was appended, whatever the high watermark. So a Produce may start while only
  earlier produces (and fetches) wait, which keeps a pipelining producer's (max.in.flight) throughput; any
  other request waits until every earlier produce has been answered.
- Every other request holds the connection until it completes (an OffsetCommit until the offsets are
  committed, a CreateTopics / CreateAcls until its answer is ready, a JoinGroup while it is parked).

Sans-IO: the connection (broker/network/server.py) asks `may_start` for the request at the head of its queue
and reports `started` / `finished` for each request whose answer it waits for.
"""

from __future__ import annotations

from net.protocol import ApiKey

# A request without effects: later requests do not wait for it.
_NO_EFFECTS = frozenset({ApiKey.FETCH})
# A request whose effect is applied when it starts, and whose wait no later request of the same api can see.
_OVERLAPPING = frozenset({ApiKey.PRODUCE})


class RequestOrder:
    """The requests of one connection that were started and are not answered yet, by kind."""

    __slots__ = ("_waiting", "_fetches", "_produces")

    def __init__(self) -> None:
        self._waiting = 0  # started, not completed: every kind
        self._fetches = 0
        self._produces = 0

    def may_start(self, api_key: int | None) -> bool:
        """Whether a request of `api_key` (None: one answered without looking at any state, such as ApiVersions
        on the Kafka listener) may start now, given those still waiting."""
        if api_key is None:
            return True
        holding = self._waiting - self._fetches
        if api_key in _OVERLAPPING:
            holding -= self._produces
        return holding == 0

    def started(self, api_key: int) -> None:
        """A started request of `api_key` waits for its answer (it returned an awaitable)."""
        self._waiting += 1
        if api_key in _NO_EFFECTS:
            self._fetches += 1
        elif api_key in _OVERLAPPING:
            self._produces += 1

    def finished(self, api_key: int) -> None:
        self._waiting -= 1
        if api_key in _NO_EFFECTS:
            self._fetches -= 1
        elif api_key in _OVERLAPPING:
            self._produces -= 1


class Unordered(RequestOrder):
    """The inter-broker listener's order: every request starts as it arrives. Brokers multiplex on one
    connection what Kafka sends over several (each replica fetcher lane's long polls, AlterPartition, forwarded
    requests); holding one behind another would add head-of-line waits Kafka does not have."""

    __slots__ = ()

    def may_start(self, api_key: int | None) -> bool:
        return True
