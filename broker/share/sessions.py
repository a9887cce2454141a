"""Share sessions on a partition leader (KIP-932's ShareSessionCache), sans-IO.

A share consumer keeps one share session per broker it fetches from: epoch 0 opens it (naming partitions), each
next ShareFetch or ShareAcknowledge carries the next epoch and may add partitions (`topics`) or drop them
(`forgotten_topics_data`), and epoch -1 closes it. A session's partitions are what its ShareFetch reads, so an
incremental request need not name them again. When a session ends (closed, replaced by a new epoch 0 of the same
member, or idle past the eviction time) the records its member holds here are released.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from net.errors import ErrorCode

FINAL_EPOCH = -1
INITIAL_EPOCH = 0


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    epoch: int  # the epoch the next request must carry
    partitions: set[tuple[str, int]] = field(default_factory=set)
    last_used_ms: int = 0


class SessionError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class ShareSessionCache:
    def __init__(self, max_sessions: int, idle_ms: int) -> None:
        self.max_sessions = max_sessions
        self.idle_ms = idle_ms
        self.sessions: dict[tuple[str, str], ShareSession] = {}

    def open(self, group_id: str, member_id: str, now_ms: int) -> tuple[ShareSession, ShareSession | None]:
        """Epoch 0: a new session; returns it and the member's session it replaces (whose records go back)."""
        key = (group_id, member_id)
        old = self.sessions.pop(key, None)
        if len(self.sessions) >= self.max_sessions:
            if old is not None:
                self.sessions[key] = old
            raise SessionError(ErrorCode.SHARE_SESSION_LIMIT_REACHED, "the share session limit is reached")
        s = self.sessions[key] = ShareSession(group_id, member_id, 1, set(), now_ms)
        return s, old

    def use(self, group_id: str, member_id: str, epoch: int, now_ms: int) -> ShareSession:
        """A request in an open session: its epoch must be the next one; the session moves on to the one after."""
        s = self.sessions.get((group_id, member_id))
        if s is None:
            raise SessionError(ErrorCode.SHARE_SESSION_NOT_FOUND, f"no share session for member {member_id}")
        if epoch == FINAL_EPOCH:
            return s
        if epoch != s.epoch:
            raise SessionError(
                ErrorCode.INVALID_SHARE_SESSION_EPOCH, f"share session epoch {epoch}, expected {s.epoch}"
            )
        s.epoch = 1 if s.epoch == 2**31 - 1 else s.epoch + 1
        s.last_used_ms = now_ms
        return s

    def close(self, group_id: str, member_id: str) -> ShareSession | None:
        return self.sessions.pop((group_id, member_id), None)

    def has_group(self, group_id: str) -> bool:
        """Whether any member of the group has a session here."""
        return any(g == group_id for g, _ in self.sessions)

    def evict_idle(self, now_ms: int) -> list[ShareSession]:
        idle = [s for s in self.sessions.values() if now_ms - s.last_used_ms > self.idle_ms]
        for s in idle:
            del self.sessions[(s.group_id, s.member_id)]
        return idle
