"""One share partition's state: what the members of one share group have done with one
topic partition (Kafka's SharePartition, core/.../server/share/SharePartition.java).

    start offset (SPSO)  every record below it is done with (acknowledged or archived)
    end offset (SPEO)    one past the last record ever acquired
    in-flight            the records in [start, end), each with a state and a delivery count

A record's states (Kafka's RecordState ids, which __share_group_state also writes):

    AVAILABLE 0 --acquire--> ACQUIRED 1 (by one member, until its lock lapses)
    ACQUIRED --accept--> ACKNOWLEDGED 2   --reject / gap--> ARCHIVED 4
    ACQUIRED --release / lock lapsed--> AVAILABLE, or ARCHIVED once delivered
                                        group.share.delivery.count.limit times

Offsets in [start, end) that the map does not hold are available and never delivered: state
read back names only what was written (state_formats.py), as Kafka's persister does. Acquired
records are written as AVAILABLE with their delivery count, so after a failover they are
delivered again and their count is not lost. The start offset moves over every leading
acknowledged or archived record, and the map holds at most
group.share.partition.max.record.locks records (a fetch acquires nothing past it).

Not thread-safe: the share core holds `lock` around every use.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from seglog.coordinator_errors import InvalidRecordStateError
from seglog.errors import InvalidRequestError

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4
# Acknowledge types on the wire (ShareFetch/ShareAcknowledge AcknowledgeTypes).
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
ACK_TYPES = (GAP, ACCEPT, RELEASE, REJECT, RENEW)


class AcquiredRange(NamedTuple):
    first_offset: int
    last_offset: int
    delivery_count: int


class StateBatch(NamedTuple):
    """A run of offsets with one state and delivery count, as __share_group_state writes it."""

    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


class FetchedBatch(NamedTuple):
    """What a fetch's record batch says of its offsets (its header alone)."""

    base_offset: int
    last_offset: int
    is_control: bool


@dataclass
class _Record:
    __slots__ = ("count", "deadline", "member", "state")
    state: int
    count: int
    member: str
    deadline: float  # monotonic seconds; ACQUIRED only


@dataclass(frozen=True)
class PartitionLimits:
    lock_duration_s: float
    delivery_count_limit: int
    max_record_locks: int


