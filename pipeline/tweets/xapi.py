"""The X (Twitter) API v2 filtered stream, as a tweet source that survives dropped connections.

    GET  /2/tweets/search/stream/rules            the current rules
    POST /2/tweets/search/stream/rules            {"add": [{"value": "#kafka"}]} or {"delete": {"ids": [...]}}
    GET  /2/tweets/search/stream?tweet.fields=... newline-delimited JSON, "\\r\\n" keep-alives every ~20 s

Reconnection follows X's published guidance for the filtered stream:
- a TCP/IP-level problem (refused, reset, dropped, stalled with no data or keep-alive): back off
  linearly, +250 ms per attempt, up to 16 s;
- an HTTP error (5xx, ...): back off exponentially from 5 s, doubling, up to 320 s;
- HTTP 429 (too many requests / connections): back off exponentially from 1 minute, or until
  `x-rate-limit-reset` when the server says when;
- 400/401/403/404 are not retried: the token or the request is wrong.
The backoff resets once a connection delivers a tweet. Stdlib only (urllib): a stream is one long
GET whose lines are read as they come; the socket timeout is the stall detector.
"""

from __future__ import annotations

import http.client
import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from pipeline.tweets.model import BadTweet, Tweet, from_x

log = logging.getLogger("kafkalite.tweets.x")

DEFAULT_API = "https://api.twitter.com"
STREAM_PATH = "/2/tweets/search/stream"
RULES_PATH = "/2/tweets/search/stream/rules"
STREAM_PARAMS = {
    "tweet.fields": "created_at,entities,author_id",
    "expansions": "author_id",
    "user.fields": "username",
}
FATAL_STATUSES = {400, 401, 403, 404}


class XApiError(RuntimeError):
    """A failure that reconnecting will not fix (bad token, bad rule, too many reconnects)."""


@dataclass
class Backoff:
    """X's reconnect schedule; `scale` shrinks every wait (tests run it in milliseconds)."""

    network_step: float = 0.25
    network_max: float = 16.0
    http_start: float = 5.0
    http_max: float = 320.0
    rate_limit_start: float = 60.0
    rate_limit_max: float = 960.0
    scale: float = 1.0

    def __post_init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._network = 0.0
        self._http = 0.0
        self._rate = 0.0

    def network(self) -> float:
        self._network = min(self._network + self.network_step, self.network_max)
        return self._network * self.scale

    def http(self) -> float:
        self._http = min(self._http * 2 if self._http else self.http_start, self.http_max)
        return self._http * self.scale

    def rate_limited(self, reset_at: float | None = None, now: float | None = None) -> float:
        self._rate = min(self._rate * 2 if self._rate else self.rate_limit_start, self.rate_limit_max)
        wait = self._rate
        if reset_at is not None:
            wait = max(1.0, reset_at - (time.time() if now is None else now))
        return wait * self.scale


