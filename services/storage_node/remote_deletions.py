"""Deleted topics' partitions whose objects the node must still delete from the object store,
kept on its disk so that a restart (or a store that is down until then) does not forget them:
Kafka deletes a deleted tiered topic's remote segments, and a topic's objects left behind
would cost storage forever, since no later pass would ever find them again (a topic made
again under the name has another topic id, another prefix).

File format (`remote-log-deletions.json` in the node's data dir), rewritten whole on each
change through a temporary file, fsync and rename (log_files.atomic_write):

    {"version": 1, "pending": [["<topic>", "<topic id>", <partition>], ...]}

A partition is added when the registry's deletion reaches the node and removed once its
objects and metadata are deleted. A file that cannot be read is reported and set aside
(renamed `.corrupt`): the deletions it named are then left to another replica of the same
partitions, which is told too.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import NamedTuple

from seglog.storage.log_files import atomic_write

logger = logging.getLogger(__name__)

FILE_NAME = "remote-log-deletions.json"
_VERSION = 1


class PendingDeletion(NamedTuple):
    topic: str
    topic_id: str
    partition: int


class PendingDeletions:
    """The set, in memory and (with a path) on disk; thread-safe."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._pending: set[PendingDeletion] = self._load() if path is not None else set()

    def _load(self) -> set[PendingDeletion]:
        assert self.path is not None
        try:
            raw = json.loads(self.path.read_bytes())
            if raw.get("version") != _VERSION:
                raise ValueError(f"version {raw.get('version')!r}")
            return {PendingDeletion(str(t), str(i), int(p)) for t, i, p in raw["pending"]}
        except FileNotFoundError:
            return set()
        except (OSError, ValueError, KeyError, TypeError) as exc:
            aside = self.path.with_suffix(".corrupt")
            logger.error("%s unreadable (%s): set aside as %s", self.path, exc, aside)
            self.path.replace(aside)
            return set()

    def add(self, deletion: PendingDeletion) -> None:
        with self._lock:
            if deletion not in self._pending:
                self._pending.add(deletion)
                self._save()

    def discard(self, deletion: PendingDeletion) -> None:
        with self._lock:
            if deletion in self._pending:
                self._pending.discard(deletion)
                self._save()

    def pending(self) -> list[PendingDeletion]:
        with self._lock:
            return sorted(self._pending)

    def _save(self) -> None:
        if self.path is None:
            return
        data = {"version": _VERSION, "pending": [list(d) for d in sorted(self._pending)]}
        atomic_write(self.path, json.dumps(data).encode())
