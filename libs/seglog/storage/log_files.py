"""The one place that knows file suffixes and the 20-digit names (Kafka's LogFileUtils).

A segment with base offset 50 is `00000000000000000050.log` with `.index` and `.timeindex`
beside it. Transitional suffixes are appended to a whole name: `.deleted` (waiting for
`file_delete_delay_ms`), `.cleaned` (a cleaner's output being written), `.swap` (a finished
cleaner output about to replace the segments it covers).
"""

from __future__ import annotations

import os
from pathlib import Path

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)


def filename_prefix(offset: int) -> str:
    return f"{offset:020d}"


def log_path(directory: Path, base_offset: int, suffix: str = "") -> Path:
    return directory / f"{filename_prefix(base_offset)}{LOG_SUFFIX}{suffix}"


def index_path(directory: Path, base_offset: int, suffix: str = "") -> Path:
    return directory / f"{filename_prefix(base_offset)}{INDEX_SUFFIX}{suffix}"


def time_index_path(directory: Path, base_offset: int, suffix: str = "") -> Path:
    return directory / f"{filename_prefix(base_offset)}{TIME_INDEX_SUFFIX}{suffix}"


def offset_from_name(name: str) -> int:
    """`00000000000000000050.log.swap` -> 50."""
    return int(name.split(".", 1)[0])


def parse_topic_partition(directory: Path) -> tuple[str, int]:
    """`orders-3` -> ("orders", 3); topics may contain dashes, the partition follows the last."""
    topic, sep, partition = directory.name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        raise ValueError(f"{directory.name!r} is not a <topic>-<partition> directory name")
    return topic, int(partition)


def fsync_directory(directory: Path) -> None:
    """Make renames and creations in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Write a small file so that a crash leaves the old or the new content, never a mix."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_directory(path.parent)
