"""Writes the coordinator's GroupMetadata records to `__consumer_offsets` on a thread of its
own, so the coordinator's lock is never held across a write to a storage node. Only the
latest record of each group waits; one that fails is logged, and the group's next change
writes it again."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from .offsets_formats import GroupMetadata

logger = logging.getLogger(__name__)


class GroupMetadataWriter:
    def __init__(self, persist: Callable[[str, GroupMetadata], None]) -> None:
        self._persist = persist
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._pending: dict[str, GroupMetadata] = {}
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="group-metadata", daemon=True)
        self._thread.start()

    def submit(self, group_id: str, metadata: GroupMetadata) -> None:
        with self._lock:
            self._pending[group_id] = metadata
            self._changed.notify_all()

    def discard(self, group_id: str) -> None:
        with self._lock:
            self._pending.pop(group_id, None)

    def wait_idle(self, timeout_s: float) -> bool:
        """Has every record submitted so far been handed to the store?"""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while self._pending:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
            return True

    def close(self) -> None:
        with self._lock:
            self._stopped = True
            self._changed.notify_all()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._pending and not self._stopped:
                    self._changed.wait()
                if self._stopped:
                    return
                pending = dict(self._pending)
            for group_id, metadata in pending.items():
                try:
                    self._persist(group_id, metadata)
                except Exception as exc:  # a later change writes it again
                    logger.warning("storing the metadata of group %s failed: %s", group_id, exc)
            with self._lock:
                for group_id, metadata in pending.items():
                    if self._pending.get(group_id) is metadata:
                        del self._pending[group_id]
                self._changed.notify_all()
