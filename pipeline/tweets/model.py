"""The tweet event published to Kafka Lite: JSON, keyed by the user id.

    {"id": "1790…", "user": {"id": "2244994945", "username": "XDevelopers"},
     "text": "…", "hashtags": ["Kafka", "spark"], "created_at": "2026-05-01T12:00:00.000Z"}

Keying by user id keeps one user's tweets in one partition, hence in order. Hashtags keep their
case in the event; counting lower-cases them (Twitter hashtags are case-insensitive), here and in
the Spark job (pipeline/jobs.py).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

HASHTAG_RE = re.compile(r"#(\w+)")


def extract_hashtags(text: str) -> list[str]:
    """Hashtags of a text, in order, first spelling of each kept."""
    seen: set[str] = set()
    out = []
    for tag in HASHTAG_RE.findall(text or ""):
        if tag.lower() not in seen:
            seen.add(tag.lower())
            out.append(tag)
    return out


def iso_ms(ms: int) -> str:
    """Epoch milliseconds as the X API writes created_at: 2026-05-01T12:00:00.000Z."""
    dt = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class Tweet:
    id: str
    user_id: str
    username: str
    text: str
    hashtags: list[str] = field(default_factory=list)
    created_at: str = ""

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "id": self.id,
                "user": {"id": self.user_id, "username": self.username},
                "text": self.text,
                "hashtags": self.hashtags,
                "created_at": self.created_at,
            },
            ensure_ascii=False,
            separators=(",", ":"),
        ).encode()

    @property
    def key(self) -> bytes:
        return self.user_id.encode()

    def tags(self) -> list[str]:
        """Lower-case, distinct: what is counted."""
        return list(dict.fromkeys(t.lower() for t in self.hashtags))

    def has_any(self, wanted: set[str]) -> bool:
        return not wanted or any(t in wanted for t in self.tags())


class BadTweet(ValueError):
    """A line that is neither our event format nor an X API v2 tweet."""


def from_event(obj: Any) -> Tweet:
    """Our event JSON (see the module docstring), or an X API v2 stream object {"data": ...}."""
    if not isinstance(obj, dict):
        raise BadTweet("not a JSON object")
    if "data" in obj and isinstance(obj["data"], dict):
        return from_x(obj)
    tid, text = obj.get("id"), obj.get("text")
    if tid is None or not isinstance(text, str):
        raise BadTweet("needs at least 'id' and 'text'")
    user = obj.get("user")
    if isinstance(user, dict):
        uid, uname = str(user.get("id", "")), str(user.get("username", user.get("name", "")))
    else:
        uid, uname = str(user or obj.get("user_id", "")), str(obj.get("username", ""))
    tags = obj.get("hashtags")
    if not isinstance(tags, list):
        tags = extract_hashtags(text)
    created = obj.get("created_at") or iso_ms(now_ms())
    return Tweet(str(tid), uid, uname, text, [str(t).lstrip("#") for t in tags], str(created))


def from_x(obj: dict) -> Tweet:
    """One object of the X API v2 filtered stream (tweet.fields=created_at,entities,author_id;
    expansions=author_id; user.fields=username)."""
    data = obj["data"]
    if "id" not in data or "text" not in data:
        raise BadTweet("X API object without data.id / data.text")
    author = str(data.get("author_id", ""))
    username = ""
    for u in (obj.get("includes") or {}).get("users") or []:
        if str(u.get("id")) == author:
            username = str(u.get("username", ""))
    entities = (data.get("entities") or {}).get("hashtags")
    tags = [str(h.get("tag", "")) for h in entities] if isinstance(entities, list) else extract_hashtags(data["text"])
    return Tweet(
        str(data["id"]),
        author,
        username,
        data["text"],
        [t for t in tags if t],
        data.get("created_at") or iso_ms(now_ms()),
    )


def parse_line(line: str | bytes) -> Tweet:
    try:
        obj = json.loads(line)
    except ValueError as e:
        raise BadTweet(f"not JSON: {e}") from None
    return from_event(obj)
