"""Kafka 4.3.1's JSON schemas of the share groups' records in __consumer_offsets
(group-coordinator/src/main/resources/common/message/ShareGroup*.json), as
kafka-group-coordinator-4.3.1.jar ships them: share_group_records.py's codec reads them."""
