"""The console's partition offsets (client/dashboard/watcher.py): the log end and the high watermark shown side by
side come from the same replica at the same moment, so the page never shows a high watermark above the log end
(issue 24: "high watermark 4028, log end 4027")."""

from __future__ import annotations

from client.dashboard.watcher import ClusterWatcher, merge_offsets, parse_metrics
from net.schema.metadata import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)

# What broker 1 (the leader) and broker 2 (a follower) serve on /metrics (broker/server/metrics_state.py's names).
LEADER_SCRAPE = """\
# TYPE kafkalite_log_end_offset gauge
kafkalite_log_end_offset{broker="1",topic="tweets",partition="0"} 4027.0
# TYPE kafkalite_high_watermark gauge
kafkalite_high_watermark{broker="1",topic="tweets",partition="0"} 4027.0
# TYPE kafkalite_log_size_bytes gauge
kafkalite_log_size_bytes{broker="1",topic="tweets",partition="0"} 99000.0
"""
FOLLOWER_SCRAPE = LEADER_SCRAPE.replace('broker="1"', 'broker="2"').replace("4027.0", "4020.0")
METADATA = MetadataResponse(
    brokers=(
        MetadataResponseBroker(node_id=1, host="127.0.0.1", port=1),
        MetadataResponseBroker(node_id=2, host="127.0.0.1", port=2),
    ),
    topics=(
        MetadataResponseTopic(
            name="tweets",
            partitions=(
                MetadataResponsePartition(
                    partition_index=0, leader_id=1, leader_epoch=3, replica_nodes=(1, 2), isr_nodes=(1, 2)
                ),
            ),
        ),
    ),
)


def partition_row(scraped: dict) -> dict:
    topics = ClusterWatcher("127.0.0.1:1")._topics(METADATA, scraped)
    # One record was appended and committed between the scrape and ListOffsets (a producer is running).
    merge_offsets(topics, {("tweets", 0): 0}, {("tweets", 0): 4028})
    assert topics[0]["records"] == 4028
    return topics[0]["partitions"][0]


def test_log_end_and_high_watermark_come_from_the_leaders_one_scrape():
    row = partition_row({1: parse_metrics(LEADER_SCRAPE), 2: parse_metrics(FOLLOWER_SCRAPE)})
    assert (row["log_start"], row["high_watermark"], row["log_end"]) == (0, 4027, 4027)


def test_without_metrics_the_high_watermark_is_shown_without_a_log_end():
    row = partition_row({1: {}, 2: {}})
    assert (row["high_watermark"], row["log_end"]) == (4028, None)
