"""Timing and batching knobs of the controller quorum (all in virtual milliseconds)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class QuorumConfig:
    # The proposal's failure detector: no word from the controller for 2 s means it is gone.
    election_timeout_ms: int = 2000
    # Drawn afresh from the node's rng for every timer, so that nodes rarely time out together.
    election_jitter_ms: int = 500
    # Step 1 window: how long to collect ElectionStates before evaluating (unless all arrived).
    # When a voter is dead (the usual reason for an election) the window always runs to its end, so it
    # is paid in every controller failover. States are answered within milliseconds (one fsync of the
    # vote file and a send; a few ms measured on loopback), so 100 ms still leaves a wide margin for a
    # busy host. Its length only decides how many states a vote compares, never whether the vote is safe
    # (docs/ELECTION.md section 4); a state that arrives late costs at worst a split vote and a new round.
    state_collection_ms: int = 100
    # After voting, how long to wait for a BeginEpoch before trying again in a new epoch.
    evaluation_timeout_ms: int = 1000
    # A follower's next fetch after an answer with no records (one with records is followed at once).
    fetch_interval_ms: int = 50
    # How long the controller holds a follower's fetch that finds nothing new (long polling, as KRaft's
    # followers fetch): an idle quorum exchanges about two fetches a second per follower instead of twenty,
    # and a new record or high watermark reaches the followers at once instead of at their next poll. The
    # fetch still doubles as the follower's heartbeat: an answer comes at least every fetch_max_wait_ms plus
    # a round trip, well inside the election timeout.
    fetch_max_wait_ms: int = 500
    fetch_max_records: int = 1000
    # A controller re-sends BeginEpoch this often to voters that do not fetch, in case it was lost.
    begin_epoch_resend_ms: int = 250

    def __post_init__(self) -> None:
        for name in self.__slots__:
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if self.fetch_interval_ms <= 0 or self.fetch_max_records <= 0:
            raise ValueError("fetch_interval_ms and fetch_max_records must be > 0")
        if self.fetch_interval_ms + 2 * self.fetch_max_wait_ms >= self.election_timeout_ms:
            raise ValueError(
                "fetch_interval_ms + 2 * fetch_max_wait_ms must be well below election_timeout_ms (fetches are "
                "heartbeats)"
            )
