"""Apache Kafka's binary protocol: a second codec in front of the same request handlers.

A Kafka request is decoded with kio (types generated from Kafka's own JSON message schemas), turned
into the native handler call it means (`adapters.py`), and the handler's answer turned back into the
Kafka response of the version the client asked for. Nothing behind the handlers knows which protocol
a request came in on.
"""
