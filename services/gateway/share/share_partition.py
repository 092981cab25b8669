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

The window is kept as runs of offsets alike (offset_runs.py), as Kafka keeps in-flight
batches: a fetch acquires whole ranges, an acknowledgement changes ranges, and a run is cut
only where acknowledgements differ within it; no operation loops over single records.
Offsets in [start, end) no run has delivered are available with delivery count 0, and state
read back names only what was written (state_formats.py), as Kafka's persister does. Acquired
records are written as AVAILABLE with their delivery count, so after a failover they are
delivered again and their count is not lost. The start offset moves over every leading
acknowledged or archived record, and the window spans at most
group.share.partition.max.record.locks offsets (a fetch acquires nothing past it).

Not thread-safe: the share core holds `lock` around every use.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import NamedTuple

from seglog.coordinator_errors import InvalidRecordStateError
from seglog.errors import InvalidRequestError

from .offset_runs import OffsetRuns, Run

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4
# Acknowledge types on the wire (ShareFetch/ShareAcknowledge AcknowledgeTypes).
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
ACK_TYPES = (GAP, ACCEPT, RELEASE, REJECT, RENEW)
_ACK_TYPE_SET = frozenset(ACK_TYPES)


class AcquiredRange(NamedTuple):
    first_offset: int
    last_offset: int
    delivery_count: int


