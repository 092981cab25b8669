"""TimeIndex (`.timeindex`): maps timestamps to offsets.

Each 12-byte entry is (timestamp int64, relative offset int32). An entry records the largest
timestamp seen so far in the segment and the offset of the batch that carried it, so the
timestamps in the file only ever increase; an append whose timestamp is not larger than the
last entry's is skipped.

A lookup returns the entry with the largest timestamp <= the target: every batch before its
offset has a smaller max timestamp, so the search for the first batch whose max timestamp
>= the target can start there. An empty index answers (-1, base offset).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

from ..errors import CorruptIndexError, InvalidOffsetError
from ..records.batch import NO_TIMESTAMP
from .index import AbstractIndex


class TimestampOffset(NamedTuple):
    timestamp_ms: int
    offset: int


class TimeIndex(AbstractIndex):
    ENTRY = struct.Struct(">qi")
    KIND = "time index"

    def _key(self, n: int) -> int:
        return self._raw_entry(n)[0]

    def is_full(self) -> bool:
        # One slot stays free for the entry a segment writes when it rolls.
        return self.entries >= self.max_entries - 1

    def entry(self, n: int) -> TimestampOffset:
        timestamp, relative = self._raw_entry(n)
        return TimestampOffset(timestamp, self.base_offset + relative)

    @property
    def last_entry(self) -> TimestampOffset:
        if self.entries == 0:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return self.entry(self.entries - 1)

    def free_slots(self) -> int:
        return max(0, self.max_entries - 1 - self.entries)

    def maybe_append(
        self, timestamp_ms: int, offset: int, *, skip_full_check: bool = False
    ) -> None:
        """Append when the timestamp is larger than the last entry's.

        `skip_full_check` lets the final entry of a rolling segment land in the slot the
        roll reserved for it.
        """
        self._append_increasing([(timestamp_ms, offset)], reserved_slot_usable=skip_full_check)

    def append_entries(self, entries: Sequence[tuple[int, int]]) -> None:
        """`maybe_append` for each (timestamp, offset) in turn, with one write."""
        self._append_increasing(entries, reserved_slot_usable=False)

    def append_packed(self, data: bytes) -> None:
        """Append entries already in the file's format, timestamps increasing among
        themselves and past the last entry's (records/_scan.c's index_entries is given it):
        the first is checked against the last in the file, and the slot a roll keeps for
        its final entry stays free."""
        if not data:
            return
        timestamp_ms, relative = self.ENTRY.unpack_from(data, 0)
        if self.entries:
            last_timestamp_ms, last_relative = self._raw_entry(self.entries - 1)
            if relative < last_relative or timestamp_ms <= last_timestamp_ms:
                raise InvalidOffsetError(
                    f"attempt to append ({timestamp_ms}, {self.base_offset + relative}) after "
                    f"({last_timestamp_ms}, {self.base_offset + last_relative}) to {self.path}"
                )
        if len(data) // self.ENTRY.size > self.max_entries - self.entries - 1:
            raise CorruptIndexError(f"attempt to append to a full time index {self.path}")
        self._write_packed(data)

    def _append_increasing(
        self, entries: Sequence[tuple[int, int]], *, reserved_slot_usable: bool
    ) -> None:
        base = self.base_offset
        # As Kafka's lastEntry of an empty index, (-1, baseOffset): an entry is written only
        # for a larger timestamp, so the "no timestamp" -1 never becomes one.
        last_timestamp_ms = NO_TIMESTAMP
        last_relative = -1
        if self.entries:
            last_timestamp_ms, last_relative = self._raw_entry(self.entries - 1)
        kept = []
        for timestamp_ms, offset in entries:
            if offset - base < last_relative:
                raise InvalidOffsetError(
                    f"attempt to append an offset ({offset}) smaller than the last offset "
                    f"appended ({base + last_relative}) to {self.path}"
                )
            if timestamp_ms <= last_timestamp_ms:
                continue
            last_timestamp_ms, last_relative = timestamp_ms, self.relative_offset(offset)
            kept.append((timestamp_ms, last_relative))
        if not kept:
            return
        room = self.max_entries - self.entries - (0 if reserved_slot_usable else 1)
        if len(kept) > room:
            raise CorruptIndexError(f"attempt to append to a full time index {self.path}")
        self._write_entries(kept)

    def lookup(self, target_ms: int) -> TimestampOffset:
        slot = self._largest_lower_bound_slot(target_ms)
        return TimestampOffset(NO_TIMESTAMP, self.base_offset) if slot < 0 else self.entry(slot)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset >= `offset` (timestamps are not sorted by that key,
        but offsets in the file increase too, so a linear walk back from the end suffices)."""
        keep = self.entries
        while keep and self.entry(keep - 1).offset >= offset:
            keep -= 1
        self.truncate_to_entries(keep)

    def sanity_check(self) -> None:
        if self.entries == 0:
            return
        self._check_untrimmed_tail()
        last = self.last_entry
        previous = (-(1 << 63), -1)
        for timestamp, relative in self.ENTRY.iter_unpack(self._entries_bytes()):
            if timestamp <= previous[0] or relative < previous[1] or relative < 0:
                raise CorruptIndexError(
                    f"corrupt time index {self.path}: entry ({timestamp}, {relative}) after "
                    f"{previous} is not monotonic"
                )
            previous = (timestamp, relative)
        if last.offset < self.base_offset or last.timestamp_ms < self.entry(0).timestamp_ms:
            raise CorruptIndexError(
                f"corrupt time index {self.path}: last entry {last}, first entry "
                f"{self.entry(0)}, base offset {self.base_offset}"
            )
