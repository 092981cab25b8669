"""An answer that comes later: what a Kafka API handler returns instead of its response when
the core's answer waits on something other than the handler (a JoinGroup on the rest of its
group, a follower's SyncGroup on its leader's, a Metadata on the nodes of the topics it
auto-creates). Kafka's broker parks such requests in a purgatory without a thread
(DelayedJoin, DelayedOperation); here the handler returns a `Later` over the core's Future
and its request handler thread is free at once.

When the future completes, `respond` (or `refuse`, for a SeglogError) builds the response on a
request handler thread, as any answer is built (the thread that completed the future, a
coordinator's call or timer or a node call's callback, only queues that work); the
connection (connection.py's PendingAnswer) sends it. The connection stays muted while its
answer is pending, as Kafka keeps a channel muted while its request is in the purgatory, so
answers go in request order and a connection has at most one pending answer (listener.py
bounds the connections). A connection closed meanwhile cancels the future: the core treats
that as its client gone (classic_waits.py: the member leaves).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from seglog.errors import SeglogError

T = TypeVar("T")


@dataclass(frozen=True)
class Later(Generic[T]):
    """A handler's answer once `future` completes: `respond(result)`, or `refuse(error)` for
    a SeglogError (None: the connection is closed, as for any handler failure)."""

    future: Future[T]
    respond: Callable[[T], Any]
    refuse: Callable[[SeglogError], Any] | None = None

    def response(self) -> Any:
        """The response object, once the future is done (not cancelled)."""
        error = self.future.exception()
        if error is None:
            return self.respond(self.future.result())
        if isinstance(error, SeglogError) and self.refuse is not None:
            return self.refuse(error)
        raise error


def answer_later(
    future: Future[T],
    respond: Callable[[T], Any],
    refuse: Callable[[SeglogError], Any] | None = None,
) -> Any:
    """`respond(result)` at once when the future is already done, else a `Later`: what a
    handler returns."""
    later = Later(future, respond, refuse)
    return later.response() if future.done() else later
