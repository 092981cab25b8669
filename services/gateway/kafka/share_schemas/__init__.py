"""Kafka 4.3.1's JSON schemas of the share-group APIs (clients/src/main/resources/common/
message/), as kafka-clients-4.3.1.jar ships them: the codec reads them (share_messages.py)."""
