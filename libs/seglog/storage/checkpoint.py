"""Per-data-dir state files, in Kafka's formats.

`recovery-point-offset-checkpoint` and `log-start-offset-checkpoint` are text files:

    0                 <- version
    2                 <- number of entries
    orders 0 1042     <- topic partition offset
    orders 1 977

written atomically (temp file, fsync, rename, fsync of the directory). `.kafka_cleanshutdown`
is an empty marker written when every log of the data dir closed cleanly; its presence at
start-up means no segment needs recovery.

A `DataDir` is shared by the logs open under one directory in this process; it is dropped
when the last of them closes, so a later open reads the files afresh.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from ..errors import CorruptRecordError
from .log_files import atomic_write, fsync_directory

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"
_VERSION = 0

TopicPartition = tuple[str, int]


def read_checkpoint(path: Path) -> dict[TopicPartition, int]:
    if not path.exists():
        return {}
    lines = path.read_text().splitlines()
    try:
        version, count = int(lines[0]), int(lines[1])
        if version != _VERSION or len(lines) - 2 != count:
            raise ValueError(f"version {version}, {count} entries declared, {len(lines) - 2} found")
        out = {}
        for line in lines[2:]:
            topic, partition, offset = line.rsplit(" ", 2)
            out[(topic, int(partition))] = int(offset)
        return out
    except (ValueError, IndexError) as exc:
        raise CorruptRecordError(f"malformed checkpoint file {path}: {exc}") from None


def write_checkpoint(path: Path, entries: dict[TopicPartition, int]) -> None:
    lines = [str(_VERSION), str(len(entries))]
    lines += [
        f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(entries.items())
    ]
    atomic_write(path, ("\n".join(lines) + "\n").encode())


class DataDir:
    _registry: dict[Path, DataDir] = {}
    _registry_lock = threading.Lock()

    def __init__(self, path: Path) -> None:
        self.path = path
        marker = path / CLEAN_SHUTDOWN_MARKER
        self.clean_shutdown = marker.exists()
        if self.clean_shutdown:
            # From now on a crash is unclean again until every log closes cleanly.
            marker.unlink()
            fsync_directory(path)
        self.recovery_points = read_checkpoint(path / RECOVERY_POINT_CHECKPOINT)
        self.log_start_offsets = read_checkpoint(path / LOG_START_OFFSET_CHECKPOINT)
        self._lock = threading.Lock()
        self._open: set[TopicPartition] = set()
        self._all_closed_cleanly = True

    @classmethod
    def acquire(cls, path: Path, tp: TopicPartition) -> DataDir:
        path = path.resolve()
        with cls._registry_lock:
            data_dir = cls._registry.get(path)
            if data_dir is None:
                data_dir = cls._registry[path] = DataDir(path)
            data_dir._open.add(tp)
            return data_dir

    def release(self, tp: TopicPartition, *, clean: bool) -> None:
        with DataDir._registry_lock:
            self._open.discard(tp)
            self._all_closed_cleanly &= clean
            if self._open:
                return
            DataDir._registry.pop(self.path, None)
        self.checkpoint()
        if self._all_closed_cleanly:
            fd = os.open(self.path / CLEAN_SHUTDOWN_MARKER, os.O_WRONLY | os.O_CREAT, 0o644)
            os.fsync(fd)
            os.close(fd)
            fsync_directory(self.path)

    def update(self, tp: TopicPartition, *, recovery_point: int, log_start_offset: int) -> None:
        with self._lock:
            self.recovery_points[tp] = recovery_point
            self.log_start_offsets[tp] = log_start_offset

    def forget(self, tp: TopicPartition) -> None:
        with self._lock:
            self.recovery_points.pop(tp, None)
            self.log_start_offsets.pop(tp, None)

    def checkpoint(self) -> None:
        with self._lock:
            write_checkpoint(self.path / RECOVERY_POINT_CHECKPOINT, dict(self.recovery_points))
            write_checkpoint(self.path / LOG_START_OFFSET_CHECKPOINT, dict(self.log_start_offsets))
