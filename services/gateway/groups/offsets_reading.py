"""Reading a partition of `__consumer_offsets` back (through internal_topics.py) from its log
start to its high watermark when a gateway first answers for its groups (`read_partition`),
and on from where reading stopped to catch up with what others appended (`read_on`). Batches
are applied to the partition's contents by offsets_contents.py, the newest record per key
winning, as compaction would leave it."""

from __future__ import annotations

import logging

from ..internal_topics import InternalTopic
from .offsets_contents import OFFSETS_TOPIC, PartitionContents, apply_batches

logger = logging.getLogger(__name__)


def read_partition(topic: InternalTopic, partition: int) -> PartitionContents:
    """Read the partition from its start to its high watermark, the newest record per key
    winning, as compaction would leave it."""
    contents = PartitionContents()
    topic.read_back(partition, lambda records: apply_batches(contents, partition, records))
    logger.info(
        "loaded committed offsets of %d groups from %s-%d",
        len(contents.offsets),
        OFFSETS_TOPIC,
        partition,
    )
    return contents


def read_on(topic: InternalTopic, contents: PartitionContents, partition: int, offset: int) -> None:
    """Apply the partition's batches from `offset` to its high watermark."""
    contents.next_offset = max(contents.next_offset, offset)
    topic.read_back(partition, lambda records: apply_batches(contents, partition, records), offset)
