"""Python clients for seglog: Producer, Consumer, ShareConsumer (share groups) and Admin
(every admin operation, the `seglog` CLI's too), with Kafka's settings and guarantees;
GatewayClient is the thin typed layer under them, carrying the data-plane and metadata calls
they make."""

from .admin import Admin
from .consumer import Consumer, NoOffsetForPartitionError
from .futures import BatchMetadata, RecordMetadata
from .gateway import EARLIEST, LATEST, GatewayClient
from .membership import CommitFailedError
from .metadata import MetadataTimeoutError
from .partitioner import murmur2, partition_for_key
from .producer import Producer
from .share_acks import AcknowledgeType, ShareRecord
from .share_consumer import ShareConsumer
from .structs import ConsumerGroupMetadata, OffsetAndMetadata, OffsetAndTimestamp, TopicPartition
from .subscriptions import ConsumerRebalanceListener

__all__ = [
    "EARLIEST",
    "LATEST",
    "AcknowledgeType",
    "Admin",
    "BatchMetadata",
    "CommitFailedError",
    "Consumer",
    "ConsumerGroupMetadata",
    "ConsumerRebalanceListener",
    "GatewayClient",
    "MetadataTimeoutError",
    "NoOffsetForPartitionError",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "Producer",
    "RecordMetadata",
    "ShareConsumer",
    "ShareRecord",
    "TopicPartition",
    "murmur2",
    "partition_for_key",
]
