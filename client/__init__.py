"""Kafka Lite clients. Blocking: Producer, Consumer, Admin; asyncio: AsyncProducer, AsyncConsumer, AsyncAdmin."""

from client.admin import AsyncAdmin, NewTopic, TopicDescription
from client.consumer import AsyncConsumer, ConsumerRecord, TopicPartition
from client.group import CommitFailedError
from client.producer import AsyncProducer, ProduceError
from client.subscription import ConsumerRebalanceListener
from client.sync import Admin, Consumer, Producer

__all__ = [
    "Admin",
    "AsyncAdmin",
    "AsyncConsumer",
    "AsyncProducer",
    "CommitFailedError",
    "Consumer",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "NewTopic",
    "ProduceError",
    "Producer",
    "TopicDescription",
    "TopicPartition",
]
