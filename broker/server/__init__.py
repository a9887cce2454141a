"""The broker's wiring (Kafka's kafka.server): BrokerServer (broker_server.py) builds and starts the parts, KafkaApis
(kafka_apis.py) dispatches each request after the authorization table (authorization.py), the broker's configs
(config.py, config_describe.py, dynamic_config.py), the ACL / SCRAM handlers and the scrape-time gauges.
"""
