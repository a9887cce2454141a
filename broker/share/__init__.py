"""Share groups (KIP-932, "queues for Kafka"): membership at the group coordinator, records at the leaders."""
