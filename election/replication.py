"""Metadata log replication: the controller's view of its followers, and log divergence (KIP-595).

Followers pull. A FetchRequest's (fetch_offset, last_fetched_epoch) names the follower's whole log
prefix, because an (offset, epoch) pair identifies a record and everything before it (Raft's log
matching: only the controller of an epoch creates records of that epoch, each at one offset).
"""

from __future__ import annotations

from election.log import MetadataLog


def diverging(log: MetadataLog, fetch_offset: int, last_fetched_epoch: int) -> tuple[int, int] | None:
    """None if the follower's prefix is a prefix of `log`, else (epoch, end offset) for it to truncate to."""
    if fetch_offset == 0:
        return None
    if fetch_offset <= log.end_offset and log.epoch_of(fetch_offset - 1) == last_fetched_epoch:
        return None
    epoch, end = log.end_offset_for_epoch(last_fetched_epoch)
    if epoch < 0 or end < 0:
        # The follower names an epoch newer than our log (cannot happen while the controller's log
        # ends with its own epoch, but an adapter may say "undefined"): our whole log is the answer.
        return log.last_epoch, log.end_offset
    return epoch, min(end, log.end_offset)


def truncation_offset(log: MetadataLog, diverging_epoch: int, diverging_end: int) -> int:
    """Where a follower truncates after the controller answered (diverging_epoch, diverging_end).

    The controller has no epoch in (diverging_epoch, last_fetched_epoch], and its records of epochs <=
    diverging_epoch end at diverging_end; our records of epochs <= diverging_epoch end at `own_end`.
    Anything above min(both) cannot be shared, and the longest common prefix is never above it, so a
    committed record is never cut. The next fetch checks the rest and may walk back further.
    """
    epoch, own_end = log.end_offset_for_epoch(diverging_epoch)
    if epoch < 0 or own_end < 0:
        own_end = log.end_offset
    return max(0, min(diverging_end, own_end, log.end_offset))


class FollowerTracker:
    """What the controller knows about each follower during its epoch."""

    __slots__ = ("end", "last_fetch_ms", "last_heard_ms", "begin_sent_ms", "sent_hw", "since_ms")

    def __init__(self, now_ms: int) -> None:
        # Log end offset of each follower as far as it is known to match ours. Only raised: within one
        # epoch a follower never loses a matching record (its log is durable and truncation stops at
        # the common prefix), so a stale, reordered fetch may not lower it.
        self.end: dict[int, int] = {}
        self.last_fetch_ms: dict[int, int] = {}
        # Fetches and heartbeats of followers of this epoch (check-quorum); fetches alone decide whether a
        # follower needs BeginEpoch again (one that heartbeats but does not fetch may have missed it).
        self.last_heard_ms: dict[int, int] = {}
        self.begin_sent_ms: dict[int, int] = {}
        # The high watermark in the last answer sent to each follower: a fetch is held (long polling) only
        # when it would bring its follower nothing new, neither records nor a higher high watermark.
        self.sent_hw: dict[int, int] = {}
        self.since_ms = now_ms

    def on_fetch(self, node: int, now_ms: int, matched_end: int | None) -> None:
        self.last_fetch_ms[node] = now_ms
        self.on_heard(node, now_ms)
        if matched_end is not None and matched_end > self.end.get(node, 0):
            self.end[node] = matched_end

    def on_heard(self, node: int, at_ms: int) -> None:
        if at_ms > self.last_heard_ms.get(node, -(10**18)):
            self.last_heard_ms[node] = at_ms

    def majority_end(self, own_end: int, others: tuple[int, ...], majority: int) -> int:
        """The largest offset that a majority of voters (us included) have replicated up to."""
        ends = sorted([own_end, *(self.end.get(v, 0) for v in others)], reverse=True)
        return ends[majority - 1]

    def live_voters(self, others: tuple[int, ...], now_ms: int, window_ms: int) -> int:
        """Voters heard from within `window_ms`, us included."""
        return 1 + sum(1 for v in others if now_ms - self.last_heard_ms.get(v, -(10**18)) < window_ms)
