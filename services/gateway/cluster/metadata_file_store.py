"""The metadata log in the gateway's data dir (one gateway is its only writer), in the
directory `metadata/`:

    snapshot.json   {"offset": o, "records": [...]}: the whole image at offset o, replaced
                    atomically (write, fsync, rename, fsync of the dir)
    log             the batches written after it, appended and fsync'd before a change is
                    acknowledged, each one frame:

                        length  u32 big-endian   bytes of the payload
                        crc     u32 big-endian   CRC32C of the payload
                        payload JSON {"offset": o, "records": [...]}

A batch's offset is the previous offset plus its number of records (so offsets number the
records, as Kafka's do). A crash mid-append leaves a torn frame at the end: load keeps the
frames before it and truncates the file there. After a snapshot the log is replaced by an
empty one; a crash in between leaves batches the snapshot covers, which load skips.

A `registry.json` of the former format (one document, version 1) with no metadata log yet
is read once at start: its records become the first snapshot.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from pathlib import Path

from crc32c import crc32c

from seglog.storage.log_files import atomic_write, fsync_directory

from ..coordination.election import Fence
from .metadata_records import MetadataRecordError, Record, check_records, from_document
from .registry_store import DEFAULT_SNAPSHOT_INTERVAL_RECORDS, Batch

LOG_FILE = "log"
SNAPSHOT_FILE = "snapshot.json"
_FRAME_HEADER = struct.Struct(">II")


class FileMetadataStore:
    def __init__(
        self,
        directory: Path,
        *,
        legacy_document: Path | None = None,
        snapshot_interval_records: int = DEFAULT_SNAPSHOT_INTERVAL_RECORDS,
    ) -> None:
        self.directory = directory
        self.legacy_document = legacy_document
        self.snapshot_interval_records = snapshot_interval_records
        self.offset = 0  # of the last batch loaded or appended
        self.records_since_snapshot = 0
        self.last_write_bytes = 0
        directory.mkdir(parents=True, exist_ok=True)

    @property
    def log_path(self) -> Path:
        return self.directory / LOG_FILE

    @property
    def snapshot_path(self) -> Path:
        return self.directory / SNAPSHOT_FILE

    def load(self) -> list[Batch]:
        batches: list[Batch] = []
        snapshot_offset = 0
        if self.snapshot_path.exists():
            stored = json.loads(self.snapshot_path.read_bytes())
            snapshot_offset = int(stored["offset"])
            batches.append((snapshot_offset, check_records(stored["records"])))
        elif not self.log_path.exists() and self._migrate():
            return self.load()
        self.offset = snapshot_offset
        self.records_since_snapshot = 0
        for offset, records in self._read_log():
            if offset <= snapshot_offset:
                continue  # the snapshot covers it (a crash before the log was emptied)
            if offset <= self.offset:
                raise MetadataRecordError(f"metadata log offset {offset} after {self.offset}")
            batches.append((offset, records))
            self.offset = offset
            self.records_since_snapshot += len(records)
        return batches

    def _migrate(self) -> bool:
        """registry.json of the former format becomes the first snapshot."""
        if self.legacy_document is None or not self.legacy_document.exists():
            return False
        records = from_document(json.loads(self.legacy_document.read_bytes()))
        self.snapshot(max(len(records), 1), records)
        return True

    def _read_log(self) -> list[Batch]:
        if not self.log_path.exists():
            return []
        data = self.log_path.read_bytes()
        batches: list[Batch] = []
        position = 0
        while position + _FRAME_HEADER.size <= len(data):
            length, crc = _FRAME_HEADER.unpack_from(data, position)
            start = position + _FRAME_HEADER.size
            payload = data[start : start + length]
            if len(payload) < length or crc32c(payload) != crc:
                break
            stored = json.loads(payload)
            batches.append((int(stored["offset"]), check_records(stored["records"])))
            position = start + length
        if position < len(data):  # a torn tail: the append that never completed
            with open(self.log_path, "r+b") as log:
                log.truncate(position)
                os.fsync(log.fileno())
        return batches

    def append(self, records: list[Record], after_offset: int, fence: Fence | None = None) -> int:
        check_records(records)
        offset = max(after_offset, self.offset) + len(records)
        payload = json.dumps(
            {"offset": offset, "records": records}, separators=(",", ":"), sort_keys=True
        ).encode()
        frame = _FRAME_HEADER.pack(len(payload), crc32c(payload)) + payload
        created = not self.log_path.exists()
        # Opened per change (a change already pays an fsync): no descriptor outlives it.
        fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            end = os.lseek(fd, 0, os.SEEK_END)
            try:
                written = 0
                while written < len(frame):
                    written += os.write(fd, frame[written:])
                os.fsync(fd)
            except OSError:
                # A half-written frame (a full disk) would end the log at load and hide
                # every later batch: cut it off before anything else is appended.
                os.ftruncate(fd, end)
                raise
        finally:
            os.close(fd)
        if created:
            fsync_directory(self.directory)
        self.offset = offset
        self.records_since_snapshot += len(records)
        self.last_write_bytes = len(frame)
        return offset

    def wants_snapshot(self) -> bool:
        return self.records_since_snapshot >= self.snapshot_interval_records

    def snapshot(self, offset: int, records: list[Record]) -> None:
        data = json.dumps({"offset": offset, "records": records}, separators=(",", ":"))
        atomic_write(self.snapshot_path, data.encode())
        atomic_write(self.log_path, b"")  # the snapshot covers every batch in it
        self.offset = max(self.offset, offset)
        self.records_since_snapshot = 0

    def watch(
        self,
        on_batch: Callable[[int, list[Record]], None],
        on_reset: Callable[[list[Batch]], None],
    ) -> None:
        """Nothing else writes the log."""
