"""The tweet stream: the synthetic generator, the X API v2 filtered-stream client against a local fake
X server (streaming, a dropped connection, HTTP 429/503, stalls, rules), and kl-tweets produce /
consume against a real broker, including a consumer group of three processes sharing the work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from client import Admin, NewTopic
from client.consumer import TopicPartition
from client.sync import Consumer
from pipeline.tweets.generator import SyntheticTweets
from pipeline.tweets.model import Tweet, extract_hashtags, parse_line
from pipeline.tweets.xapi import Backoff, FilteredStream, XApiError
from tests.conftest import ROOT

# --- a fake X API --------------------------------------------------------------------------------


def x_tweet(i: int, tags: list[str]) -> dict:
    text = f"tweet number {i} " + " ".join(f"#{t}" for t in tags)
    return {
        "data": {
            "id": str(1000 + i),
            "text": text,
            "author_id": str(500 + i % 4),
            "created_at": f"2026-03-01T10:00:{i % 60:02d}.000Z",
            "entities": {"hashtags": [{"start": 0, "end": 1, "tag": t} for t in tags]},
        },
        "includes": {"users": [{"id": str(500 + i % 4), "username": f"user{i % 4}"}]},
        "matching_rules": [{"id": "1", "tag": "#kafka"}],
    }


class FakeX:
    """Serves the rules endpoints and plays one scripted behaviour per stream connection:
    ("tweets", [ids], then) with then = "drop" | "stall" | "hold"; ("status", code, headers)."""

    def __init__(self, script: list[tuple]) -> None:
        self.script = list(script)
        self.rules: list[dict] = [{"id": "99", "value": "old rule", "tag": "old"}]
        self.rule_posts: list[dict] = []
        self.auth: list[str] = []
        self.connections = 0
        self.stop = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a) -> None:  # type: ignore[no-untyped-def]
                pass

            def _json(self, code: int, body: dict, headers: dict | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                fake.auth.append(self.headers.get("Authorization", ""))
                if self.path.startswith("/2/tweets/search/stream/rules"):
                    return self._json(200, {"data": fake.rules} if fake.rules else {"meta": {"result_count": 0}})
                if not self.path.startswith("/2/tweets/search/stream?"):
                    return self._json(404, {"title": "Not Found"})
                fake.connections += 1
                step = fake.script.pop(0) if fake.script else ("status", 503, {})
                if step[0] == "status":
                    return self._json(step[1], {"title": "scripted", "detail": f"status {step[1]}"}, step[2])
                _, ids, then = step
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for i in ids:
                    self._chunk(b"\r\n")  # keep-alive
                    self._chunk(json.dumps(x_tweet(i, ["kafka", "spark" if i % 2 else "Kafka"])).encode() + b"\r\n")
                if then == "drop":
                    self.wfile.flush()
                    self.connection.shutdown(2)  # mid-stream, no terminating chunk
                    return
                if then == "stall":
                    fake.stop.wait(3)
                    return
                while not fake.stop.is_set():  # hold: keep-alives until the test ends
                    try:
                        self._chunk(b"\r\n")
                    except OSError:
                        return
                    fake.stop.wait(0.05)

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def do_POST(self) -> None:  # noqa: N802
                fake.auth.append(self.headers.get("Authorization", ""))
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                fake.rule_posts.append(body)
                if "delete" in body:
                    fake.rules = [r for r in fake.rules if r["id"] not in body["delete"]["ids"]]
                    return self._json(200, {"meta": {"summary": {"deleted": len(body["delete"]["ids"])}}})
                added = [{"id": str(100 + n), **r} for n, r in enumerate(body.get("add", []))]
                fake.rules += added
                return self._json(201, {"data": added, "meta": {"summary": {"created": len(added)}}})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeX:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:  # type: ignore[no-untyped-def]
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


# --- the X client --------------------------------------------------------------------------------


def test_stream_survives_a_drop_429_503_and_a_stall_with_the_documented_backoff():
    script = [
        ("tweets", [1, 2, 3], "drop"),
        ("status", 429, {}),
        ("status", 429, {}),
        ("status", 503, {}),
        ("tweets", [4], "stall"),
        ("tweets", [5, 6], "hold"),
    ]
    with FakeX(script) as fx:
        slept: list[float] = []
        stream = FilteredStream(
            "tok", ["#kafka"], fx.url, Backoff(scale=0.001), stall_timeout=0.5, sleep=lambda s: slept.append(s)
        )
        rules = stream.sync_rules()
        got: list[Tweet] = []
        for t in stream:
            got.append(t)
            if len(got) == 6:
                break
    assert [t.id for t in got] == ["1001", "1002", "1003", "1004", "1005", "1006"]
    assert got[0].user_id == "501" and got[0].username == "user1" and got[0].tags() == ["kafka", "spark"]
    reasons = [r for r, _ in stream.waits]
    assert reasons[0].startswith("dropped") or reasons[0] == "closed by the server"
    assert reasons[1:4] == ["rate limited (HTTP 429)", "rate limited (HTTP 429)", "HTTP 503"]
    assert reasons[4].startswith("stalled")
    # X's schedule: network +250 ms linear; 429 from 60 s doubling; 5xx from 5 s; reset by a delivered tweet.
    assert slept == pytest.approx([0.00025, 0.060, 0.120, 0.005, 0.00025])
    assert stream.connections == 3
    assert fx.rules == rules and [r["value"] for r in rules] == ["#kafka"]
    assert fx.rule_posts == [{"delete": {"ids": ["99"]}}, {"add": [{"value": "#kafka", "tag": "#kafka"}]}]
    assert set(fx.auth) == {"Bearer tok"}


def test_bad_token_is_not_retried():
    with FakeX([("status", 401, {})]) as fx:
        stream = FilteredStream("bad", ["#kafka"], fx.url, Backoff(scale=0.001), sleep=lambda s: None)
        with pytest.raises(XApiError, match="HTTP 401"):
            next(iter(stream))
        assert fx.connections == 1


def test_rate_limit_reset_header_is_honoured():
    b = Backoff(scale=1.0)
    assert b.rate_limited(reset_at=1000.0 + 42, now=1000.0) == pytest.approx(42)
    assert b.rate_limited() == 120.0  # the exponential schedule goes on underneath
    assert [Backoff().http() for _ in range(1)] == [5.0]
    n = Backoff()
    assert [n.network() for _ in range(70)][-1] == 16.0  # capped


def test_gives_up_after_max_reconnects():
    with FakeX([("status", 503, {})] * 5) as fx:
        stream = FilteredStream("t", ["#k"], fx.url, Backoff(scale=0.0001), max_reconnects=2, sleep=lambda s: None)
        with pytest.raises(XApiError, match="gave up after 2 reconnects"):
            next(iter(stream))


# --- the generator and the event format ----------------------------------------------------------


def test_generator_is_zipf_skewed_tracked_and_bursty():
    gen = SyntheticTweets(["Kafka"], seed=3, trend_every_s=5, trend_length_s=3)
    t0 = 1_780_000_000_000
    tweets = [gen.make(t0 + i * 10) for i in range(20_000)]  # 200 s of event time at 100/s
    assert all("kafka" in t.tags() for t in tweets), "a filtered stream: every tweet has the tracked hashtag"
    assert len({t.id for t in tweets}) == len(tweets) and [int(t.id) for t in tweets] == sorted(
        int(t.id) for t in tweets
    )
    users = Counter(t.user_id for t in tweets)
    top_users = sum(c for _, c in users.most_common(50))
    assert top_users > 0.25 * len(tweets), "Zipf: 1% of the users write a large share"
    tags = Counter(tag for t in tweets for tag in t.tags() if tag != "kafka")
    (first, c1), (_, c10) = tags.most_common(1)[0], tags.most_common(10)[-1]
    assert c1 > 3 * c10, f"Zipf-skewed hashtags ({first} {c1} vs 10th {c10})"
    for t in tweets[:200]:
        assert all(h.lower() in t.text.lower() for h in t.hashtags)
        assert extract_hashtags(t.text) and t.created_at.endswith("Z")
        assert parse_line(t.to_json()) == t
    factors = []
    for i in range(3000):
        gen.make(t0 + 300_000 + i * 100)
        factors.append(gen.rate_factor())
    assert max(factors) > 1.5 and factors.count(1.0) > len(factors) / 3, "bursts come and go"
    assert SyntheticTweets(["k"], seed=1, bursts=False).rate_factor() == 1.0


# --- kl-tweets against a broker --------------------------------------------------------------------


def kl_tweets(*args: str, env: dict | None = None, input: str | None = None, timeout: float = 120):
    return subprocess.run(
        [sys.executable, "-m", "pipeline.tweets.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        input=input,
        env={**os.environ, **(env or {})},
    )


def read_topic(bootstrap: str, topic: str, partitions: int) -> list:
    out = []
    with Consumer(bootstrap, auto_offset_reset="earliest") as c:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        c.assign(tps)
        ends = c.list_offsets(tps, -1)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(c.position(tp) < ends[tp] for tp in tps):
            out += c.poll(500)
    return out


def test_produce_from_the_x_stream_reconnecting(broker, tmp_path):
    with Admin(broker.bootstrap) as a:
        a.create_topics([NewTopic("tweets", 2, 1)])
    acked = tmp_path / "acked.txt"
    with FakeX([("tweets", list(range(5)), "drop"), ("status", 500, {}), ("tweets", list(range(5, 12)), "hold")]) as fx:
        r = kl_tweets(
            "produce", "--bootstrap-server", broker.bootstrap, "--source", "x", "--hashtag", "kafka",
            "--api-url", fx.url, "--count", "12", "--acked-file", str(acked),
            env={"X_BEARER_TOKEN": "sekrit"}, timeout=60,
        )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "acknowledged 12 of 12" in r.stdout
    assert "reconnecting" in r.stderr  # the drop and the 500 were logged, and survived
    assert sorted(acked.read_text().split()) == [str(1000 + i) for i in range(12)]
    records = read_topic(broker.bootstrap, "tweets", 2)
    assert sorted(json.loads(r.value)["id"] for r in records) == [str(1000 + i) for i in range(12)]
    assert all(r.key.decode() == json.loads(r.value)["user"]["id"] for r in records), "key = user id"
    # One user's tweets stay in one partition, in order.
    by_user: dict[str, list] = {}
    for rec in records:
        by_user.setdefault(rec.key, []).append((rec.partition, rec.offset, json.loads(rec.value)["id"]))
    for rows in by_user.values():
        assert len({p for p, _, _ in rows}) == 1 and [i for *_, i in sorted(rows)] == sorted(i for *_, i in rows)


def test_produce_from_jsonl_file_and_stdin(broker, tmp_path):
    with Admin(broker.bootstrap) as a:
        a.create_topics([NewTopic("tweets", 3, 1)])
    lines = [
        json.dumps({"id": "1", "user": {"id": "u1", "username": "a"}, "text": "hello #Kafka", "created_at": "x"}),
        json.dumps(x_tweet(2, ["kafka"])),
        "not json at all",
        json.dumps({"id": "3", "user": "u3", "text": "no tracked tag #spark"}),
        json.dumps({"id": "4", "user": "u4", "text": "plain", "hashtags": ["KAFKA"]}),
    ]
    f = tmp_path / "in.jsonl"
    f.write_text("\n".join(lines) + "\n")
    r = kl_tweets("produce", "--bootstrap-server", broker.bootstrap, "--file", str(f), "--hashtag", "kafka")
    assert r.returncode == 0, r.stderr
    assert "acknowledged 3 of 3" in r.stdout and "2 input lines skipped" in r.stdout
    assert "line 3 skipped: not JSON" in r.stderr
    r = kl_tweets("produce", "--bootstrap-server", broker.bootstrap, "--file", "-", input="\n".join(lines[:2]) + "\n")
    assert r.returncode == 0 and "acknowledged 2 of 2" in r.stdout
    ids = sorted(json.loads(x.value)["id"] for x in read_topic(broker.bootstrap, "tweets", 3))
    assert ids == ["1", "1", "1002", "1002", "4"]
    r = kl_tweets("produce", "--bootstrap-server", broker.bootstrap, "--source", "x", "--hashtag", "k")
    assert r.returncode == 1 and r.stderr.strip() == "Error: the X API source needs a bearer token in $X_BEARER_TOKEN"


@pytest.fixture
def group_broker(broker_factory):
    return broker_factory(extra=["--override", "group.initial.rebalance.delay.ms=0"])


def test_three_consumer_processes_share_the_partitions(group_broker, tmp_path):
    bs = group_broker.bootstrap
    with Admin(bs) as a:
        a.create_topics([NewTopic("tweets", 3, 1)])
    procs = []
    for n in range(3):
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "pipeline.tweets.cli", "consume", "--bootstrap-server", bs, "--group", "g",
                 "--output", str(tmp_path / f"c{n}.jsonl"), "--session-timeout-ms", "6000",
                 "--heartbeat-interval-ms", "500", "--name", f"c{n}", "--report-every", "1"],
                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            )
        )  # fmt: skip
    try:
        with Admin(bs) as a:
            deadline = time.monotonic() + 40
            while True:
                try:
                    d = a.describe_group("g")
                    if d.state == "Stable" and len(d.members) == 3:
                        break
                except Exception:  # noqa: BLE001 - the group does not exist until the first join
                    pass
                assert time.monotonic() < deadline, "the three members never formed a stable group"
                time.sleep(0.3)
        r = kl_tweets(
            "produce", "--bootstrap-server", bs, "--hashtag", "kafka", "--count", "600", "--rate", "0",
            "--seed", "5", "--acked-file", str(tmp_path / "acked.txt"),
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        acked = set((tmp_path / "acked.txt").read_text().split())
        assert len(acked) == 600

        def consumed() -> dict[str, list]:
            out: dict[str, list] = {}
            for n in range(3):
                p = tmp_path / f"c{n}.jsonl"
                out[f"c{n}"] = [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []
            return out

        deadline = time.monotonic() + 30
        while {x["id"] for rows in consumed().values() for x in rows} != acked:
            assert time.monotonic() < deadline, "the group did not consume every acknowledged tweet"
            time.sleep(0.3)
    finally:
        for p in procs:
            p.terminate()
        outs = [p.communicate(timeout=30)[0] for p in procs]
    rows = consumed()
    parts = {name: {x["p"] for x in r} for name, r in rows.items()}
    assert all(len(p) == 1 for p in parts.values()), f"each member owns one partition: {parts}"
    assert set().union(*parts.values()) == {0, 1, 2}
    assert all(p.returncode == 0 for p in procs), outs
    totals = [
        int(o.split("] ")[-1].split(" distinct")[0])
        for out in outs
        for o in out.splitlines()
        if "distinct tweets in" in o
    ]
    assert sum(totals) == 600, outs
    assert all("top" in o for o in outs)
