"""TopicPartition: one partition of one topic, as Kafka's clients name it."""

from __future__ import annotations

from typing import NamedTuple


class TopicPartition(NamedTuple):
    topic: str
    partition: int
