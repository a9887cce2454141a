"""Consumer groups (Kafka's group coordinator): the sans-IO group logic and state, the coordinator driving it
in the broker (coordinator.py) and the group request handlers (api.py, consumer_group_api.py).
"""
