"""Helpers of every layer (Kafka's kafka.utils): keeping long-lived objects out of full collections, logging a
repeated condition once.
"""
