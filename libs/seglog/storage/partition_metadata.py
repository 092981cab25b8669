"""A partition directory's `partition.metadata` (Kafka's PartitionMetadataFile, KIP-516): the
id of the topic the directory's records belong to, so that a log left behind by a deleted
topic is never taken for the log of a new topic of the same name.

The file is byte for byte what Kafka's broker writes (PartitionMetadata.encode): two lines,
UTF-8, the second without a line end,

    version: 0
    topic_id: Vw0MOr7cTMqUabAmiOSm4g

`topic_id` a Kafka Uuid (meta_properties.check_uuid: 22 URL-safe base64 characters, never
all zero). Kafka reads each line as a key, ':' and whitespace, then the value, and refuses a
version below 0; so does this reader, which also accepts a trailing line end. Written as
Kafka writes it: a temporary file, then a rename over the old one, so a process crash leaves
the old file, the new one, or none (a log without the file adopts the id its registry gives
it, as Kafka's broker does). Unlike Kafka, the fsyncs are deferred (`write(sync=False)`, then
`sync`): the log manager fsyncs the file and its directory before it next checkpoints
recovery points and before a clean shutdown, the two things that let a restart trust a log's
batches without recovering them. Synced at creation, the file made a new partition's log
cost about twice as much (medians of 300 creations: 3–7 ms without the file, 7–10 ms with it
deferred, 11–17 ms synced), and nodes make thousands at once; while a log holds no batch,
losing its file to a power cut loses nothing (an empty file reads as none).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import StorageError
from .log_files import atomic_write, fsync_directory
from .meta_properties import check_uuid

PARTITION_METADATA = "partition.metadata"
VERSION = 0
ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"
# Kafka's file is under 50 bytes: anything much larger is not one, and is not read whole.
_MAX_FILE_BYTES = 4096
_LINE = re.compile(r"([a-z_]+):\s+(\S+)")


class PartitionMetadataError(StorageError):
    """A partition.metadata that cannot be read as one: its partition goes offline."""

    retriable = False


def path_of(directory: Path) -> Path:
    return directory / PARTITION_METADATA


def encode(topic_id: str) -> bytes:
    check_uuid(topic_id, "topic_id")
    return f"version: {VERSION}\ntopic_id: {topic_id}".encode()


def write(directory: Path, topic_id: str, *, sync: bool = True) -> None:
    """Replace the directory's partition.metadata atomically (and durably with `sync`)."""
    atomic_write(path_of(directory), encode(topic_id), sync=sync)


def sync(directory: Path) -> None:
    """fsync a file written without it, then its directory (the rename); nothing when the
    directory has gone since (set aside, deleted)."""
    try:
        fd = os.open(path_of(directory), os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_directory(directory)


def read(directory: Path) -> str:
    """The directory's topic id, "" when it has no partition.metadata (a log from before
    topic ids) or an empty one."""
    path = path_of(directory)
    try:
        with path.open("rb") as f:
            data = f.read(_MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return ""
    except OSError as exc:
        raise PartitionMetadataError(f"cannot read {path}: {exc}") from exc
    if not data:
        return ""  # what a power cut can leave of a file not yet synced: no id, as no file
    if len(data) > _MAX_FILE_BYTES:
        raise PartitionMetadataError(f"{path} is larger than {_MAX_FILE_BYTES} bytes")
    try:
        lines = data.decode().splitlines()
    except UnicodeDecodeError:
        raise PartitionMetadataError(f"{path} is not UTF-8 text") from None
    version = _value(path, lines, 0, "version")
    if not version.isdigit():
        raise PartitionMetadataError(f"{path}: version {version!r} is not a number")
    topic_id = _value(path, lines, 1, "topic_id")
    try:
        check_uuid(topic_id, "topic_id")
    except ValueError as exc:
        raise PartitionMetadataError(f"{path}: {exc}") from None
    if topic_id == ZERO_UUID:
        raise PartitionMetadataError(f"{path}: the topic id is the zero id")
    return topic_id


def _value(path: Path, lines: list[str], index: int, key: str) -> str:
    match = _LINE.fullmatch(lines[index]) if index < len(lines) else None
    if match is None or match.group(1) != key:
        line = lines[index] if index < len(lines) else None
        raise PartitionMetadataError(f"malformed line in {path}: {line!r} (expected {key})")
    return match.group(2)
