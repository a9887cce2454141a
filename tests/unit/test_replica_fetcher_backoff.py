"""A partition the leader answers with an error (it does not host it yet: a flood still being applied there)
is left out of the follower's fetches for the backoff, as Kafka's fetcher delays it by replica.fetch.backoff.ms,
rather than making every fetch of the lane return at once (issue 25 §4); the others are fetched meanwhile."""

from __future__ import annotations

import asyncio
from typing import Callable

from broker.log.log import Log
from broker.metadata.image import PartitionState
from broker.replica.partition import Partition
from broker.replica.replica_fetcher import ReplicaFetcher
from net.errors import ErrorCode
from net.schema.fetch import FetchableTopicResponse, FetchRequest, FetchResponse, PartitionData
from tests.unit.test_log_support import FakeClock, config


def follower(tmp_path, i: int) -> Partition:
    lg = Log(tmp_path / f"t-{i}", "t", i, config(), clean_shutdown=True, clock=FakeClock(), defer_files=True)
    p = Partition("t", i, lg, 1, 1, 30_000, lambda *a: None)
    p.apply_state(PartitionState(i, 2, 1, [1, 2], [1, 2]), 0)  # broker 2 leads, we follow
    return p


def idle_answer(request: FetchRequest, error: Callable[[int], int] = lambda partition: 0) -> FetchResponse:
    """A leader's answer with no data for each partition asked, `error(partition)` its code."""
    return FetchResponse(
        responses=tuple(
            FetchableTopicResponse(
                topic=t.topic,
                partitions=tuple(
                    PartitionData(partition_index=q.partition, error_code=error(q.partition), last_stable_offset=0)
                    for q in t.partitions
                ),
            )
            for t in request.topics
        )
    )


def asked_partitions(request: FetchRequest) -> list[int]:
    return [q.partition for t in request.topics for q in t.partitions]


def test_a_partition_answered_with_an_error_waits_out_the_backoff_the_others_do_not(tmp_path):
    asked: list[list[int]] = []

    async def leader(_leader_id, request, _timeout):
        asked.append(asked_partitions(request))
        missing = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return idle_answer(request, lambda q: missing if q == 1 else 0)  # partition 1 is not there yet

    async def scenario() -> None:
        f = ReplicaFetcher(1, 2, leader, max_wait_ms=10, backoff_s=0.3)
        parts = [follower(tmp_path, i) for i in range(3)]
        for p in parts:
            f.followed.add(p)  # not f.add(): no background task, each fetch by hand
        await f._fetch_once()
        await f._fetch_once()
        assert asked == [[0, 1, 2], [0, 2]]  # 1 left out for the backoff
        await asyncio.sleep(0.35)
        await f._fetch_once()
        assert asked[-1] == [0, 1, 2]  # and asked for again after it
        await f._fetch_once()
        assert asked[-1] == [0, 2]  # answered with the error again: delayed again
        f.add(parts[1])  # a leadership change (followed anew) clears the delay at once
        f.stop()  # add() started the background fetch loop: this test fetches by hand
        await f._fetch_once()
        assert asked[-1] == [0, 1, 2]
        f.remove(parts[0])
        await f._fetch_once()
        assert asked[-1] == [2]  # removed, and 1 delayed once more

    asyncio.run(scenario())


