"""Quotas (Kafka's ClientQuotaManager, ControllerMutationQuotaManager, ReplicationQuotaManager): client, controller
mutation and replication throttles.
"""
