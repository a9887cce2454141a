"""Reading records for the Messages page: our consumer with a manual assignment, from an offset, from a
timestamp (ListOffsets by time), from the beginning, or the newest N (the last N before the high watermark)."""

from __future__ import annotations

import asyncio
import base64
import json
import time

from client.consumer import AsyncConsumer, TopicPartition

MAX_LIMIT = 500


def render_bytes(data: bytes | None) -> dict:
    """A key or value as the page shows it: JSON pretty-printed, else text, else hex."""
    if data is None:
        return {"kind": "null", "text": "null"}
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return {"kind": "hex", "text": data.hex(" "), "b64": base64.b64encode(data).decode()}
    try:
        parsed = json.loads(text)
        if isinstance(parsed, dict | list):
            return {"kind": "json", "text": json.dumps(parsed, indent=2, ensure_ascii=False)}
    except ValueError:
        pass
    if any(ord(c) < 32 and c not in "\t\r\n" for c in text):
        return {"kind": "hex", "text": data.hex(" ")}
    return {"kind": "text", "text": text}


async def read_messages(
    bootstrap: str,
    topic: str,
    partition: int,
    *,
    mode: str = "newest",
    offset: int | None = None,
    timestamp_ms: int | None = None,
    limit: int = 50,
    timeout_s: float = 3.0,
    client_config: dict | None = None,
) -> dict:
    """Up to `limit` records of one partition; mode: newest | beginning | offset | timestamp."""
    limit = max(1, min(limit, MAX_LIMIT))
    tp = TopicPartition(topic, partition)
    settings = {"client_id": "kl-dashboard", "request_timeout_ms": int(timeout_s * 1000), **(client_config or {})}
    consumer = AsyncConsumer(bootstrap, auto_offset_reset="earliest", **settings)
    deadline = time.monotonic() + timeout_s
    try:
        await asyncio.wait_for(consumer.start(), timeout_s)
        await consumer.assign([tp])
        start_offsets = await asyncio.wait_for(consumer.list_offsets([tp], -2), timeout_s)
        end_offsets = await asyncio.wait_for(consumer.list_offsets([tp], -1), timeout_s)
        log_start, end = start_offsets[tp], end_offsets[tp]
        if mode == "beginning":
            start = log_start
        elif mode == "offset":
            start = max(log_start, min(int(offset or 0), end))
        elif mode == "timestamp":
            found = (await asyncio.wait_for(consumer.list_offsets([tp], int(timestamp_ms or 0)), timeout_s))[tp]
            start = found if found >= 0 else end
        else:
            start = max(log_start, end - limit)
        consumer.seek(tp, start)
        records = []
        while len(records) < limit and time.monotonic() < deadline:
            if (records and records[-1].offset >= end - 1) or start >= end:
                break
            batch = await consumer.poll(timeout_ms=int(max(0.05, deadline - time.monotonic()) * 1000))
            records.extend(r for r in batch if r.partition == partition)
        records = records[:limit]
        if mode == "newest":
            records.reverse()
        return {
            "topic": topic,
            "partition": partition,
            "log_start": log_start,
            "high_watermark": end,
            "records": [
                {
                    "offset": r.offset,
                    "timestamp": r.timestamp,
                    "key": render_bytes(r.key),
                    "value": render_bytes(r.value),
                    "headers": [
                        [k if isinstance(k, str) else k.decode("utf-8", "replace"), render_bytes(v)["text"]]
                        for k, v in r.headers
                    ],
                }
                for r in records
            ],
        }
    finally:
        await consumer.close()