class SharePartition:
    def __init__(self, limits: PartitionLimits, start_offset: int, state_epoch: int = 0) -> None:
        self.limits = limits
        self.lock = threading.Lock()
        self.start_offset = start_offset
        self.end_offset = start_offset
        self.state_epoch = state_epoch
        self.records: dict[int, _Record] = {}
        # Totals for metrics (share_metrics.py), only ever incremented under `lock`.
        self.redelivered = 0  # acquisitions of a record delivered before
        self.archived_at_limit = 0  # records archived for reaching the delivery limit
        # Stored bytes per record as fetches found them: a fetch for N records reads about
        # N of them, not the client's whole max_bytes (share_core.py).
        self.bytes_per_record = 0.0

    # -- reading back ---------------------------------------------------------------------

    @classmethod
    def from_state(
        cls,
        limits: PartitionLimits,
        start_offset: int,
        batches: Iterable[StateBatch],
        state_epoch: int,
    ) -> SharePartition:
        partition = cls(limits, start_offset, state_epoch)
        for batch in batches:
            for offset in range(max(batch.first_offset, start_offset), batch.last_offset + 1):
                state = batch.delivery_state if batch.delivery_state != ACQUIRED else AVAILABLE
                partition.records[offset] = _Record(state, batch.delivery_count, "", 0.0)
                partition.end_offset = max(partition.end_offset, offset + 1)
        partition._advance()
        return partition

    def state_batches(self) -> list[StateBatch]:
        """The in-flight records as runs (ACQUIRED written as AVAILABLE: see above)."""
        out: list[StateBatch] = []
        for offset in sorted(self.records):
            record = self.records[offset]
            state = AVAILABLE if record.state == ACQUIRED else record.state
            last = out[-1] if out else None
            if (
                last is not None
                and last.last_offset == offset - 1
                and last.delivery_state == state
                and last.delivery_count == record.count
            ):
                out[-1] = last._replace(last_offset=offset)
            else:
                out.append(StateBatch(offset, offset, state, record.count))
        return out

    def snapshot(self) -> tuple[int, dict[int, _Record]]:
        """What `restore` puts back (a write of the state that failed is undone with it)."""
        copied = {
            o: _Record(r.state, r.count, r.member, r.deadline) for o, r in self.records.items()
        }
        return self.start_offset, copied

    def restore(self, saved: tuple[int, dict[int, _Record]]) -> None:
        self.start_offset, self.records = saved
        self.end_offset = max([self.start_offset, *(o + 1 for o in self.records)])

    # -- fetching -------------------------------------------------------------------------

    def next_fetch_offset(self) -> int | None:
        """Where the next fetch reads from: the first record that can be acquired; None when
        the partition holds as many in-flight records as it may."""
        for offset in range(self.start_offset, self.end_offset):
            record = self.records.get(offset)
            if record is None or record.state == AVAILABLE:
                return offset
        if len(self.records) >= self.limits.max_record_locks:
            return None
        return self.end_offset

    def acquire(
        self,
        member: str,
        fetch_offset: int,
        batches: Sequence[FetchedBatch],
        max_records: int,
        now: float,
    ) -> list[AcquiredRange]:
        """Acquire for `member` what the fetched batches hold from `fetch_offset` on, up to
        `max_records` records; offsets the log no longer has (below the first batch, or
        between batches) are archived, as are control batches' offsets."""
        acquired: list[AcquiredRange] = []
        taken = 0
        deadline = now + self.limits.lock_duration_s
        position = max(fetch_offset, self.start_offset)
        for batch in batches:
            if taken >= max_records:
                break
            self._skip_missing(position, batch.base_offset)
            for offset in range(max(batch.base_offset, position), batch.last_offset + 1):
                if batch.is_control:
                    self._archive_missing(offset)
                    continue
                if taken >= max_records or (
                    offset >= self.end_offset and len(self.records) >= self.limits.max_record_locks
                ):
                    break
                record = self.records.get(offset)
                if record is None or offset >= self.end_offset:
                    record = _Record(ACQUIRED, 1, member, deadline)
                    self.records[offset] = record
                    self.end_offset = max(self.end_offset, offset + 1)
                elif record.state == AVAILABLE:
                    record.state, record.member, record.deadline = ACQUIRED, member, deadline
                    record.count += 1
                    self.redelivered += 1
                else:
                    continue
                taken += 1
                _extend(acquired, offset, record.count)
            position = max(position, batch.last_offset + 1)
        self._advance()
        return acquired

    def _skip_missing(self, position: int, base_offset: int) -> None:
        """Offsets [position, base_offset) the log does not have (compacted or deleted):
        nothing to deliver. Past the end with nothing in flight the window just moves (a
        gap of a million offsets costs nothing); otherwise each is archived."""
        if base_offset <= position:
            return
        if position >= self.end_offset and self.start_offset == self.end_offset:
            self.start_offset = self.end_offset = base_offset
            return
        for offset in range(position, base_offset):
            self._archive_missing(offset)

    def _archive_missing(self, offset: int) -> None:
        record = self.records.get(offset)
        if offset >= self.end_offset:
            self.records[offset] = _Record(ARCHIVED, 0, "", 0.0)
            self.end_offset = offset + 1
        elif record is None or record.state == AVAILABLE:
            self.records[offset] = _Record(ARCHIVED, record.count if record else 0, "", 0.0)

    # -- acknowledging ----------------------------------------------------------------------

    def acknowledge(
        self, member: str, first: int, last: int, types: Sequence[int], now: float
    ) -> None:
        """Apply one acknowledgement batch of `member`'s, all or nothing: every record must
        be acquired by it and still locked (InvalidRecordStateError otherwise)."""
        if first > last or first < 0:
            raise InvalidRequestError(f"acknowledgement batch {first}..{last} is empty")
        if len(types) not in (1, last - first + 1):
            raise InvalidRequestError(
                f"acknowledgement batch {first}..{last} has {len(types)} types: one, or one "
                "per offset"
            )
        if any(t not in ACK_TYPES for t in types):
            raise InvalidRequestError(f"acknowledge types {sorted(set(types))}: 0..4 only")
        # Only offsets in the window can be held: checked before any loop, so a range of
        # 2^62 offsets costs nothing.
        if first < self.start_offset or last >= self.end_offset:
            raise InvalidRecordStateError(
                f"offsets {first}..{last} are not all in flight ({self.start_offset}.."
                f"{self.end_offset - 1})"
            )
        for offset in range(first, last + 1):
            kind = types[0] if len(types) == 1 else types[offset - first]
            record = self.records.get(offset)
            if record is None or record.state != ACQUIRED or record.member != member:
                raise InvalidRecordStateError(
                    f"offset {offset} is not acquired by this member (its lock may have lapsed)"
                )
        for offset in range(first, last + 1):
            kind = types[0] if len(types) == 1 else types[offset - first]
            record = self.records.get(offset)
            if record is None:
                continue
            if kind == ACCEPT:
                record.state = ACKNOWLEDGED
            elif kind in (REJECT, GAP):
                record.state = ARCHIVED
            elif kind == RELEASE:
                self._release(record)
            else:  # RENEW: the lock starts again
                record.deadline = now + self.limits.lock_duration_s
        self._advance()

    def release_member(self, member: str) -> int:
        """Release every record `member` holds (it left, or its session ended)."""
        released = 0
        for record in self.records.values():
            if record.state == ACQUIRED and record.member == member:
                self._release(record)
                released += 1
        self._advance()
        return released

    def expire_locks(self, now: float) -> int:
        """Release the records whose acquisition lock lapsed; how many."""
        expired = 0
        for record in self.records.values():
            if record.state == ACQUIRED and record.deadline <= now:
                self._release(record)
                expired += 1
        if expired:
            self._advance()
        return expired

    def _release(self, record: _Record) -> None:
        record.member, record.deadline = "", 0.0
        if record.count >= self.limits.delivery_count_limit:
            record.state = ARCHIVED
            self.archived_at_limit += 1
        else:
            record.state = AVAILABLE

    def _advance(self) -> None:
        while True:
            record = self.records.get(self.start_offset)
            if record is None or record.state not in (ACKNOWLEDGED, ARCHIVED):
                break
            del self.records[self.start_offset]
            self.start_offset += 1
        self.end_offset = max(self.end_offset, self.start_offset)

    # -- figures ----------------------------------------------------------------------------

    def in_flight(self) -> int:
        return sum(1 for r in self.records.values() if r.state == ACQUIRED)

    def delivery_count_of(self, offset: int) -> int:
        record = self.records.get(offset)
        return record.count if record is not None else 0


def _extend(acquired: list[AcquiredRange], offset: int, count: int) -> None:
    last = acquired[-1] if acquired else None
    if last is not None and last.last_offset == offset - 1 and last.delivery_count == count:
        acquired[-1] = last._replace(last_offset=offset)
    else:
        acquired.append(AcquiredRange(offset, offset, count))
