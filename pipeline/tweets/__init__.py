"""The tweet stream: tweet events (model.py), their sources (a JSONL file, the synthetic generator,
the X API v2 filtered stream), the producer and the consumer-group hashtag counter (kl-tweets)."""
