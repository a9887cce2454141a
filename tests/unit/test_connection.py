"""net/connection.py against a real loopback socket whose peer stops reading for a while."""

from __future__ import annotations

import asyncio

from net.connection import BrokerConnection
from net.protocol import FrameDecoder, encode_response, parse_request


async def _slow_reader(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    # Read nothing at first, so the client's socket buffers fill and its transport pauses writing.
    await asyncio.sleep(0.5)
    decoder = FrameDecoder(64 * 1024 * 1024)
    while data := await reader.read(1 << 20):
        for payload in decoder.feed(data):
            _, _, corr, _, body = parse_request(payload)
            writer.write(encode_response(corr, {"n": len(body["blob"])}))
    writer.close()


def test_concurrent_requests_all_complete_after_the_peer_resumes_reading():
    """Every writer waiting for the paused transport is released (one waiter used to replace another,
    and a producer with several partitions in flight stalled forever)."""

    async def main() -> list[dict]:
        server = await asyncio.start_server(_slow_reader, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        conn = BrokerConnection("127.0.0.1", port)
        await conn.connect()
        blob = b"x" * (4 << 20)  # far above the transport's high-water mark
        try:
            return await asyncio.wait_for(
                asyncio.gather(*(conn.request(0, {"blob": blob}, timeout=20) for _ in range(4))), 30
            )
        finally:
            conn.close()
            server.close()

    assert asyncio.run(main()) == [{"n": 4 << 20}] * 4


def test_request_timeout_covers_a_peer_that_never_reads():
    async def main() -> None:
        stop = asyncio.Event()

        async def never_reads(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await stop.wait()
            writer.close()

        server = await asyncio.start_server(never_reads, "127.0.0.1", 0)
        conn = BrokerConnection("127.0.0.1", server.sockets[0].getsockname()[1])
        await conn.connect()
        try:
            t0 = asyncio.get_running_loop().time()
            try:
                await conn.request(0, {"blob": b"x" * (32 << 20)}, timeout=0.5)
            except Exception as e:  # noqa: BLE001
                assert "timed out" in str(e), e
            else:
                raise AssertionError("a request to a peer that never reads succeeded")
            assert asyncio.get_running_loop().time() - t0 < 5
        finally:
            stop.set()
            conn.close()
            server.close()

    asyncio.run(main())
