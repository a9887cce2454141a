"""Which replica fetcher lane follows a partition (broker/server/broker_server.py fetcher_lane)."""

from __future__ import annotations

from collections import Counter

from broker.server.broker_server import LANE_SPAN, fetcher_lane


def test_a_small_topics_partitions_share_one_lane():
    """A transaction's batches and markers on a topic's partitions are appended together: one lane, one fetch round
    per follower, rather than a round per partition."""
    for topic in ("orders", "__transaction_state", "__consumer_offsets", "t"):
        assert len({fetcher_lane(topic, p, 4) for p in range(50)}) == 1, topic


def test_a_flood_of_partitions_spreads_over_every_lane():
    """Thousands of partitions of one topic, or as many topics: each lane covers a share of them (issue 25), so an
    append wakes a fetch of a share of the partitions followed from its leader."""
    one_topic = Counter(fetcher_lane("flood", p, 4) for p in range(5000))
    many_topics = Counter(fetcher_lane(f"flood-{i}", 0, 4) for i in range(5000))
    for lanes in (one_topic, many_topics):
        assert set(lanes) == {0, 1, 2, 3} and max(lanes.values()) < 5000 / 2, lanes
    assert all(fetcher_lane("flood", p, 4) == fetcher_lane("flood", p - p % LANE_SPAN, 4) for p in range(5000))
    assert {fetcher_lane("flood", p, 1) for p in range(5000)} == {0}  # Kafka's default: one lane
