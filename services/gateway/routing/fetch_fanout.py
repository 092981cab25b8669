"""A Fetch whose partitions are led by several nodes: one sub-fetch per node, concurrently,
their messages relayed as they arrive.

A waiting fetch (max_wait_ms > 0) answers once one node's answer is complete, as Kafka's
broker answers once the request as a whole has min_bytes: each node is given the request's
min_bytes, so a node that answered with records before its wait ran out had min_bytes alone.
The nodes that have sent nothing yet are then cancelled (their partitions are simply not in
this answer; the client asks again from the same offsets), instead of holding the answer, and
with it the client's next fetch, until their own long polls end. A node already sending is
relayed to its end, so no partition's answer is cut short. A fetch that does not wait is
relayed whole.

A node's call may start after it was given up (its thread is late under load): it is then
cancelled as it starts, and the answer never waits on it either way. A reader that stops
reading (closes the stream) gives up every node not done yet, as its caller went away.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from seglog.reused_threads import ReusedThreads
from seglog.v1 import common_pb2

Target = TypeVar("Target")
Message = TypeVar("Message")  # what a node's answer comes in (routing: fetch_answers.py)
# relay(target, sub-request, indexes into the whole request, keep_cancel) yields the node's
# messages; keep_cancel receives the function that cancels the node's call, when there is one.
Relay = Callable[
    [Target, bytes, list[int], Callable[[Callable[[], object]], None]], Iterator[Message]
]
logger = logging.getLogger(__name__)

_PUT_RETRY_S = 0.5
# A pump thread idle this long ends; one busy again is started anew.
PUMP_THREAD_IDLE_S = 60.0


_PUMP_THREADS = ReusedThreads("fetch-pump", PUMP_THREAD_IDLE_S)


class _Pump(Generic[Target]):
    """One node's sub-fetch, run on its own thread into the shared queue as (pump, message),
    then (pump, None) once done."""

    def __init__(self, number: int, target: Target, indexes: list[int]) -> None:
        self.number = number
        self.target = target
        self.indexes = indexes
        self.sent_any = False  # read and written by the relaying thread only
        self.done = False
        # Between the relaying thread (abandon) and the pump's (keep_cancel).
        self._lock = threading.Lock()
        self._cancel: Callable[[], object] | None = None
        self.abandoned = False

    def keep_cancel(self, cancel: Callable[[], object]) -> None:
        with self._lock:
            self._cancel = cancel
            abandoned = self.abandoned
        if abandoned:
            cancel()

    def abandon(self) -> None:
        """What it sends from now on is dropped; its call is cancelled now or as it starts (a
        traced channel's call cannot be cancelled: it runs out on its own)."""
        with self._lock:
            self.abandoned = True
            cancel = self._cancel
        if cancel is not None:
            cancel()

    @property
    def awaited(self) -> bool:
        return not (self.done or self.abandoned)


def fetch_across_nodes(
    request: common_pb2.FetchRequest,
    by_node: dict[int, tuple[Target, list[int]]],
    relay: Relay[Target, Message],
) -> Iterator[Message]:
    """Each node gets an equal share of the request's `max_bytes` (the answer as a whole is
    the budget, as a Kafka broker's answer is: given the whole budget each, two nodes answered
    a 1,000,000-byte fetch with 1,843,824 bytes). A node still answers its first batch
    whatever its size; the answer is cut to the limit after (fetch_budget.py), for both
    adapters."""
    out: queue.Queue[tuple[_Pump[Target], Message | None]] = queue.Queue(maxsize=64)
    stop = threading.Event()
    pumps = [
        _Pump(number, target, indexes) for number, (target, indexes) in enumerate(by_node.values())
    ]

    def run(pump: _Pump[Target]) -> None:
        sub = common_pb2.FetchRequest(
            min_bytes=request.min_bytes,
            max_wait_ms=request.max_wait_ms,
            # 0: no limit (the node's own).
            max_bytes=max(1, request.max_bytes // len(pumps)) if request.max_bytes else 0,
            isolation_level=request.isolation_level,
        )
        sub.partitions.extend(request.partitions[i] for i in pump.indexes)
        try:
            payload = sub.SerializeToString()
            for message in relay(pump.target, payload, pump.indexes, pump.keep_cancel):
                if not _put(out, (pump, message), stop):
                    return
        finally:
            _put(out, (pump, None), stop)

    for pump in pumps:
        _PUMP_THREADS.run(functools.partial(run, pump))
    waits = request.max_wait_ms > 0
    try:
        while any(pump.awaited for pump in pumps):
            pump, message = out.get()
            if message is None:
                pump.done = True
                if waits and pump.sent_any:
                    _abandon_silent(pumps)
            elif not pump.abandoned:
                pump.sent_any = True
                yield message
    finally:
        # Closed early too (the reader stopped reading: its caller went away): the
        # nodes still long-polling are given up, and the pumps give up their next put.
        stop.set()
        for pump in pumps:
            if pump.awaited:
                pump.abandon()


def _abandon_silent(pumps: list[_Pump[Target]]) -> None:
    """One node answered in full: give up the nodes that have sent nothing yet."""
    for pump in pumps:
        if pump.awaited and not pump.sent_any:
            pump.abandon()


def _put(
    out: queue.Queue[tuple[_Pump[Target], Message | None]],
    item: tuple[_Pump[Target], Message | None],
    stop: threading.Event,
) -> bool:
    """Put unless the fetch was given up meanwhile; False then."""
    while not stop.is_set():
        try:
            out.put(item, timeout=_PUT_RETRY_S)
            return True
        except queue.Full:
            continue
    return False
