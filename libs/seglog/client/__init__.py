"""Python clients for seglog's gateway."""

from .gateway import GatewayClient
from .partitioner import murmur2, partition_for_key

__all__ = ["GatewayClient", "murmur2", "partition_for_key"]
