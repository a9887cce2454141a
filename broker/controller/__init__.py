"""The controller (Kafka's QuorumController and its coordination): decisions about topics, partitions, leaders
and ISR as metadata records (logic.py), the service driving them on the active controller (service.py), every
broker's way to it (channel.py), the quorum and ZooKeeper coordination (quorum_driver.py, zk_coordination.py,
heartbeat.py) and the controller's own request handlers.
"""
