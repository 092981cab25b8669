"""Dead-letter topics for share groups (KIP-1191, Kafka 4.4): a record whose delivery failed
(a member rejected it, or it was released or its lock lapsed at
group.share.delivery.count.limit) is written to the group's dead-letter topic as it is
archived, as Kafka's broker writes it (ShareGroupDLQRecordHelper):

    one record per source offset, timestamped now, without the source's key and value unless
    errors.deadletterqueue.copy.record.enable (then with them, read back from the source
    partition's leader), the source's own headers never copied, and these headers, UTF-8:
      __dlq.errors.topic           the source topic
      __dlq.errors.partition       the source partition
      __dlq.errors.offset          the source offset
      __dlq.errors.group           the share group
      __dlq.errors.delivery.count  the deliveries it had
      __dlq.errors.message         why: "Offset rejected by client." or
                                   "Offset delivery count exceeded the threshold."
    into partition (source partition) mod (the dead-letter topic's partitions).

The topic and the copy mode are the group's configs (errors.deadletterqueue.topic.name and
errors.deadletterqueue.copy.record.enable, cluster/group_configs.py; the gateway's settings
of those names are their defaults). The name must start with the cluster's
errors.deadletterqueue.topic.name.prefix ("dlq." by default) and the topic must have the topic
config errors.deadletterqueue.group.enable=true, so a share group cannot be pointed at a
business topic: the topic's administrator opts in. With
errors.deadletterqueue.auto.create.topics.enable the topic is created (num.partitions,
default.replication.factor, errors.deadletterqueue.group.enable=true) when first needed;
otherwise a missing topic, or one that has not opted in, is logged and the records are
archived without a copy.

Written before the change that archived them is acknowledged (partition_ops.py): a failed
write fails the acknowledgement, whose records stay acquired, so a dead letter is written at
least once (twice if the state write after it fails and the client acknowledges again).
Until written, they are persisted as archiving (archiving.py): the holder's death loses none.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple, Protocol

from seglog.errors import SeglogError
from seglog.records import LegacyMessage, RecordBatchBuilder, iter_batches

from ..cluster.group_configs import GroupConfig
from ..cluster.registry import Registry
from ..internal_topics import Appended, FetchedPiece
from .partition_states import PartitionId
from .settings import ShareSettings
from .share_partition import DeadLetter

logger = logging.getLogger(__name__)

DLQ_GROUP_ENABLE = "errors.deadletterqueue.group.enable"  # the topic's opt-in (a topic config)
WRITE_TIMEOUT_MS = 5000
MAX_BATCH_BYTES = 1 << 20  # below every topic's default max.message.bytes
REJECTED = b"Offset rejected by client."
DELIVERY_COUNT_EXCEEDED = b"Offset delivery count exceeded the threshold."


class Access(Protocol):
    def append(self, topic: str, partition: int, records: bytes, timeout_ms: int) -> Appended: ...

    def fetch(self, topic: str, partition: int, offset: int) -> Iterator[FetchedPiece]: ...


# The source record's key and value by offset (copy mode); absent: not found (compacted or
# deleted since), written without them as Kafka does.
Copies = dict[int, tuple[bytes | None, bytes | None]]


class DeadLetterCounts(NamedTuple):
    """Records per group: written, whose write failed, archived without a copy."""

    written: dict[str, int]
    failed: dict[str, int]
    dropped: dict[str, int]


class DeadLetterQueue:
    def __init__(
        self,
        registry: Registry,
        access: Access,
        settings: ShareSettings,
        create_topic: Callable[[str], None],
        group_config: Callable[[str], GroupConfig] | None = None,
    ) -> None:
        """`create_topic(name)`: a dead-letter topic of the cluster's defaults, serving when it
        returns; `group_config(group)`: the group's configs in force (None: the settings' for
        every group)."""
        self.group_config = group_config
        self.registry = registry
        self.access = access
        self.settings = settings
        self.create_topic = create_topic
        self.written = 0  # dead letters written (a figure for tests and metrics)
        # Per group, for the metrics (share_metrics.py): records written, records whose write
        # failed (kept, tried again), records archived without a copy (no usable topic).
        # Failed deliveries only pay this lock, never an accepted record.
        self._counts_lock = threading.Lock()
        self.written_by_group: dict[str, int] = {}
        self.failed_by_group: dict[str, int] = {}
        self.dropped_by_group: dict[str, int] = {}

    def records_by_group(self) -> DeadLetterCounts:
        """A copy of the per-group figures (for the metrics)."""
        with self._counts_lock:
            return DeadLetterCounts(
                dict(self.written_by_group),
                dict(self.failed_by_group),
                dict(self.dropped_by_group),
            )

    def _count(self, counts: dict[str, int], group_id: str, letters: Sequence[DeadLetter]) -> None:
        records = sum(d.last_offset - d.first_offset + 1 for d in letters)
        with self._counts_lock:
            counts[group_id] = counts.get(group_id, 0) + records

    def topic_for(self, group_id: str) -> str | None:
        """The group's dead-letter topic (None: the group has none)."""
        name = (
            self.settings.errors_deadletterqueue_topic_name
            if self.group_config is None
            else self.group_config(group_id).errors_deadletterqueue_topic_name
        )
        # Checked again here: the prefix is the cluster's, and may have changed since.
        if not name or not name.startswith(self.settings.errors_deadletterqueue_topic_name_prefix):
            return None
        return name

    def copies_records(self, group_id: str) -> bool:
        """Whether the group's dead letters carry the source record's key and value."""
        if self.group_config is None:
            return self.settings.errors_deadletterqueue_copy_record_enable
        return self.group_config(group_id).errors_deadletterqueue_copy_record_enable

    def write(self, pid: PartitionId, letters: Sequence[DeadLetter]) -> None:
        """Write the letters of share partition `pid`; SeglogError when they were not."""
        group_id, topic, partition = pid
        target = self.topic_for(group_id)
        if not letters or target is None:
            return
        found = self.registry.topics.get(target)
        if found is None and self.settings.errors_deadletterqueue_auto_create_topics_enable:
            self.create_topic(target)
            found = self.registry.topics.get(target)
        if found is None:
            logger.warning(
                "share group %s: dead-letter topic %s does not exist; %d ranges archived "
                "without a copy",
                group_id,
                target,
                len(letters),
            )
            self._count(self.dropped_by_group, group_id, letters)
            return
        if not _opted_in(found.configs):
            logger.warning(
                "share group %s: topic %s does not have %s=true; %d ranges archived without a copy",
                group_id,
                target,
                DLQ_GROUP_ENABLE,
                len(letters),
            )
            self._count(self.dropped_by_group, group_id, letters)
            return
        destination = partition % len(found.partitions)
        copies = self._copies(topic, partition, letters) if self.copies_records(group_id) else {}
        try:
            for batch in _batches(group_id, topic, partition, letters, copies):
                self.access.append(target, destination, batch, WRITE_TIMEOUT_MS)
        except SeglogError:
            self._count(self.failed_by_group, group_id, letters)
            raise
        self.written += sum(letter.last_offset - letter.first_offset + 1 for letter in letters)
        self._count(self.written_by_group, group_id, letters)

    def _copies(self, topic: str, partition: int, letters: Sequence[DeadLetter]) -> Copies:
        """The letters' source records, read from the leader (a read per range, stopping
        at its last offset or where the log ends)."""
        copies: Copies = {}
        for letter in letters:
            offset = letter.first_offset
            while offset <= letter.last_offset:
                progressed = False
                for piece in self.access.fetch(topic, partition, offset):
                    for batch in iter_batches(piece.records):
                        if isinstance(batch, LegacyMessage):
                            continue  # stored batches are v2; nothing to copy from these
                        if batch.header.is_control:
                            offset = max(offset, batch.header.next_offset)
                            continue
                        for record in batch.records():
                            if letter.first_offset <= record.offset <= letter.last_offset:
                                copies[record.offset] = (record.key, record.value)
                        offset = max(offset, batch.header.next_offset)
                        progressed = True
                if not progressed:
                    break  # nothing more to read there
        return copies


