"""The one place that knows file suffixes and the 20-digit names (Kafka's LogFileUtils).

A segment with base offset 50 is `00000000000000000050.log` with `.index`, `.timeindex` and
`.txnindex` beside it. Transitional suffixes are appended to a whole name: `.deleted` (waiting for
`file_delete_delay_ms`), `.cleaned` (a cleaner's output being written), `.swap` (a finished
cleaner output about to replace the segments it covers).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import InvalidPartitionsError, InvalidTopicError

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"  # aborted transactions (txn_index.py)
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


# Kafka's rule for topic names: 1-249 of [a-zA-Z0-9._-], never "." or "..".
MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
# A partition directory is `<topic>-<partition>`; the longest name the node ever gives it is
# the stray one, `<topic>-<partition>-stray.<n>` with n < MAX_STRAY_COPIES (LogManager).
MAX_STRAY_COPIES = 1000
STRAY_SUFFIX = "-stray"
LONGEST_DIRECTORY_SUFFIX = len(f"{STRAY_SUFFIX}.{MAX_STRAY_COPIES - 1}")
# NAME_MAX of Linux filesystems (ext4, xfs, tmpfs): the longest single path component.
NAME_MAX_BYTES = 255
MAX_PARTITION_ID = (1 << 31) - 1


def check_topic_name(name: str) -> None:
    """Kafka's legal names; raises InvalidTopicError naming the rule broken."""
    if not name or len(name) > MAX_TOPIC_NAME_LENGTH or not _LEGAL_TOPIC.fullmatch(name):
        raise InvalidTopicError(
            f"topic name {name!r} is illegal: use 1-{MAX_TOPIC_NAME_LENGTH} of [a-zA-Z0-9._-]"
        )
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name {name!r} is illegal: not '.' or '..'")


def check_directory_name_fits(name: str, num_partitions: int) -> None:
    """The longest directory a partition of this topic may ever have must fit NAME_MAX."""
    longest = len(name) + 1 + len(str(max(num_partitions - 1, 0))) + LONGEST_DIRECTORY_SUFFIX
    if longest > NAME_MAX_BYTES:
        allowed = NAME_MAX_BYTES - 1 - len(str(max(num_partitions - 1, 0)))
        allowed -= LONGEST_DIRECTORY_SUFFIX
        raise InvalidTopicError(
            f"topic name {name!r} is {len(name)} characters: with {num_partitions} partitions "
            f"its directories need names up to {longest} bytes, over the filesystem's "
            f"{NAME_MAX_BYTES}; use at most {allowed} characters"
        )


def partition_dir(data_dir: Path, topic: str, partition: int) -> Path:
    """`<data_dir>/<topic>-<partition>`, the only way a partition's path is built: refuses
    names that are illegal, too long for the filesystem, or that would leave the data dir."""
    check_topic_name(topic)
    if isinstance(partition, bool) or not 0 <= partition <= MAX_PARTITION_ID:
        raise InvalidPartitionsError(f"partition {partition} is outside [0, {MAX_PARTITION_ID}]")
    check_directory_name_fits(topic, partition + 1)
    path = data_dir / f"{topic}-{partition}"
    if path.resolve().parent != data_dir.resolve():
        raise InvalidTopicError(f"topic name {topic!r} leads outside the data dir")
    return path


def filename_prefix(offset: int) -> str:
    return f"{offset:020d}"


def log_path(directory: Path, base_offset: int, suffix: str = "") -> Path:
    return directory / f"{filename_prefix(base_offset)}{LOG_SUFFIX}{suffix}"


def index_path(directory: Path, base_offset: int, suffix: str = "") -> Path:
    return directory / f"{filename_prefix(base_offset)}{INDEX_SUFFIX}{suffix}"


def time_index_path(directory: Path, base_offset: int, suffix: str = "") -> Path:
    return directory / f"{filename_prefix(base_offset)}{TIME_INDEX_SUFFIX}{suffix}"


def txn_index_path(directory: Path, base_offset: int, suffix: str = "") -> Path:
    return directory / f"{filename_prefix(base_offset)}{TXN_INDEX_SUFFIX}{suffix}"


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


def atomic_write(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Write a small file so that a crash leaves the old or the new content, never a mix.
    Without `sync` a process crash still leaves one or the other, but a power cut may leave
    the file empty or missing: only for files whose loss the reader survives, and whose
    owner fsyncs them (and their directory) before relying on them."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync:
        fsync_directory(path.parent)
