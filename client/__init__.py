"""Kafka Lite clients. Blocking: Producer, Consumer, ShareConsumer, Admin; asyncio: AsyncProducer, AsyncConsumer,
AsyncShareConsumer, AsyncAdmin."""

from client.admin import AsyncAdmin, NewTopic, TopicDescription
from client.consumer import AsyncConsumer, ConsumerRecord, TopicPartition
from client.group import CommitFailedError
from client.producer import AsyncProducer, ProduceError
from client.share_consumer import AsyncShareConsumer
from client.subscription import ConsumerRebalanceListener
from client.sync import Admin, Consumer, Producer, ShareConsumer

__all__ = [
    "Admin",
    "AsyncAdmin",
    "AsyncConsumer",
    "AsyncProducer",
    "AsyncShareConsumer",
    "CommitFailedError",
    "Consumer",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "NewTopic",
    "ProduceError",
    "Producer",
    "ShareConsumer",
    "TopicDescription",
    "TopicPartition",
]
