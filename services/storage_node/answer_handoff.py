"""A waiting request answered by the thread whose work made it answerable (Kafka's
DelayedOperation: `tryComplete` runs on whichever thread changed the partition, and the
answer goes out from there). Two waits use it, both over the bulk path:
- a follower's fetch round, answered by the thread of the acks=all append that brought the
  records it waits for (bulk_server.py, fetch_sessions.py, produce_requests.py);
- an acks=all produce, answered by the thread serving the follower fetch that moved the high
  watermark past its batches (bulk_produce.py, delayed_produce.py).

An acks=all produce is answered once every in-sync follower has fetched its records and come
back for more. Left to itself, each waiting request is woken by the change and must then get
the interpreter's lock and a CPU in its turn before it can send: two thread hand-offs on the
path of every acks=all produce. The follower round's was measured at 0.35 ms in the fast half
of appends at 5,000 records/s and 8 ms in the slowest 1% (a busy node's other threads ahead
of it). The thread that made the change already holds the lock and a CPU, and the answers
are small (a few KiB of records and headers; a produce's offsets): it sends them itself,
and the waiting thread only wakes to read its connection's next request.

The protocol between the round's own thread (the owner) and an appender:
- the owner `open`s the handoff before each wait, giving it `step`, which evaluates the round
  once (its changes, its news) and returns an answer or None (nothing to send yet);
- an appender that woke the round `claim`s it (only from OPEN) and, once its own locks are
  released, `run`s it: `step`, then `send` of what step found, or the handoff back OPEN
  when step found nothing;
- the owner `close`s the handoff when it wakes: it waits while an appender runs it, then finds
  it settled (`outcome`: what `send` returned, which may be the answer left for the owner to
  send, when `send` judged it too large to be sure the socket takes it without blocking the
  appender; or `error`, the appender's, raised on the owner's thread so the connection ends as
  if the owner had failed), or still its own.

Only a thread that promised to run what it claims takes part (`claiming`): an acks=all
append's (produce_requests.py), and the bulk listener's follower-fetch threads. Other
threads wake the owner as before: an acks=1 append's, whose own answer would wait behind the
rounds it answered, and which at high rates gains from a round that, woken in its turn,
carries several appends; the gRPC Fetch's; a follower's own appends."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

Answer = TypeVar("Answer")  # what `step` finds to send
Outcome = TypeVar("Outcome")  # what `send` returns once it sent it

_OPEN, _OWNED, _CLAIMED, _DONE = range(4)
_claimed_here = threading.local()


class AnswerHandoff(Generic[Answer, Outcome]):
    def __init__(self, send: Callable[[Answer], Outcome]) -> None:
        self._send = send
        self._state = _OWNED
        self._changed = threading.Condition(threading.Lock())
        self._step: Callable[[], Answer | None] | None = None
        self._wake_owner: Callable[[], None] | None = None
        self.outcome: Outcome | None = None
        self.error: BaseException | None = None

    @property
    def is_open(self) -> bool:
        """Whether the owner waits and an appender may claim the round now."""
        return self._state == _OPEN

    def open(self, step: Callable[[], Answer | None], wake_owner: Callable[[], None]) -> None:
        """Before the owner waits: an appender may claim the round from now on."""
        with self._changed:
            assert self._state == _OWNED
            self._step = step
            self._wake_owner = wake_owner
            self._state = _OPEN

    def close(self) -> bool:
        """The owner is awake: True when an appender settled the round (`outcome` or
        `error`), False when the round is the owner's to evaluate again."""
        with self._changed:
            while self._state == _CLAIMED:
                self._changed.wait()
            if self._state == _DONE:
                return True
            self._state = _OWNED
            return False

    def claim(self) -> bool:
        """From an appender that woke the round: True when it is now this thread's to run,
        after this thread's append (`claiming`)."""
        pending: list[AnswerHandoff[object, object]] | None = getattr(
            _claimed_here, "pending", None
        )
        if pending is None:
            return False
        with self._changed:
            if self._state != _OPEN:
                return False
            self._state = _CLAIMED
        pending.append(self)  # type: ignore[arg-type]
        return True

    def run(self) -> None:
        """Evaluate the claimed round and send its answer, or give it back to the owner."""
        assert self._state == _CLAIMED and self._step is not None
        assert self._wake_owner is not None
        answered = False
        try:
            found = self._step()
            if found is not None:
                self.outcome = self._send(found)
                answered = True
        except BaseException as exc:  # the owner's to raise, not the appender's
            self.error = exc
            answered = True
        with self._changed:
            self._state = _DONE if answered else _OPEN
            self._changed.notify_all()
        if answered:
            self._wake_owner()


@contextmanager
def claiming() -> Iterator[None]:
    """Rounds woken on this thread inside the block are claimed by it, to be run by it once
    its locks are released: by `run_claimed`, or when the block ends."""
    outer = getattr(_claimed_here, "pending", None)
    _claimed_here.pending = []
    try:
        yield
    finally:
        try:
            run_claimed()
        finally:
            _claimed_here.pending = outer


def run_claimed() -> None:
    """Run the rounds this thread claimed so far (none outside `claiming`)."""
    pending: list[AnswerHandoff[object, object]] | None = getattr(_claimed_here, "pending", None)
    while pending:
        pending.pop(0).run()
