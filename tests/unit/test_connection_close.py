"""A request read before its connection closed runs to its end (Kafka's handlers finish it and drop the answer);
only the long polls (Fetch, ShareFetch) are cut short. A consumer's leave sent just before it closed the socket
was cancelled with the connection, and the member stayed in its group until its session timed out."""

from __future__ import annotations

import asyncio
from typing import Any

from broker.network.server import BrokerProtocol, ConnectionContext, NativeCodec
from net.messages import encode
from net.protocol import SUPPORTED_VERSIONS, ApiKey, encode_request
from net.schema.fetch import FetchRequest
from net.schema.offset_commit import OffsetCommitRequest
from net.schema.share_group_heartbeat import ShareGroupHeartbeatRequest


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def write(self, data: bytes) -> None:  # type: ignore[override]
        self.written.append(bytes(data))

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


class _Handler:
    """Every request waits for `release`, then records that it ran to its end."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.finished: list[int] = []
        self.cancelled: list[int] = []

    def handle(self, api_key: int, version: int, body: Any, ctx: ConnectionContext) -> Any:
        async def run() -> dict[str, Any]:
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.cancelled.append(api_key)
                raise
            self.finished.append(api_key)
            return {"error_code": 0}

        return run()


def test_a_state_change_read_before_the_close_runs_to_its_end_and_a_long_poll_is_cut_short():
    async def scenario() -> tuple[list[int], list[int], list[bytes]]:
        handler = _Handler()
        transport = _Transport()
        proto = BrokerProtocol(handler, NativeCodec(), on_close=lambda _p: None, ordered=False)
        proto.connection_made(transport)
        # A fetch's long poll, then (unordered, so both start) a group heartbeat that leaves and an offset commit.
        requests = [
            FetchRequest(),
            ShareGroupHeartbeatRequest(group_id="g", member_id="m", member_epoch=-1),  # the leave
            OffsetCommitRequest(group_id="g"),
        ]
        frames = [
            encode_request(r.API_KEY, SUPPORTED_VERSIONS[r.API_KEY][1], i, "c", encode(r))
            for i, r in enumerate(requests)
        ]
        proto.data_received(b"".join(frames))
        await asyncio.sleep(0)  # each handler is at its await
        proto.connection_lost(None)  # the peer closed the socket without waiting for the answers
        await asyncio.sleep(0)
        handler.release.set()
        for _ in range(5):
            await asyncio.sleep(0)
        return handler.finished, handler.cancelled, transport.written

    finished, cancelled, written = asyncio.run(scenario())
    assert sorted(finished) == sorted([ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.OFFSET_COMMIT])
    assert cancelled == [ApiKey.FETCH]
    assert written == []  # nothing is written to a closed connection
