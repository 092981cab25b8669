"""DirtyLogs: the logs that appended since the log manager's flush task last looked.

The flush task runs every `flush_scheduler_interval_ms` (1 s) over a node's logs; a node
hosting 10,000 partitions, most of them idle at any moment, would call into 10,000 logs a
second to learn that nothing changed. Appends add their log here instead (one set insertion,
under the log's lock), and the task visits only these: an idle log costs the tick nothing.
"""

from __future__ import annotations

import threading
from typing import Protocol


class Flushable(Protocol):
    def maybe_flush(self) -> bool:
        """Flush what is due; True while a later tick may still have work (a time-based
        flush not yet due)."""
        ...


class DirtyLogs:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._logs: dict[int, Flushable] = {}

    def __len__(self) -> int:
        return len(self._logs)

    def add(self, log: Flushable) -> None:
        if id(log) not in self._logs:  # the common case, an append to a dirty log: no lock
            with self._lock:
                self._logs[id(log)] = log

    def discard(self, log: Flushable) -> None:
        with self._lock:
            self._logs.pop(id(log), None)

    def take(self) -> list[Flushable]:
        """Every dirty log, forgotten until it appends again (or `add` puts it back)."""
        with self._lock:
            logs = list(self._logs.values())
            self._logs.clear()
        return logs
