"""The cluster metadata: the image every broker applies the committed metadata log to (image.py), the log's
records as typed classes with their registry and the delta they make (records.py), what a broker
does with committed records (applier.py), the metadata log itself (metadata_log.py), its propagation before an
answer (propagation.py), topic naming rules (naming.py) and DescribeTopicPartitions, answered from the image.
"""
