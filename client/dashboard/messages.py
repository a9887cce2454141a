"""Reading records for the Messages page: our consumer with a manual assignment of one partition or all of a
topic's, from an offset, from a timestamp (ListOffsets by time), from the beginning, or the newest N (the last
N before the high watermark)."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any, Awaitable, TypeVar

from client.consumer import AsyncConsumer, TopicPartition
from client.fetcher import ConsumerRecord
from net.errors import KafkaLiteError

T = TypeVar("T")
MAX_LIMIT = 500


def render_bytes(data: bytes | None) -> dict[str, Any]:
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


def start_offset(mode: str, log_start: int, end: int, limit: int, offset: int | None, found: int | None) -> int:
    """Where one partition's read begins: `found` is the ListOffsets-by-time answer in timestamp mode."""
    if mode == "beginning":
        return log_start
    if mode == "offset":
        return max(log_start, min(int(offset or 0), end))
    if mode == "timestamp":
        return found if found is not None and found >= 0 else end
    return max(log_start, end - limit)  # newest


def merge_key(
    r: ConsumerRecord, newest: bool, end: dict[TopicPartition, int], first: dict[TopicPartition, int]
) -> tuple[int, int, int]:
    """Records of several partitions in time order. A producer stamps a whole batch with one time, so ties are
    common: among equal times the partitions take turns (by distance from the end of the read, or from its
    start) rather than one partition's records all coming before another's."""
    tp = TopicPartition(r.topic, r.partition)
    turn = r.offset - end[tp] if newest else r.offset - first[tp]
    return (r.timestamp, turn, r.partition)


async def read_messages(
    bootstrap: str,
    topic: str,
    partition: int | None,
    *,
    mode: str = "newest",
    offset: int | None = None,
    timestamp_ms: int | None = None,
    limit: int = 50,
    timeout_s: float = 3.0,
    client_config: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Up to `limit` records of one partition, or of every partition of the topic (`partition` None);
    mode: newest | beginning | offset | timestamp.

    Across partitions, as Kafka UIs do: each partition is read from its own start (the same offset in offset
    mode, its first offset at/after the time in timestamp mode) up to `limit` records or its high watermark,
    then the records are merged by timestamp, newest first in newest mode, oldest first otherwise."""
    limit = max(1, min(limit, MAX_LIMIT))
    settings = {"client_id": "kl-dashboard", "request_timeout_ms": int(timeout_s * 1000), **(client_config or {})}
    consumer = AsyncConsumer(bootstrap, auto_offset_reset="earliest", **settings)
    deadline = time.monotonic() + timeout_s

    async def bounded(aw: Awaitable[T]) -> T:
        return await asyncio.wait_for(aw, max(0.05, deadline - time.monotonic()))

    try:
        await bounded(consumer.start())
        if partition is None:
            numbers = (await bounded(consumer.list_topics())).get(topic)
            if numbers is None:
                raise KafkaLiteError(f"unknown topic {topic!r}")
        else:
            numbers = [partition]
        tps = [TopicPartition(topic, p) for p in numbers]
        await consumer.assign(tps)
        log_start = await bounded(consumer.list_offsets(tps, -2))
        end = await bounded(consumer.list_offsets(tps, -1))
        found = await bounded(consumer.list_offsets(tps, int(timestamp_ms or 0))) if mode == "timestamp" else {}
        pending: dict[TopicPartition, int] = {}  # partition -> how many more records to read from it
        first: dict[TopicPartition, int] = {}  # partition -> the offset its read starts at
        for tp in tps:
            first[tp] = start_offset(mode, log_start[tp], end[tp], limit, offset, found.get(tp))
            if first[tp] < end[tp]:
                consumer.seek(tp, first[tp])
                pending[tp] = min(limit, end[tp] - first[tp])
        records = []
        assigned = set(tps)
        while pending and time.monotonic() < deadline:
            if set(pending) != assigned:  # a finished partition is fetched no more
                assigned = set(pending)
                await consumer.assign(list(assigned))
            batch = await consumer.poll(timeout_ms=int(max(0.05, deadline - time.monotonic()) * 1000))
            for r in batch:
                tp = TopicPartition(r.topic, r.partition)
                if pending.get(tp, 0) > 0 and r.offset < end[tp]:
                    records.append(r)
                    pending[tp] -= 1
                    if r.offset >= end[tp] - 1:
                        pending[tp] = 0
            pending = {tp: n for tp, n in pending.items() if n > 0}
        newest = mode == "newest"
        if partition is None:
            records.sort(key=lambda r: merge_key(r, newest, end, first), reverse=newest)
        else:  # one partition: offset order, whatever times its producers stamped
            records.sort(key=lambda r: r.offset, reverse=newest)
        records = records[:limit]
        return {
            "topic": topic,
            "partition": partition,
            "partitions": [
                {"partition": tp.partition, "log_start": log_start[tp], "high_watermark": end[tp]} for tp in tps
            ],
            "log_start": log_start[tps[0]] if partition is not None else None,
            "high_watermark": end[tps[0]] if partition is not None else None,
            "records": [
                {
                    "partition": r.partition,
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
