"""The partitions this broker hosts (Kafka's kafka.cluster.Partition and ReplicaManager): produce / fetch on them,
replication as sans-IO state machines (replication.py), the follower's fetcher and its sessions, producer state,
ISR proposals to the controller (alter_partition_manager.py) and the per-partition apis.
"""
