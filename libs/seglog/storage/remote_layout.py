"""Where tiered storage puts things in the object store (keys relative to the store's prefix).

Data, one prefix per copied segment:

    <topic>-<topic_id>/<partition>/<base_offset:020d>-<segment_id>/
        segment.log               the segment's .log file, byte for byte
        offset.index              its .index, trimmed to its entries (8 bytes each)
        time.index                its .timeindex, trimmed (12 bytes each)
        txn.index                 its aborted-transaction index (.txnindex; may be empty)
        producer.snapshot         the producer state at the segment's end offset + 1
                                  (Kafka's <offset>.snapshot; empty when the node had none)
        leader-epoch.checkpoint   the partition's leader epochs up to the segment's end
                                  (Kafka's text checkpoint format, leader_epoch_cache.py)

The topic id (KIP-516) is in the key so that a topic deleted and made again under the same name
never shares objects with its predecessor; the segment id (a random uuid per copy attempt, as
Kafka's RemoteLogSegmentId) so that a copy retried by a new leader never overwrites objects a
reader may be reading.

Metadata, one object per segment (remote_metadata.py says why it lives here):

    __remote_log_metadata/<topic_id>/<partition>/<base_offset:020d>-<segment_id>.json

and the log start offset DeleteRecords set, when it did (one small JSON object):

    __remote_log_metadata/<topic_id>/<partition>/log-start-offset

keyed by topic id only, so that a reader that knows the id (from a fetch, or Spark's plan) lists
one partition's segments with one LIST and no topic name.
"""

from __future__ import annotations

from typing import NamedTuple

SEGMENT_LOG = "segment.log"
OFFSET_INDEX = "offset.index"
TIME_INDEX = "time.index"
TXN_INDEX = "txn.index"
PRODUCER_SNAPSHOT = "producer.snapshot"
LEADER_EPOCH_CHECKPOINT = "leader-epoch.checkpoint"

# Every object a finished segment has, in the order the copier uploads them: the log last but
# one would also do; what matters is that FINISHED is recorded only after all of them.
SEGMENT_FILES = (
    OFFSET_INDEX,
    TIME_INDEX,
    TXN_INDEX,
    PRODUCER_SNAPSHOT,
    LEADER_EPOCH_CHECKPOINT,
    SEGMENT_LOG,
)

METADATA_ROOT = "__remote_log_metadata"


class SegmentKey(NamedTuple):
    """What names one copied segment's objects."""

    topic: str
    topic_id: str
    partition: int
    base_offset: int
    segment_id: str


def segment_prefix(key: SegmentKey) -> str:
    return f"{key.topic}-{key.topic_id}/{key.partition}/{key.base_offset:020d}-{key.segment_id}/"


def segment_object(key: SegmentKey, name: str) -> str:
    """The key of one of a segment's files (`name`: one of SEGMENT_FILES)."""
    return segment_prefix(key) + name


def segment_objects(key: SegmentKey) -> list[str]:
    return [segment_object(key, name) for name in SEGMENT_FILES]


def topic_prefix(topic: str, topic_id: str) -> str:
    return f"{topic}-{topic_id}/"


def metadata_partition_prefix(topic_id: str, partition: int) -> str:
    return f"{METADATA_ROOT}/{topic_id}/{partition}/"


def log_start_object(topic_id: str, partition: int) -> str:
    """The partition's log start offset as DeleteRecords moved it below or past the local log
    start (remote_metadata.py): `{"log_start_offset": N}`."""
    return f"{metadata_partition_prefix(topic_id, partition)}log-start-offset"


def metadata_topic_prefix(topic_id: str) -> str:
    return f"{METADATA_ROOT}/{topic_id}/"


def metadata_object(topic_id: str, partition: int, base_offset: int, segment_id: str) -> str:
    return f"{metadata_partition_prefix(topic_id, partition)}{base_offset:020d}-{segment_id}.json"
