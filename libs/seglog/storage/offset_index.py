"""OffsetIndex (`.index`): maps offsets to file positions in the segment's `.log`.

Each 8-byte entry is (relative offset int32, position int32). The offset is stored relative
to the segment's base offset: base 50, offset 55 is stored as 5. That keeps entries at 8
bytes and is why a segment rolls before its offsets span more than 2**31 - 1.

The index is sparse: the segment adds an entry (the batch's last offset, the batch's
position) only after every `index_interval_bytes` of appended data. A lookup returns the
entry with the largest offset <= the target; the log is scanned forward from its position.
An empty index (or a target below the first entry) answers (base offset, 0).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

from ..errors import CorruptIndexError, InvalidOffsetError
from .index import AbstractIndex


class OffsetPosition(NamedTuple):
    offset: int
    position: int


class OffsetIndex(AbstractIndex):
    ENTRY = struct.Struct(">ii")
    KIND = "offset index"

    def _key(self, n: int) -> int:
        return self._raw_entry(n)[0]

    def entry(self, n: int) -> OffsetPosition:
        relative, position = self._raw_entry(n)
        return OffsetPosition(self.base_offset + relative, position)

    @property
    def last_offset(self) -> int:
        return self.entry(self.entries - 1).offset if self.entries else self.base_offset

    def append(self, offset: int, position: int) -> None:
        self.append_entries([(offset, position)])

    def append_entries(self, entries: Sequence[tuple[int, int]]) -> None:
        """Append (offset, position) entries, both strictly increasing: the first is checked
        against the last entry in the file, and each against the one before it."""
        if not entries:
            return
        base = self.base_offset
        if self.entries:
            last_relative, last_position = self._raw_entry(self.entries - 1)
        else:
            last_relative, last_position = -1, -1
        relative_entries = []
        for offset, position in entries:
            relative = offset - base
            if relative <= last_relative:
                raise InvalidOffsetError(
                    f"attempt to append an offset ({offset}) no larger than the last offset "
                    f"appended ({base + last_relative}) to {self.path}"
                )
            if position <= last_position:
                raise CorruptIndexError(
                    f"attempt to append position {position} no larger than the last position "
                    f"{last_position} to {self.path}"
                )
            relative_entries.append((relative, position))
            last_relative, last_position = relative, position
        self.relative_offset(entries[-1][0])  # the largest must fit the 4-byte field
        self._write_entries(relative_entries)

    def append_packed(self, data: bytes) -> None:
        """Append entries already in the file's format (records/_scan.c's index_entries
        makes them increasing, and fitting the 4-byte fields): only the first is checked,
        against the last entry in the file."""
        if not data:
            return
        relative, position = self.ENTRY.unpack_from(data, 0)
        if self.entries:
            last_relative, last_position = self._raw_entry(self.entries - 1)
            if relative <= last_relative:
                raise InvalidOffsetError(
                    f"attempt to append an offset ({self.base_offset + relative}) no larger "
                    f"than the last offset appended ({self.base_offset + last_relative}) to "
                    f"{self.path}"
                )
            if position <= last_position:
                raise CorruptIndexError(
                    f"attempt to append position {position} no larger than the last position "
                    f"{last_position} to {self.path}"
                )
        self._write_packed(data)

    def lookup(self, target_offset: int) -> OffsetPosition:
        slot = self._largest_lower_bound_slot(target_offset - self.base_offset)
        return OffsetPosition(self.base_offset, 0) if slot < 0 else self.entry(slot)

    def floor_position(self, position: int) -> OffsetPosition | None:
        """The entry with the largest file position <= `position` (positions increase with
        offsets, so the entries are sorted by both), or None."""
        found = self._floor_slot(position)
        return None if found < 0 else self.entry(found)

    def _floor_slot(self, position: int) -> int:
        """The slot of the entry with the largest position <= `position`, -1 when none."""
        low, high, found = 0, self.entries - 1, -1
        while low <= high:
            middle = (low + high) // 2
            if self._raw_entry(middle)[1] <= position:
                found, low = middle, middle + 1
            else:
                high = middle - 1
        return found

    def positions_around(self, position: int) -> list[int]:
        """The positions of the entries just at-or-below and just above `position` (those
        that exist): the batch starts nearest to a byte position."""
        floor = self._floor_slot(position)
        slots = [s for s in (floor, floor + 1) if 0 <= s < self.entries]
        return [self._raw_entry(s)[1] for s in slots]

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset >= `offset`."""
        slot = self._largest_lower_bound_slot(offset - self.base_offset)
        keep = 0 if slot < 0 else slot + (1 if self.entry(slot).offset < offset else 0)
        self.truncate_to_entries(keep)

    def sanity_check(self, log_bytes: int) -> None:
        if self.entries == 0:
            return
        self._check_untrimmed_tail()
        last = self.entry(self.entries - 1)
        previous = (-1, -1)
        for relative, position in self.ENTRY.iter_unpack(self._entries_bytes()):
            if relative <= previous[0] or position <= previous[1] or relative < 0:
                raise CorruptIndexError(
                    f"corrupt offset index {self.path}: entry ({relative}, {position}) after "
                    f"{previous} does not increase"
                )
            previous = (relative, position)
        if last.offset < self.base_offset or last.position >= log_bytes:
            raise CorruptIndexError(
                f"corrupt offset index {self.path}: last entry {last} with base offset "
                f"{self.base_offset} and a log of {log_bytes} bytes"
            )