class FilteredStream:
    """Tweets matching the rules, forever (or until `max_reconnects` in a row fail)."""

    def __init__(
        self,
        bearer_token: str,
        rules: list[str],
        base_url: str = DEFAULT_API,
        backoff: Backoff | None = None,
        stall_timeout: float = 30.0,
        max_reconnects: int | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not bearer_token:
            raise XApiError("the X API needs a bearer token (--bearer-token-env names the variable holding it)")
        self.token = bearer_token
        self.rules = rules
        self.base = base_url.rstrip("/")
        self.backoff = backoff or Backoff()
        self.stall_timeout = stall_timeout
        self.max_reconnects = max_reconnects
        self.sleep = sleep
        self.connections = 0  # successful connections, for progress lines and tests
        self.waits: list[tuple[str, float]] = []  # (reason, seconds) of every backoff

    # --- rules ---------------------------------------------------------------------------

    def _request(self, method: str, path: str, body: dict | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=self._headers())
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as e:
            raise XApiError(f"{method} {path}: HTTP {e.code} {_error_text(e)}") from None
        except (urllib.error.URLError, OSError) as e:
            raise XApiError(f"{method} {path}: {getattr(e, 'reason', e)}") from None

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}", "User-Agent": "kafka-lite-kl-tweets"}

    def sync_rules(self) -> list[dict]:
        """Make the stream's rules exactly `self.rules`: delete the others, add the missing ones."""
        current = self._request("GET", RULES_PATH).get("data") or []
        stale = [r["id"] for r in current if r.get("value") not in self.rules]
        if stale:
            self._request("POST", RULES_PATH, {"delete": {"ids": stale}})
        have = {r.get("value") for r in current}
        missing = [{"value": v, "tag": v} for v in self.rules if v not in have]
        if missing:
            resp = self._request("POST", RULES_PATH, {"add": missing})
            errors = resp.get("errors")
            if errors:
                raise XApiError(f"rule rejected: {errors[0].get('title', '')}: {errors[0].get('detail', errors[0])}")
        return self._request("GET", RULES_PATH).get("data") or []

    # --- the stream ----------------------------------------------------------------------

    def _wait(self, reason: str, seconds: float, failures: int) -> None:
        if self.max_reconnects is not None and failures > self.max_reconnects:
            raise XApiError(f"gave up after {failures - 1} reconnects in a row (last: {reason})")
        log.warning("stream %s; reconnecting in %.2fs", reason, seconds)
        self.waits.append((reason, seconds))
        self.sleep(seconds)

    def __iter__(self) -> Iterator[Tweet]:
        url = self.base + STREAM_PATH + "?" + urllib.parse.urlencode(STREAM_PARAMS)
        failures = 0
        while True:
            req = urllib.request.Request(url, headers=self._headers())
            try:
                resp = urllib.request.urlopen(req, timeout=self.stall_timeout)
            except urllib.error.HTTPError as e:
                failures += 1
                if e.code in FATAL_STATUSES:
                    raise XApiError(f"stream refused: HTTP {e.code} {_error_text(e)}") from None
                if e.code == 429:
                    reset = e.headers.get("x-rate-limit-reset")
                    wait = self.backoff.rate_limited(float(reset) if reset and reset.isdigit() else None)
                    self._wait("rate limited (HTTP 429)", wait, failures)
                else:
                    self._wait(f"HTTP {e.code}", self.backoff.http(), failures)
                continue
            except (urllib.error.URLError, OSError) as e:
                failures += 1
                self._wait(f"connection failed ({getattr(e, 'reason', e)})", self.backoff.network(), failures)
                continue
            self.connections += 1
            reason = "closed by the server"
            try:
                with resp:
                    for raw in resp:
                        line = raw.strip()
                        if not line:
                            continue  # keep-alive
                        try:
                            obj = json.loads(line)
                        except ValueError:
                            log.warning("skipping a line that is not JSON: %r", line[:80])
                            continue
                        if "data" not in obj and obj.get("errors"):
                            # e.g. {"errors": [{"title": "operational-disconnect", ...}]}: X drops the connection
                            reason = f"error message {obj['errors'][0].get('title', obj['errors'][0])!r}"
                            break
                        try:
                            tweet = from_x(obj)
                        except (BadTweet, KeyError, TypeError) as e:
                            log.warning("skipping an object that is not a tweet: %s", e)
                            continue
                        failures = 0
                        self.backoff.reset()
                        yield tweet
            except TimeoutError:
                reason = f"stalled (nothing for {self.stall_timeout:g}s)"
            except (OSError, http.client.HTTPException) as e:  # reset, or a chunked body cut short
                reason = f"dropped ({type(e).__name__})"
            failures += 1
            self._wait(reason, self.backoff.network(), failures)


def _error_text(e: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(e.read() or b"{}")
        return str(body.get("detail") or body.get("title") or body)[:200]
    except (ValueError, OSError):
        return e.reason or ""
