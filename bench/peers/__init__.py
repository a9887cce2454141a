"""Reference brokers (Redis Streams, NATS JetStream) measured with the same workload as Kafka Lite.

Each module starts its own server on 127.0.0.1 in a temp dir, runs, and stops it again.
"""
