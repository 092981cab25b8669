"""A share consumer's records and acknowledgements: what a ShareFetch's answer becomes
(`decode`: the records of the acquired ranges, each with its delivery count), and the
bookkeeping of what the last poll handed out and what is still to be sent (`Acknowledgements`).

An offset acquired with no record to hand out (a control record, or one compacted away) is
acknowledged GAP at once, as Kafka's share consumer does, so it never comes back. The
acknowledgements of a partition go out as ranges of consecutive offsets of one type (Kafka's
AcknowledgementBatch), one type per range.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from ..errors import SeglogError
from ..records import LegacyMessage, iter_batches
from ..v1 import share_groups_pb2, share_pb2

GAP = 0  # an acquired offset without a record (Kafka's AcknowledgeType.GAP on the wire)


class AcknowledgeType(enum.IntEnum):
    """Kafka's AcknowledgeType: ACCEPT (processed), RELEASE (deliver again, counted),
    REJECT (never deliver again: archived)."""

    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


class ShareRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: Any
    value: Any
    headers: tuple[tuple[str, bytes | None], ...]
    delivery_count: int  # 1 the first time the group delivers the record


class IllegalAcknowledgeError(SeglogError):
    """An acknowledgement the consumer cannot take (Kafka's IllegalStateException): a record
    not handed out by the last poll, or acknowledge() in implicit mode."""

    reason = "INVALID_REQUEST"


Key = tuple[str, int]  # (topic, partition)


def decode(
    answer: share_groups_pb2.SharePartitionAnswer,
    key_deserializer: Callable[[bytes | None], Any] | None = None,
    value_deserializer: Callable[[bytes | None], Any] | None = None,
) -> tuple[list[ShareRecord], list[int]]:
    """The partition's acquired records, in offset order, and the acquired offsets that
    had no record (gaps)."""
    counts: dict[int, int] = {}
    for r in answer.acquired:
        for offset in range(r.first_offset, r.last_offset + 1):
            counts[offset] = r.delivery_count
    records: list[ShareRecord] = []
    for batch in iter_batches(answer.records):
        if isinstance(batch, LegacyMessage) or batch.header.is_control:
            continue
        for record in batch.records(answer.topic, answer.partition):
            count = counts.pop(record.offset, None)
            if count is None:
                continue  # in a batch with acquired records, but not acquired by this member
            key, value = record.key, record.value
            records.append(
                ShareRecord(
                    answer.topic,
                    answer.partition,
                    record.offset,
                    record.timestamp_ms,
                    key_deserializer(key) if key_deserializer else key,
                    value_deserializer(value) if value_deserializer else value,
                    record.headers,
                    count,
                )
            )
    return records, sorted(counts)


def ack_batches(acks: dict[int, int]) -> list[share_pb2.ShareAckBatch]:
    """Offset -> type as ranges of consecutive offsets of one type."""
    out: list[share_pb2.ShareAckBatch] = []
    for offset in sorted(acks):
        kind = acks[offset]
        last = out[-1] if out else None
        if last is not None and last.last_offset == offset - 1 and last.types[0] == kind:
            last.last_offset = offset
        else:
            out.append(
                share_pb2.ShareAckBatch(first_offset=offset, last_offset=offset, types=[kind])
            )
    return out


class Acknowledgements:
    """What the last poll handed out (not acknowledged yet) and the acknowledgements not yet
    sent, per partition. Thread-safe: commit_async sends from another thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._delivered: dict[Key, set[int]] = {}
        self._pending: dict[Key, dict[int, int]] = {}

    def delivered(self, records: Sequence[ShareRecord], gaps: dict[Key, list[int]]) -> None:
        with self._lock:
            for r in records:
                self._delivered.setdefault((r.topic, r.partition), set()).add(r.offset)
            for key, offsets in gaps.items():
                pending = self._pending.setdefault(key, {})
                for offset in offsets:
                    pending[offset] = GAP

    def acknowledge(self, record: ShareRecord, kind: AcknowledgeType) -> None:
        key = (record.topic, record.partition)
        with self._lock:
            handed = self._delivered.get(key, set())
            pending = self._pending.setdefault(key, {})
            if record.offset in handed:
                handed.discard(record.offset)
            elif record.offset not in pending:
                raise IllegalAcknowledgeError(
                    f"{record.topic}-{record.partition}@{record.offset} was not handed out by "
                    "the last poll, or its acknowledgement was sent already"
                )
            pending[record.offset] = int(kind)

    def accept_delivered(self) -> None:
        """Implicit mode: every record handed out and not acknowledged is accepted."""
        with self._lock:
            for key, offsets in self._delivered.items():
                pending = self._pending.setdefault(key, {})
                for offset in offsets:
                    pending.setdefault(offset, int(AcknowledgeType.ACCEPT))
            self._delivered.clear()

    def unacknowledged(self) -> int:
        with self._lock:
            return sum(len(offsets) for offsets in self._delivered.values())

    def forget_delivered(self, keys: Iterable[Key]) -> None:
        """Partitions no longer assigned: what they handed out goes back when locks lapse."""
        with self._lock:
            for key in keys:
                self._delivered.pop(key, None)

    def take(self) -> dict[Key, dict[int, int]]:
        """The acknowledgements to send now (removed; `put_back` if they were not applied
        for a reason that lets them be sent again)."""
        with self._lock:
            taken = {k: v for k, v in self._pending.items() if v}
            self._pending = {}
            return taken

    def put_back(self, taken: dict[Key, dict[int, int]]) -> None:
        with self._lock:
            for key, acks in taken.items():
                pending = self._pending.setdefault(key, {})
                for offset, kind in acks.items():
                    pending.setdefault(offset, kind)


def partition_acks(taken: dict[Key, dict[int, int]]) -> list[share_groups_pb2.SharePartitionAcks]:
    return [
        share_groups_pb2.SharePartitionAcks(topic=t, partition=p, acks=ack_batches(acks))
        for (t, p), acks in sorted(taken.items())
    ]