class DeadLetter(NamedTuple):
    """Records archived because delivering them failed (KIP-1191): rejected by a member, or
    released (or their lock lapsed) at the delivery count limit; for the dead-letter topic."""

    first_offset: int
    last_offset: int
    delivery_count: int
    rejected: bool  # False: the delivery count limit was reached


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
        self.runs = OffsetRuns()  # covering [start_offset, end_offset) exactly
        # Totals for metrics (share_metrics.py), only ever incremented under `lock`.
        self.redelivered = 0  # acquisitions of a record delivered before
        self.archived_at_limit = 0  # records archived for reaching the delivery limit
        # Stored bytes per record as fetches found them: a fetch for N records reads about
        # N of them, not the client's whole max_bytes (share_core.py).
        self.bytes_per_record = 0.0
        # Failed deliveries archived and not yet written to the group's dead-letter topic
        # (taken by partition_ops.py, which writes them; a range per run, never per record).
        self.dead_letters: list[DeadLetter] = []

    # -- reading back ---------------------------------------------------------------------

    @classmethod
    def from_state(
        cls,
        limits: PartitionLimits,
        start_offset: int,
        batches: Iterable[StateBatch],
        state_epoch: int,
    ) -> SharePartition:
        """The partition a state read back describes: each batch laid over the ones before
        it (a later one wins where they overlap), offsets none names available and never
        delivered, acquired ones available (their holder is gone). Those available at the
        delivery count limit were archiving (archiving.py: their holder released them at the
        limit, or died holding them at it) and are archived, their dead letters pending."""
        partition = cls(limits, start_offset, state_epoch)
        runs = partition.runs
        for batch in batches:
            first = max(batch.first_offset, start_offset)
            if first > batch.last_offset:
                continue
            partition._grow_to(batch.last_offset + 1)
            i, j = runs.span(first, batch.last_offset)
            state = batch.delivery_state if batch.delivery_state != ACQUIRED else AVAILABLE
            runs.runs[i:j] = [Run(first, batch.last_offset, state, batch.delivery_count)]
            runs.coalesce(i, i + 1)
        archived = False
        for run in runs:
            if run.state == AVAILABLE and run.count >= limits.delivery_count_limit:
                partition._release(run)  # archived, its dead letter pending
                archived = True
        if archived:  # now alike neighbours of runs archived before
            runs.coalesce(0, len(runs.runs))
        partition._advance()
        return partition

    def delivery_complete_count(self) -> int:
        """In-flight records already acknowledged or archived (whole runs, never records)."""
        return sum(r.size for r in self.runs if r.state in (ACKNOWLEDGED, ARCHIVED))

    def state_batches(self) -> list[StateBatch]:
        """The in-flight records as runs (ACQUIRED written as AVAILABLE, see above; offsets
        never delivered left out)."""
        out: list[StateBatch] = []
        for run in self.runs:
            state = AVAILABLE if run.state == ACQUIRED else run.state
            if state == AVAILABLE and run.count == 0:
                continue
            last = out[-1] if out else None
            if (
                last is not None
                and last.last_offset == run.first - 1
                and last.delivery_state == state
                and last.delivery_count == run.count
            ):
                out[-1] = last._replace(last_offset=run.last)
            else:
                out.append(StateBatch(run.first, run.last, state, run.count))
        return out

    def snapshot(self) -> tuple[int, int, OffsetRuns]:
        """What `restore` puts back (a write of the state that failed is undone with it)."""
        return self.start_offset, self.end_offset, self.runs.copy()

    def restore(self, saved: tuple[int, int, OffsetRuns]) -> None:
        self.start_offset, self.end_offset, self.runs = saved

    # -- fetching -------------------------------------------------------------------------

    def next_fetch_offset(self) -> int | None:
        """Where the next fetch reads from: the first record that can be acquired; None when
        the window holds as many records as it may."""
        for run in self.runs:
            if run.state == AVAILABLE:
                return run.first
        if self.end_offset - self.start_offset >= self.limits.max_record_locks:
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
        `max_records` records, in offset order; offsets the log no longer has (below the
        first batch, or between batches) are archived, as are control batches' offsets. Past
        the end offset nothing is acquired once the window holds max_record_locks records."""
        acquired: list[AcquiredRange] = []
        taken = 0
        deadline = now + self.limits.lock_duration_s
        position = max(fetch_offset, self.start_offset)
        for batch in batches:
            if taken >= max_records:
                break
            self._skip_missing(position, batch.base_offset)
            low = max(batch.base_offset, position)
            position = max(position, batch.last_offset + 1)
            if low > batch.last_offset:
                continue
            if batch.is_control:
                self._archive_missing(low, batch.last_offset)
                continue
            taken = self._acquire_held(
                member, low, batch.last_offset, max_records, taken, deadline, acquired
            )
            low = max(low, self.end_offset)
            if taken >= max_records or low > batch.last_offset:
                continue
            self._grow_to(low)
            room = self.limits.max_record_locks - (self.end_offset - self.start_offset)
            count = min(max_records - taken, room, batch.last_offset - low + 1)
            if count > 0:
                self.runs.append(Run(low, low + count - 1, ACQUIRED, 1, member, deadline))
                self.end_offset = low + count
                taken += count
                _extend(acquired, low, low + count - 1, 1)
        self._advance()
        return acquired

    def _acquire_held(
        self,
        member: str,
        low: int,
        high: int,
        max_records: int,
        taken: int,
        deadline: float,
        acquired: list[AcquiredRange],
    ) -> int:
        """Acquire the available records of [low, high] inside the window, in order, while
        `taken` is under `max_records`; the new `taken`."""
        high = min(high, self.end_offset - 1)
        if low > high:
            return taken
        i, j = self.runs.span(low, high)
        k = i
        while k < j and taken < max_records:
            run = self.runs.runs[k]
            if run.state == AVAILABLE:
                if run.size > max_records - taken:  # only its head is taken
                    self.runs.cut(run.first + max_records - taken)
                    j += 1
                if run.count:
                    self.redelivered += run.size
                run.state, run.member, run.deadline = ACQUIRED, member, deadline
                run.count += 1
                taken += run.size
                _extend(acquired, run.first, run.last, run.count)
            k += 1
        self.runs.coalesce(i, j)  # the cuts at both ends too
        return taken

    def _grow_to(self, offset: int) -> None:
        """Offsets [end, offset) join the window, available and never delivered."""
        if offset > self.end_offset:
            self.runs.append(Run(self.end_offset, offset - 1, AVAILABLE, 0))
            self.end_offset = offset

    def _skip_missing(self, position: int, base_offset: int) -> None:
        """Offsets [position, base_offset) the log does not have (compacted or deleted):
        nothing to deliver. Past the end with nothing in flight the window just moves (a
        gap of a million offsets costs nothing); otherwise they are archived."""
        if base_offset <= position:
            return
        if position >= self.end_offset and self.start_offset == self.end_offset:
            self.start_offset = self.end_offset = base_offset
            return
        self._archive_missing(position, base_offset - 1)

    def _archive_missing(self, first: int, last: int) -> None:
        """Archive what of [first, last] is available (delivery counts kept) or past the
        end (those records are not in the log: nothing to deliver)."""
        held_last = min(last, self.end_offset - 1)
        if first <= held_last:
            i, j = self.runs.span(first, held_last)
            for run in self.runs.runs[i:j]:
                if run.state == AVAILABLE:
                    run.state = ARCHIVED
            self.runs.coalesce(i, j)
        low = max(first, self.end_offset)
        if low <= last:
            self._grow_to(low)
            self.runs.append(Run(low, last, ARCHIVED, 0))
            self.end_offset = last + 1

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
        if not set(types) <= _ACK_TYPE_SET:
            raise InvalidRequestError(f"acknowledge types {sorted(set(types))}: 0..4 only")
        # Only offsets in the window can be held: checked before anything else, so a range
        # of 2^62 offsets costs nothing.
        if first < self.start_offset or last >= self.end_offset:
            raise InvalidRecordStateError(
                f"offsets {first}..{last} are not all in flight ({self.start_offset}.."
                f"{self.end_offset - 1})"
            )
        i, j = self.runs.span(first, last)
        for run in self.runs.runs[i:j]:
            if run.state != ACQUIRED or run.member != member:
                self.runs.coalesce(i, j)  # undo the cuts
                raise InvalidRecordStateError(
                    f"offset {run.first} is not acquired by this member (its lock may have lapsed)"
                )
        if len(types) == 1:
            self._apply(first, last, types[0], now)
        else:  # per-offset types: one change per run of equal types
            offset = first
            for kind, same in groupby(types):
                size = sum(1 for _ in same)
                self._apply(offset, offset + size - 1, kind, now)
                offset += size
        self._advance()

    def _apply(self, first: int, last: int, kind: int, now: float) -> None:
        i, j = self.runs.span(first, last)
        for run in self.runs.runs[i:j]:
            if kind == ACCEPT:
                run.state, run.member, run.deadline = ACKNOWLEDGED, "", 0.0
            elif kind in (REJECT, GAP):
                run.state, run.member, run.deadline = ARCHIVED, "", 0.0
                if kind == REJECT:
                    self.dead_letters.append(DeadLetter(run.first, run.last, run.count, True))
            elif kind == RELEASE:
                self._release(run)
            else:  # RENEW: the lock starts again
                run.deadline = now + self.limits.lock_duration_s
        self.runs.coalesce(i, j)

    def release_member(self, member: str) -> int:
        """Release every record `member` holds (it left, or its session ended)."""
        released = 0
        for run in self.runs:
            if run.state == ACQUIRED and run.member == member:
                self._release(run)
                released += run.size
        if released:
            self.runs.coalesce(0, len(self.runs))
            self._advance()
        return released

    def expire_locks(self, now: float) -> int:
        """Release the records whose acquisition lock lapsed; how many."""
        expired = 0
        for run in self.runs:
            if run.state == ACQUIRED and run.deadline <= now:
                self._release(run)
                expired += run.size
        if expired:
            self.runs.coalesce(0, len(self.runs))
            self._advance()
        return expired

    def _release(self, run: Run) -> None:
        run.member, run.deadline = "", 0.0
        if run.count >= self.limits.delivery_count_limit:
            run.state = ARCHIVED
            self.archived_at_limit += run.size
            self.dead_letters.append(DeadLetter(run.first, run.last, run.count, False))
        else:
            run.state = AVAILABLE

    def _advance(self) -> None:
        done = 0
        for run in self.runs:
            if run.state not in (ACKNOWLEDGED, ARCHIVED):
                break
            done += 1
        if done:
            self.start_offset = self.runs.runs[done - 1].last + 1
            self.runs.drop_front(done)
        self.end_offset = max(self.end_offset, self.start_offset)

    # -- figures ----------------------------------------------------------------------------

    def in_flight(self) -> int:
        """Records acquired by members now."""
        return sum(run.size for run in self.runs if run.state == ACQUIRED)

    def waiting(self) -> int:
        """Records delivered before and released, waiting to be delivered again."""
        return sum(run.size for run in self.runs if run.state == AVAILABLE and run.count)

    def delivery_count_of(self, offset: int) -> int:
        run = self.runs.find(offset)
        return run.count if run is not None else 0

    def state_of(self, offset: int) -> tuple[int, int, str]:
        """(state, delivery count, holder) of one offset: below the window ACKNOWLEDGED
        (done with), past it AVAILABLE and never delivered."""
        if offset < self.start_offset:
            return ACKNOWLEDGED, 0, ""
        run = self.runs.find(offset)
        if run is None:
            return AVAILABLE, 0, ""
        return run.state, run.count, run.member


def _extend(acquired: list[AcquiredRange], first: int, last: int, count: int) -> None:
    previous = acquired[-1] if acquired else None
    if (
        previous is not None
        and previous.last_offset == first - 1
        and previous.delivery_count == count
    ):
        acquired[-1] = previous._replace(last_offset=last)
    else:
        acquired.append(AcquiredRange(first, last, count))
