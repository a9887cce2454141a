"""kl-dashboard: a web console for a Kafka Lite cluster. A client of the cluster (client/ and net/ only),
never part of a broker: see docs/ARCHITECTURE.md."""
