"""Benchmarks: Kafka Lite against reference brokers on this machine (see docs/BENCHMARKS.md)."""