def test_a_fetch_unanswered_for_replica_socket_timeout_closes_its_connection_and_the_next_goes_on_a_new_one(
    tmp_path,
):
    """A leader that stops answering (paused, or cut off and then healed: the fetch is lost in a connection
    that TCP retransmits on with backoff) holds its followers' fetches for replica.socket.timeout.ms at most:
    the fetch fails, its connection is closed, and the next fetch is answered on a new connection (issue 29 §3;
    it was replica.fetch.wait.max.ms + 10 s on the same connection)."""
    from broker.network.peers import PeerChannel
    from net.errors import KafkaLiteError
    from net.messages import decode, encode
    from net.protocol import FrameDecoder, encode_response, parse_request

    connections: list[asyncio.StreamWriter] = []
    answered: list[int] = []

    async def leader(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """The first connection hangs (reads, never answers); later ones answer each fetch with no data."""
        connections.append(writer)
        silent = len(connections) == 1
        frames = FrameDecoder()
        while data := await reader.read(65536):
            for payload in frames.feed(data):
                _, _, corr, _, body = parse_request(payload)
                if not silent:  # the typed native Fetch (v1): the messages as msgpack arrays
                    writer.write(encode_response(corr, encode(idle_answer(decode(FetchRequest, body)))))
                    answered.append(len(connections))

    async def scenario() -> None:
        server = await asyncio.start_server(leader, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        channel = PeerChannel(1, 2, "127.0.0.1", port)

        async def request(_leader_id, message, timeout):
            return await channel.call(message, timeout)

        f = ReplicaFetcher(1, 2, request, max_wait_ms=100, timeout_ms=400)
        f.followed.add(follower(tmp_path, 0))
        loop = asyncio.get_running_loop()
        began = loop.time()
        try:
            await f._fetch_once()
            raise AssertionError("a fetch the leader never answered succeeded")
        except KafkaLiteError as e:
            assert "timed out" in str(e), e
        waited = loop.time() - began
        assert 0.35 < waited < 2.0, waited  # replica.socket.timeout.ms, not 10 s past the long poll
        await f._fetch_once()  # the next fetch: on a new connection, answered
        assert len(connections) == 2 and answered == [2]
        channel.close()
        server.close()

    asyncio.run(scenario())


def test_replica_socket_timeout_below_the_long_poll_is_refused():
    import pytest

    from broker.server.config import BrokerConfig
    from net.config_def import InvalidConfigError

    BrokerConfig.from_props({"replica.socket.timeout.ms": "3000", "replica.fetch.wait.max.ms": "500"}).validate()
    with pytest.raises(InvalidConfigError, match="replica.socket.timeout.ms"):
        BrokerConfig.from_props({"replica.socket.timeout.ms": "200", "replica.fetch.wait.max.ms": "500"}).validate()


def test_the_fetch_timeout_adapts_to_a_slow_leader_and_comes_back_when_it_is_fast_again(tmp_path):
    """A starved leader that answers in more than replica.socket.timeout.ms is slow, not gone: after a fetch timed
    out the next waits twice as long (at most 30 s), and an answered fetch sets the timeout to twice its round
    trip, never below the configured one. With a fixed timeout every fetch of a busy machine's leader closed its
    connection and replication stopped (tests/integration/test_busy_machine.py)."""
    from net.errors import KafkaLiteError

    delays = [0.0, 0.2, 0.0]  # seconds each answer takes; then time outs

    async def leader(_leader_id, request, timeout):
        if not delays:
            raise KafkaLiteError(f"request timed out after {timeout}s")
        await asyncio.sleep(delays.pop(0))
        return idle_answer(request)

    async def scenario() -> None:
        f = ReplicaFetcher(1, 2, leader, max_wait_ms=10, timeout_ms=100)
        f.followed.add(follower(tmp_path, 0))
        assert f.timeout_s == 0.1
        await f._fetch_once()
        assert f.timeout_s == 0.1  # a quick answer: the configured timeout
        await f._fetch_once()
        assert 0.39 < f.timeout_s < 0.6  # a 0.2 s answer: twice that
        await f._fetch_once()
        assert f.timeout_s == 0.1  # fast again: back to the configured one
        timeouts = []
        for _ in range(12):
            try:
                await f._fetch_once()
            except KafkaLiteError:
                timeouts.append(f.timeout_s)
        assert timeouts[:3] == [0.2, 0.4, 0.8] and timeouts[-1] == 30.0  # doubled, up to Kafka's 30 s

    asyncio.run(scenario())


def test_a_peer_connection_attempt_that_times_out_gets_twice_as_long_next_time(monkeypatch):
    """Connecting to a peer (its port, TCP, the login) gets 1 s, doubled after each failed attempt up to 16 s and
    back to 1 s once one succeeds: on a starved machine a login takes seconds, and a fixed 1 s failed forever."""
    from broker.network import peers
    from broker.network.peers import CONNECT_TIMEOUT_S, PeerChannel
    from net.errors import NetworkError
    from net.retry import Backoff

    monkeypatch.setattr(peers, "CONNECT_TIMEOUT_MAX_S", 8.0)
    given: list[float] = []

    async def starved_login(self, timeout: float) -> None:  # BrokerConnection.connect, at a peer that is slow
        given.append(timeout)
        raise NetworkError(f"login to {self.address} timed out after {timeout}s")

    monkeypatch.setattr(peers.BrokerConnection, "connect", starved_login)

    async def scenario() -> None:
        channel = PeerChannel(1, 2, "127.0.0.1", 9)
        channel._ib_port = 9  # known: no port discovery here
        channel._reconnect = Backoff(1, 1)  # no backoff between attempts here
        for _ in range(6):
            await channel._connect()
        assert given == [CONNECT_TIMEOUT_S, 2.0, 4.0, 8.0, 8.0, 8.0] and channel._conn is None  # doubled, capped
        monkeypatch.setattr(peers.BrokerConnection, "connect", lambda self, timeout: asyncio.sleep(0))
        await channel._connect()  # a login that succeeds
        assert channel._connect_timeout == CONNECT_TIMEOUT_S  # back to 1 s
        channel.close()

    asyncio.run(scenario())
