"""What `Producer.send` hands back: a future per record that resolves to its RecordMetadata.

A record's future holds only its batch's shared result and its index in the batch (as
Kafka's FutureRecordMetadata): the offset is the batch's base offset plus that index, so
completing a batch of thousands of records sets one event, not thousands.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import NamedTuple

from ..errors import SeglogError


class RecordMetadata(NamedTuple):
    topic: str
    partition: int
    # -1 when acks=0: the producer never hears the offset.
    offset: int
    timestamp_ms: int


class BatchMetadata(NamedTuple):
    """A run of records sent by `send_many`: offsets base_offset .. base_offset+count-1."""

    topic: str
    partition: int
    base_offset: int
    record_count: int
    timestamp_ms: int


Callback = Callable[[RecordMetadata | None, BaseException | None], object]


# Guards every BatchResult's waiter event: its creation by a waiter against `set`.
_WAITERS_LOCK = threading.Lock()


class BatchResult:
    """The outcome of one produce batch, shared by the futures of its records.

    Its event exists only once somebody waits: most batches complete with nobody waiting,
    and an Event per batch (a Condition, a lock, a deque) cost `send` ~3% of its time."""

    __slots__ = ("_done", "_waiters", "base_offset", "log_append_time_ms", "error")

    def __init__(self) -> None:
        self._done = False
        self._waiters: threading.Event | None = None
        self.base_offset = -1
        self.log_append_time_ms = -1
        self.error: BaseException | None = None

    def set(self, base_offset: int, log_append_time_ms: int, error: BaseException | None) -> None:
        self.base_offset = base_offset
        self.log_append_time_ms = log_append_time_ms
        self.error = error
        with _WAITERS_LOCK:
            self._done = True
            waiters = self._waiters
        if waiters is not None:
            waiters.set()

    def is_done(self) -> bool:
        return self._done

    def metadata(self, topic: str, partition: int, index: int, timestamp_ms: int) -> RecordMetadata:
        """The metadata of the batch's record at `index`, sent with `timestamp_ms`."""
        offset = self.base_offset + index if self.base_offset >= 0 else -1
        append_time = self.log_append_time_ms
        return RecordMetadata(
            topic, partition, offset, timestamp_ms if append_time < 0 else append_time
        )

    def wait(self, timeout_s: float | None) -> None:
        if not self._done:
            with _WAITERS_LOCK:
                waiters = None if self._done else self._waiters
                if waiters is None and not self._done:
                    waiters = self._waiters = threading.Event()
            if waiters is not None and not waiters.wait(timeout_s):
                raise TimeoutError(f"the record was not acknowledged within {timeout_s} s")
        if self.error is not None:
            raise self.error


class RecordFuture(tuple):  # type: ignore[type-arg]
    """(batch result, topic, partition, index in batch, timestamp). A tuple, because `send`
    makes one per record and a tuple is the cheapest object CPython builds."""

    __slots__ = ()

    @staticmethod
    def of(result: BatchResult, topic: str, partition: int, index: int, ts: int) -> RecordFuture:
        return _new_tuple(RecordFuture, (result, topic, partition, index, ts))

    @property
    def topic(self) -> str:
        topic: str = self[1]
        return topic

    @property
    def partition(self) -> int:
        partition: int = self[2]
        return partition

    def done(self) -> bool:
        done: bool = self[0].is_done()
        return done

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """The record's metadata; raises its delivery error, or TimeoutError."""
        self[0].wait(timeout)
        return self._metadata()

    result = get

    def exception(self, timeout: float | None = None) -> BaseException | None:
        try:
            self[0].wait(timeout)
        except TimeoutError:
            raise
        except BaseException as exc:  # the delivery error is the answer
            return exc
        return None

    def _metadata(self) -> RecordMetadata:
        result, topic, partition, index, timestamp_ms = self
        metadata: RecordMetadata = result.metadata(topic, partition, index, timestamp_ms)
        return metadata

    def __repr__(self) -> str:
        state = "done" if self.done() else "pending"
        return f"RecordFuture({self.topic}-{self.partition}, {state})"


_new_tuple = tuple.__new__


class BulkFuture:
    """The future of a `send_many` call: resolves when every record is acknowledged."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        # (batch result, partition, index of the first record in the batch, count, timestamp)
        self._runs: list[tuple[BatchResult, int, int, int, int]] = []

    def _add(self, result: BatchResult, partition: int, index: int, count: int, ts: int) -> None:
        self._runs.append((result, partition, index, count, ts))

    @property
    def record_count(self) -> int:
        return sum(run[3] for run in self._runs)

    def done(self) -> bool:
        return all(run[0].is_done() for run in self._runs)

    def get(self, timeout: float | None = None) -> list[BatchMetadata]:
        """Metadata per run of records, in the order sent; raises the first delivery error."""
        deadline = None if timeout is None else time.monotonic() + timeout
        out = []
        for result, partition, index, count, ts in self._runs:
            result.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
            base = result.base_offset + index if result.base_offset >= 0 else -1
            stamp = result.log_append_time_ms if result.log_append_time_ms >= 0 else ts
            out.append(BatchMetadata(self.topic, partition, base, count, stamp))
        return out

    result = get

    def errors(self) -> list[BaseException]:
        return [r.error for r, *_ in self._runs if r.is_done() and r.error is not None]


class ProducerClosedError(SeglogError):
    """`send` after `close`."""
