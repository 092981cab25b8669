"""The deadlines of a network thread's connections (processor.py) and what happens when one
passes: a heap of deadlines, lazily cleared, checked on every turn of the thread's loop, and
the idle expiry over its connections, least recently active first.

- the TLS handshake: 10 s;
- `connections.first.request.timeout.ms`: a connection that has not authenticated by then
  (SASL listeners; elsewhere, read its first complete request) is closed;
- the request pool's wait (`wait_s`, 30 s): a connection still waiting for room is closed,
  and so is one holding room for a frame whose bytes stopped coming that long;
- a client quota's mute (KIP-219): the connection reads on when it ends;
- `connections.max.idle.ms`: a connection with no bytes in or out for that long and no
  request in flight is closed (oldest first, as Kafka's idle expiry).
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from .channel import Channel, Stage

if TYPE_CHECKING:
    from .listener_context import ListenerContext

logger = logging.getLogger(__name__)


class ConnectionDeadlines:
    """One network thread's timers. It shares the thread's connections (least recently
    active first) and its list of those waiting for request memory, and closes or reads a
    connection through the thread's own `close` and `read`."""

    def __init__(
        self,
        context: ListenerContext,
        channels: OrderedDict[int, Channel],
        waiting_memory: deque[Channel],
        *,
        close: Callable[[Channel], None],
        read: Callable[[Channel], None],
        touched: Callable[[Channel], None],
    ) -> None:
        self.context = context
        self._channels = channels
        self._waiting_memory = waiting_memory
        self._close = close
        self._read = read
        self._touched = touched
        self._timers: list[tuple[float, int, Channel]] = []
        self._sequence = itertools.count()

    def at(self, when: float, channel: Channel) -> None:
        """`channel` checked again at `when` (monotonic seconds)."""
        heapq.heappush(self._timers, (when, next(self._sequence), channel))

    def timeout(self, now: float, longest: float) -> float:
        """How long the loop may wait for events before the next deadline passes."""
        timeout = longest
        if self._timers:
            timeout = min(timeout, max(0.0, self._timers[0][0] - now))
        if self._channels:
            oldest = next(iter(self._channels.values()))
            idle_at = oldest.last_active + self.context.idle_timeout_s
            timeout = min(timeout, max(0.0, idle_at - now))
        return timeout

    def watch_body(self, channel: Channel) -> None:
        """A read that stopped partway through a frame's body: checked a pool's wait after
        its last bytes (unless a check is set already or a request is in flight)."""
        if (
            channel.body_check_at is None
            and not channel.in_flight
            and channel.reader.stage is Stage.BODY
        ):
            channel.body_check_at = channel.last_active + self.context.pool.wait_s
            self.at(channel.body_check_at, channel)

    def expire(self, now: float) -> None:
        context = self.context
        while self._timers and self._timers[0][0] <= now:
            _, _, channel = heapq.heappop(self._timers)
            if channel.closed:
                continue
            peer = channel.connection.peer
            if channel.handshaking and channel.handshake_deadline <= now:
                logger.info("closing Kafka connection from %s: no TLS handshake in time", peer)
                self._close(channel)
            elif (
                channel.waiting_memory_since is not None
                and channel.waiting_memory_since + context.pool.wait_s <= now
            ):
                logger.info(
                    "closing Kafka connection from %s unread: the request pool had no room "
                    "for %d bytes for %g s (queued.max.request.bytes)",
                    peer,
                    channel.reader.size,
                    context.pool.wait_s,
                )
                self._waiting_memory.remove(channel)
                self._close(channel)
            elif (
                not self._met_first_deadline(channel)
                and now - channel.opened_at >= context.first_request_timeout_s
            ):
                logger.info(
                    "closing Kafka connection from %s: no %s within %g ms "
                    "(connections.first.request.timeout.ms)",
                    peer,
                    "authentication" if channel.session.sasl_required else "complete request",
                    context.first_request_timeout_s * 1000,
                )
                self._close(channel)
            elif channel.body_check_at is not None and channel.body_check_at <= now:
                self._check_body(channel, now)
            elif channel.muted_until and channel.muted_until <= now:
                channel.muted_until = 0.0
                self._read(channel)
        # Idle: oldest first; a channel with a request in flight or waiting is not idle.
        for _ in range(len(self._channels)):
            channel = next(iter(self._channels.values()))
            if channel.last_active + context.idle_timeout_s > now:
                break
            if channel.in_flight or channel.waiting_memory_since is not None:
                channel.last_active = now
                self._touched(channel)
                continue
            logger.info(
                "closing Kafka connection from %s: idle for %g ms (connections.max.idle.ms)",
                channel.connection.peer,
                context.idle_timeout_s * 1000,
            )
            self._close(channel)

    def _check_body(self, channel: Channel, now: float) -> None:
        """A frame holding pool bytes whose body has stopped coming for the pool's wait is
        closed; one still coming is checked again a wait after its last bytes."""
        wait_s = self.context.pool.wait_s
        if channel.in_flight or channel.reader.stage is not Stage.BODY:
            channel.body_check_at = None
        elif now - channel.last_active >= wait_s:
            logger.info(
                "closing Kafka connection from %s: no bytes for %g s of a %d-byte request "
                "holding request memory (queued.max.request.bytes)",
                channel.connection.peer,
                wait_s,
                channel.reader.size,
            )
            self._close(channel)
        else:
            channel.body_check_at = channel.last_active + wait_s
            self.at(channel.body_check_at, channel)

    @staticmethod
    def _met_first_deadline(channel: Channel) -> bool:
        if channel.session.sasl_required:
            return channel.session.authenticated_principal is not None
        return channel.requests_read > 0
