"""The broker's metrics: the counters and histograms (broker_metrics.py) and their Prometheus listener."""
