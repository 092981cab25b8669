"""Partition directories set aside: a log this node holds and the registry no longer assigns
to it is renamed `<topic>-<partition>-stray` (then `-stray.1`, ... up to MAX_STRAY_COPIES),
out of the log manager's sight but on disk, which an operator may still want back; and a
deleted topic's set-aside copies are deleted by its topic id (partition.metadata).

A topic's deletion and the registry's push that sets its partitions aside reach a node in
either order, and the push's set-aside may still be under way (or the partition still being
created) when the deletion comes: the deletion then finds no copy to delete, and the copy set
aside a moment later stayed on disk for good. So the node remembers the ids of topics deleted
lately (DeletedTopicIds), and a log of one of them that is set aside afterwards is deleted
instead."""

from __future__ import annotations

import glob
import shutil
import threading
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path

from ..errors import StorageError
from . import log_files, partition_metadata

STRAY_SUFFIX = log_files.STRAY_SUFFIX
DELETE_SUFFIX = "-delete"  # what load_logs never opens
# Deleted topic ids remembered: a late set-aside comes seconds after its topic's deletion, and
# a node is not told of more than a few thousand deletions in that time.
REMEMBERED_DELETED_TOPICS = 10_000


class DeletedTopicIds:
    """The ids of the topics deleted lately, the oldest forgotten past `capacity`."""

    def __init__(self, capacity: int = REMEMBERED_DELETED_TOPICS) -> None:
        self._capacity = capacity
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, topic_id: str) -> None:
        if not topic_id:
            return
        with self._lock:
            self._ids[topic_id] = None
            self._ids.move_to_end(topic_id)
            while len(self._ids) > self._capacity:
                self._ids.popitem(last=False)

    def __contains__(self, topic_id: object) -> bool:
        with self._lock:
            return bool(topic_id) and topic_id in self._ids


def rename_aside(directory: Path) -> Path:
    """Rename `directory` to its first free `-stray` name, durably."""
    target = directory.with_name(directory.name + STRAY_SUFFIX)
    suffix = 0
    while target.exists():
        suffix += 1
        if suffix >= log_files.MAX_STRAY_COPIES:
            raise StorageError(
                f"{directory.name}: {log_files.MAX_STRAY_COPIES} stray copies already "
                f"exist; remove some before this partition can be set aside"
            )
        target = directory.with_name(f"{directory.name}{STRAY_SUFFIX}.{suffix}")
    try:
        directory.rename(target)
    except OSError as exc:
        raise StorageError(f"cannot set {directory.name} aside: {exc}") from exc
    log_files.fsync_directory(target.parent)
    return target


def delete_copies(
    data_dirs: Iterable[Path], topic: str, partition: int, topic_id: str
) -> list[Path]:
    """Delete the partition's copies set aside (`-stray`, `-stray.N`) that belong to topic
    `topic_id`: a deleted topic's replicas that the registry's push set aside before the
    delete reached this node (Kafka deletes a deleted topic's logs; left, they filled the
    disk). Copies of another topic id, or with none, stay for the operator. Each is renamed
    `...-delete` first (never loaded again, whatever a crash leaves) and then removed."""
    if not topic_id:
        return []
    name = f"{topic}-{partition}{STRAY_SUFFIX}"
    deleted: list[Path] = []
    for data_dir in data_dirs:
        for child in data_dir.glob(glob.escape(name) + "*"):
            copy = child.name[len(name) :]
            if not child.is_dir() or not (copy == "" or copy[:1] == "." and copy[1:].isdigit()):
                continue
            try:
                held = partition_metadata.read(child)
            except StorageError:
                continue  # unreadable: not provably this topic's, so it stays
            if held != topic_id:
                continue
            doomed = child.with_name(child.name + DELETE_SUFFIX)
            child.rename(doomed)
            log_files.fsync_directory(data_dir)
            shutil.rmtree(doomed, ignore_errors=True)
            deleted.append(child)
    return deleted
