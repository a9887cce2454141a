"""The replication throttles of kl-reassign-partitions, as kafka-reassign-partitions.sh sets and clears them.

`--execute --throttle B` throttles exactly what moves: on each topic, `leader.replication.throttled.replicas`
names the moving partitions' current replicas (they serve the new ones) and
`follower.replication.throttled.replicas` the replicas being added (they fetch); every broker of those replicas,
old and new, gets `leader.replication.throttled.rate` and `follower.replication.throttled.rate` = B. `--verify`,
once nothing is left to move, deletes the rates on every live broker and the targets' brokers and the lists on
the reassigned topics (the throttles of an earlier run may name other brokers, which the tool cannot know).
"""

from __future__ import annotations

import click

from client.sync import Admin
from client.topic_partition import TopicPartition

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
VERIFY_WARNING = (
    "Warning: You must run --verify periodically, until the reassignment completes, to ensure the throttle is removed."  # noqa: E501
)


def topic_throttles(
    current: dict[TopicPartition, list[int]], target: dict[TopicPartition, list[int]]
) -> dict[str, dict[str, str]]:
    """topic -> its two throttled-replica lists, for the partitions whose replicas change (Kafka's
    calculateLeaderThrottles / calculateFollowerThrottles)."""
    leaders: dict[str, list[str]] = {}
    followers: dict[str, list[str]] = {}
    for tp, replicas in sorted(target.items()):
        existing = current.get(tp, [])
        if replicas == existing:
            continue
        leaders.setdefault(tp.topic, []).extend(f"{tp.partition}:{b}" for b in existing)
        followers.setdefault(tp.topic, []).extend(f"{tp.partition}:{b}" for b in replicas if b not in existing)
    return {
        t: {LEADER_REPLICAS: ",".join(leaders[t]), FOLLOWER_REPLICAS: ",".join(followers.get(t, []))} for t in leaders
    }


def moving_brokers(current: dict[TopicPartition, list[int]], target: dict[TopicPartition, list[int]]) -> list[int]:
    """Every broker holding a replica of a moving partition, before or after (Kafka's reassigningBrokers)."""
    found: set[int] = set()
    for tp, replicas in target.items():
        if replicas != current.get(tp, []):
            found |= set(replicas) | set(current.get(tp, []))
    return sorted(found)


def set_throttles(
    admin: Admin, current: dict[TopicPartition, list[int]], target: dict[TopicPartition, list[int]], rate: int
) -> None:
    click.echo(VERIFY_WARNING)
    for topic, lists in topic_throttles(current, target).items():
        admin.alter_configs(topic, dict(lists))
    for broker in moving_brokers(current, target):
        admin.alter_broker_configs(broker, {LEADER_RATE: str(rate), FOLLOWER_RATE: str(rate)})
    click.echo(f"The inter-broker throttle limit was set to {rate} B/s")


def clear_throttles(admin: Admin, target: dict[TopicPartition, list[int]]) -> None:
    brokers = sorted(set(admin.broker_ids()) | {b for replicas in target.values() for b in replicas})
    click.echo(f"Clearing broker-level throttles on broker{'s' if len(brokers) != 1 else ''} {_ids(brokers)}")
    for broker in brokers:
        admin.alter_broker_configs(broker, {LEADER_RATE: None, FOLLOWER_RATE: None})
    topics = sorted({tp.topic for tp in target})
    click.echo(f"Clearing topic-level throttles on topic{'s' if len(topics) != 1 else ''} {','.join(topics)}")
    for topic in topics:
        admin.alter_configs(topic, {LEADER_REPLICAS: None, FOLLOWER_REPLICAS: None})


def _ids(ids: list[int]) -> str:
    return ",".join(map(str, ids))