def _opted_in(configs: dict[str, str]) -> bool:
    value = configs.get(DLQ_GROUP_ENABLE, configs.get(DLQ_GROUP_ENABLE.replace(".", "_"), ""))
    return str(value).strip().lower() == "true"


def _batches(
    group_id: str,
    topic: str,
    partition: int,
    letters: Sequence[DeadLetter],
    copies: Copies | None = None,
) -> list[bytes]:
    """The letters' records in batches of at most MAX_BATCH_BYTES. A record per offset, as
    Kafka writes them: only failed deliveries pay this loop, never an accepted record."""
    now_ms = time.time_ns() // 1_000_000
    common = (
        ("__dlq.errors.topic", topic.encode()),
        ("__dlq.errors.partition", str(partition).encode()),
    )
    group = ("__dlq.errors.group", group_id.encode())
    out: list[bytes] = []
    builder = RecordBatchBuilder(max_bytes=MAX_BATCH_BYTES)
    for letter in letters:
        why = REJECTED if letter.rejected else DELIVERY_COUNT_EXCEEDED
        tail = (
            group,
            ("__dlq.errors.delivery.count", str(letter.delivery_count).encode()),
            ("__dlq.errors.message", why),
        )
        for offset in range(letter.first_offset, letter.last_offset + 1):
            headers = (*common, ("__dlq.errors.offset", str(offset).encode()), *tail)
            key, value = (copies or {}).get(offset, (None, None))
            if not builder.append(key, value, now_ms, headers):
                out.append(builder.build())
                builder = RecordBatchBuilder(max_bytes=MAX_BATCH_BYTES)
                builder.append(key, value, now_ms, headers)
    out.append(builder.build())
    return out
