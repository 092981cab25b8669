"""Daemon threads that run one task each at a time and are kept for the next: starting a
thread per task cost about 250 us here, several times a relayed fetch's or a produce's own
work. Never more threads than tasks at once, so a task never waits behind another (a fetch
pump long-polls, a produce waits for its leader's answer); a thread idle `idle_s` ends.
Daemons, so a task still waiting on a peer never holds up the process's exit (a
ThreadPoolExecutor's threads are joined at exit, for as long as their tasks take)."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

logger = logging.getLogger(__name__)

DEFAULT_IDLE_S = 60.0
T = TypeVar("T")


class ReusedThreads:
    def __init__(self, name: str, idle_s: float = DEFAULT_IDLE_S) -> None:
        self.name = name
        self.idle_s = idle_s
        self._lock = threading.Lock()
        self._idle = 0  # threads waiting for a task that no caller has claimed yet
        self._tasks: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()

    def run(self, task: Callable[[], None]) -> None:
        with self._lock:
            start = self._idle == 0
            if not start:
                self._idle -= 1  # claimed: that thread takes this task (or another's)
        self._tasks.put(task)
        if start:
            threading.Thread(target=self._work, daemon=True, name=self.name).start()

    def submit(self, call: Callable[..., T], *args: object) -> Future[T]:
        """`call(*args)` on one of the threads: its result, or what it raised, in a future."""
        future: Future[T] = Future()

        def task() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                result = call(*args)
            except BaseException as exc:  # the caller's to judge, through the future
                future.set_exception(exc)
            else:
                future.set_result(result)

        self.run(task)
        return future

    def _work(self) -> None:
        while True:
            try:
                task = self._tasks.get(timeout=self.idle_s)
            except queue.Empty:
                with self._lock:
                    if self._idle > 0:  # unclaimed: end; else a task is on its way
                        self._idle -= 1
                        return
                continue
            try:
                task()
            except Exception:  # the thread is counted idle again: it must live on
                logger.exception("%s task failed", self.name)
            with self._lock:
                self._idle += 1
