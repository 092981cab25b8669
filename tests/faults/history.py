"""The history of a fault campaign, as Jepsen records one: every client operation is written
by the process that performs it, first as an `invoke`, then as its completion: `ok` (it
happened, with what it returned), `fail` (it certainly did not happen) or `info` (unknown:
timed out, or the connection was lost; it may or may not have happened).

Each client process appends JSON lines to a file of its own, one operation event a line,
flushed as it is written, so a client killed by SIGKILL loses at most the line it was
writing. `read_history` merges the files of a run into one list ordered by time.

    {"process": "producer-0", "type": "invoke", "f": "send",
     "value": {"value": "producer-0-17", "key": "k2"}, "time_ns": 1712345678901234567}
    {"process": "producer-0", "type": "ok", "f": "send",
     "value": {"value": "producer-0-17", "key": "k2", "partition": 1, "offset": 88}, ...}

What `value` holds per `f` (the checker relies on these names):
- send: invoke {"value", "key"}; ok adds "partition" and "offset"; fail/info add "error".
- poll: ok {"records": [[partition, offset, value], ...]} (a poll that returned nothing
  is not written; a poll has no invoke: only what it returned is checked).
- assign: ok {"partitions": [..], "generation": int} when a group consumer's assignment
  changes; a consumer's position may jump at an assignment change.
- commit: invoke {"group", "offsets": {partition: offset}}; ok/fail/info the same, plus "error".
- final-read: ok {"partition", "records": [[offset, value], ...], "end_offset"}: what the final
  reader read of one partition after healing, offset 0 up to `end_offset`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

EventType = Literal["invoke", "ok", "fail", "info"]
HISTORY_SUFFIX = ".jsonl"


@dataclass(frozen=True)
class Event:
    process: str
    type: str
    f: str
    value: Any
    time_ns: int

    def to_json(self) -> str:
        return json.dumps(
            {
                "process": self.process,
                "type": self.type,
                "f": self.f,
                "value": self.value,
                "time_ns": self.time_ns,
            },
            separators=(",", ":"),
        )


class HistoryWriter:
    """One client process's history file, appended one flushed line per event; safe to share
    between threads (a producer completes sends on its sender thread)."""

    def __init__(self, directory: Path, process: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.process = process
        self.path = directory / f"{process}{HISTORY_SUFFIX}"
        self._file: IO[str] = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        self._lock = threading.Lock()

    def record(self, type_: EventType, f: str, value: Any) -> Event:
        with self._lock:
            event = Event(self.process, type_, f, value, time.time_ns())
            self._file.write(event.to_json() + "\n")
            self._file.flush()
        return event

    def close(self) -> None:
        with self._lock:
            self._file.close()

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def parse_lines(lines: Iterable[str]) -> list[Event]:
    """Events from JSON lines; a torn last line (its writer was killed mid-write) is skipped."""
    events = []
    for line in lines:
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError:
            continue
        events.append(
            Event(raw["process"], raw["type"], raw["f"], raw.get("value"), int(raw["time_ns"]))
        )
    return events


def read_history(directory: Path) -> list[Event]:
    """Every event of every client file under `directory`, ordered by time (ties keep each
    file's own order, which is the order its process wrote them)."""
    events: list[Event] = []
    for path in sorted(directory.glob(f"*{HISTORY_SUFFIX}")):
        with open(path, encoding="utf-8") as file:
            events.extend(parse_lines(file))
    events.sort(key=lambda event: event.time_ns)
    return events
