"""A network thread of the Kafka listener (Kafka's SocketServer Processor): one selector over
its share of the connections, reading requests and writing answers on non-blocking sockets
(channel.py), handing each complete request to the request handlers (request_dispatch.py,
handler_pool.py) and taking their answers back. The listener runs `num.network.threads` of
them and deals new connections out in turn.

Per connection, one request at a time: a channel reads nothing while its request is being
handled, its answer is pending (later.py) or its answers sent (so answers go in request
order, and a connection has at most one answer pending), nor while it waits for room in
the request pool or the handlers' queue, nor while it is muted past a client quota (KIP-219).
Its connections' deadlines (the TLS handshake, the first request, the request pool's wait,
a quota's mute, idle expiry) are kept and acted on by connection_deadlines.py, checked on
every turn of the loop.
"""

from __future__ import annotations

import logging
import selectors
import socket
import ssl
import threading
import time
from collections import OrderedDict, deque
from typing import TYPE_CHECKING

from .channel import Channel, PeerClosed, Step
from .connection import KafkaConnection, Outcome, PendingAnswer
from .connection_deadlines import ConnectionDeadlines
from .framing import FrameError, ScatteredFrame
from .kafka_call import ConnectionIdentity
from .listener_context import ListenerContext
from .request_dispatch import RequestDispatch

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)

# The longest the loop sleeps with no event: how late a stop or an idle expiry may be seen.
MAX_SELECT_S = 0.5
STOP_JOIN_TIMEOUT_S = 5.0


class Processor:
    def __init__(self, index: int, context: ListenerContext) -> None:
        self.index = index
        self.context = context
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._new: deque[tuple[socket.socket, tuple[str, int], int]] = deque()
        self._answered: deque[tuple[Channel, Outcome]] = deque()
        self._channels: OrderedDict[int, Channel] = OrderedDict()  # least recently active first
        self._registered: dict[int, int] = {}  # id(channel) -> events
        self._waiting_memory: deque[Channel] = deque()
        self._deadlines = ConnectionDeadlines(
            context,
            self._channels,
            self._waiting_memory,
            close=self._close,
            read=self._read,
            touched=self._touched,
        )
        self._memory_released = False
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"kafka-network-thread-{index}", daemon=True
        )
        context.pool.notify_on_release(self._on_memory_released)
        self._dispatch = RequestDispatch(context, answer=self._answer, wakeup=self._wakeup)

    @property
    def connections(self) -> int:
        return len(self._channels)

    @property
    def waiting_for_memory(self) -> int:
        """Connections muted until the request pool has room for their next frame."""
        return len(self._waiting_memory)

    def start(self) -> None:
        self._thread.start()

    # -- from other threads ----------------------------------------------------------------

    def _wakeup(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # a wakeup is pending already, or the processor has stopped

    def accept(self, sock: socket.socket, peer: tuple[str, int], lane: int) -> None:
        """A new connection (counted in by the acceptor) on `lane`, for this thread to serve."""
        self._new.append((sock, peer, lane))
        self._wakeup()

    def _answer(self, channel: Channel, outcome: Outcome) -> None:
        self._answered.append((channel, outcome))
        self._wakeup()

    def _on_memory_released(self) -> None:
        if self._waiting_memory:
            self._memory_released = True
            self._wakeup()

    def stop(self) -> None:
        self._stopped.set()
        self._wakeup()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(STOP_JOIN_TIMEOUT_S)
        self.context.pool.forget_on_release(self._on_memory_released)

    # -- the loop --------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stopped.is_set():
                try:
                    self._turn()
                except Exception:
                    logger.exception("Kafka network thread %d: a turn failed", self.index)
        finally:
            for channel in list(self._channels.values()):
                self._close(channel)
            while self._new:
                sock, peer, _ = self._new.popleft()
                sock.close()
                self.context.closed(peer[0])
            self._selector.close()
            self._wake_r.close()
            self._wake_w.close()

    def _turn(self) -> None:
        now = time.monotonic()
        timeout = self._deadlines.timeout(
            now, 0.0 if self._memory_released or self._dispatch.room_pending else MAX_SELECT_S
        )
        for key, events in self._selector.select(timeout):
            channel = key.data
            if channel is None:
                self._drain_wakeups()
                continue
            if channel.closed:
                continue
            self._serve(channel, events)
        if self._stopped.is_set():
            return
        while self._new:
            self._open(*self._new.popleft())
        while self._answered:
            self._answered_with(*self._answered.popleft())
        if self._memory_released:
            self._memory_released = False
            for channel in list(self._waiting_memory):
                self._read(channel)
        self._dispatch.retry_parked()
        self._deadlines.expire(time.monotonic())

    def _drain_wakeups(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass

    # -- connections ----------------------------------------------------------------------

    def _open(self, sock: socket.socket, peer: tuple[str, int], lane: int) -> None:
        context = self.context
        try:
            if context.ssl_context is not None:
                sock = context.ssl_context.wrap_socket(
                    sock, server_side=True, do_handshake_on_connect=False
                )
        except (OSError, ValueError) as exc:
            logger.info("Kafka connection from %s failed TLS setup: %s", peer[0], exc)
            sock.close()
            context.closed(peer[0])
            return
        now = time.monotonic()
        connection = KafkaConnection(
            ConnectionIdentity(peer[0], peer[1], lane=lane),
            context.table,
            context.core,
            tracer=context.tracer,
            sasl_required=context.sasl_required,
            advertised_address=context.advertised_address,
            node_address=context.node_address,
            fetch_sessions=context.fetch_sessions,
        )
        channel = Channel(
            sock,
            connection,
            context.table,
            context.pool,
            max_request_bytes=context.max_request_bytes,
            now=now,
        )
        self._channels[id(channel)] = channel
        self._deadlines.at(now + context.first_request_timeout_s, channel)
        if channel.handshaking:
            self._deadlines.at(channel.handshake_deadline, channel)
            self._handshake(channel)
        else:
            self._update(channel)

    def _close(self, channel: Channel) -> None:
        if channel.closed:
            return
        channel.closed = True
        self._channels.pop(id(channel), None)
        if channel.waiting_memory_since is not None and channel in self._waiting_memory:
            self._waiting_memory.remove(channel)
        self._dispatch.forget(channel)
        if channel.pending is not None:  # its client is gone: the core's wait is given up
            pending, channel.pending = channel.pending, None
            pending.cancel()
        if self._registered.pop(id(channel), None) is not None:
            try:
                self._selector.unregister(channel.sock)
            except (KeyError, ValueError, OSError):
                pass
        try:
            channel.sock.close()
        except OSError:
            pass
        channel.release()
        self.context.closed(channel.session.identity.peer_host)

    def _update(self, channel: Channel) -> None:
        """The selector's interest in `channel` made to match what it waits for."""
        if channel.closed:
            return
        events = 0
        if channel.wants_read(time.monotonic()):
            events |= selectors.EVENT_READ
        if channel.wants_write():
            events |= selectors.EVENT_WRITE
        key = id(channel)
        current = self._registered.get(key)
        if (current or 0) == events:
            return
        sock = channel.sock
        if not events:
            self._selector.unregister(sock)
            del self._registered[key]
        elif current is None:
            self._selector.register(sock, events, channel)
            self._registered[key] = events
        else:
            self._selector.modify(sock, events, channel)
            self._registered[key] = events

    def _touched(self, channel: Channel) -> None:
        self._channels.move_to_end(id(channel))

    # -- events ---------------------------------------------------------------------------

    def _serve(self, channel: Channel, events: int) -> None:
        if channel.handshaking:
            self._handshake(channel)
            return
        if events & selectors.EVENT_WRITE:
            self._write(channel)
        if events & selectors.EVENT_READ and not channel.closed:
            self._read(channel)

    def _handshake(self, channel: Channel) -> None:
        try:
            done = channel.handshake()
        except (ssl.SSLError, OSError) as exc:
            logger.info(
                "Kafka connection from %s failed its TLS handshake: %s",
                channel.connection.peer,
                exc,
            )
            self._close(channel)
            return
        self._touched(channel)
        if done:
            self._read(channel)  # bytes after the handshake may be buffered already
        else:
            self._update(channel)

    def _read(self, channel: Channel) -> None:
        """Reads on as far as the channel may, and hands a complete request to a handler."""
        now = time.monotonic()
        if channel.closed:
            return
        if channel.waiting_memory_since is None and not channel.wants_read(now):
            return
        was_waiting = channel.waiting_memory_since is not None
        try:
            step = channel.read_frame(now, ahead=channel.pending is not None)
            if step is Step.COMPLETE:
                self._dispatch.dispatch(channel, now)
        except PeerClosed:
            self._close(channel)
            return
        except FrameError as exc:
            logger.info("closing Kafka connection from %s: %s", channel.connection.peer, exc)
            self._close(channel)
            return
        except OSError as exc:
            logger.debug("Kafka connection from %s ended: %s", channel.connection.peer, exc)
            self._close(channel)
            return
        self._touched(channel)
        if step is Step.BLOCKED:
            self._deadlines.watch_body(channel)
        if step is Step.WAIT_MEMORY and not was_waiting:
            self._waiting_memory.append(channel)
            self._deadlines.at(now + self.context.pool.wait_s, channel)
            # Tried again on the next turn: room given back before the channel was listed
            # woke nobody.
            self._memory_released = True
        elif step is not Step.WAIT_MEMORY and was_waiting:
            self._waiting_memory.remove(channel)
        self._update(channel)

    def _answered_with(self, channel: Channel, outcome: Outcome) -> None:
        """A handler's outcome: its answers queued on the channel (their bytes held from the
        pool, added without waiting: the request was admitted) and written."""
        answer_bytes = sum(len(answer) for answer in outcome.answers)
        channel.handling = False
        channel.pending = None
        if outcome.later is not None:
            self._answer_later(channel, outcome.later)
            return
        if channel.closed:
            self.context.pool.release(channel.in_flight_bytes)
            channel.in_flight_bytes = 0
            return
        self.context.pool.add(answer_bytes)
        channel.in_flight_bytes += answer_bytes
        channel.close_after_send = outcome.close
        for answer in outcome.answers:
            if isinstance(answer, ScatteredFrame):
                channel.out.extend(answer.pieces)
            else:
                channel.out.append(memoryview(answer))
        self._write(channel)

    def _answer_later(self, channel: Channel, pending: PendingAnswer) -> None:
        """A request whose answer comes later (later.py): its frame's pool bytes go back now
        (its handler is done with it), and the channel stays muted, in flight, until the
        answer a request handler builds once the core completes it is sent."""
        self.context.pool.release(channel.in_flight_bytes)
        channel.in_flight_bytes = 0
        if channel.closed:
            pending.cancel()
            return
        channel.pending = pending
        pending.when_done(
            lambda outcome: self._answer(channel, outcome),
            self.context.handlers.submit_completion,
        )
        self._read(channel)  # reads ahead (Channel.reading_ahead), and watches for a close

    def _write(self, channel: Channel) -> None:
        try:
            done = channel.write()
        except OSError as exc:
            logger.debug("Kafka connection from %s ended: %s", channel.connection.peer, exc)
            self._close(channel)
            return
        self._touched(channel)
        if not done or not channel.in_flight:
            self._update(channel)
            return
        # Everything answered: the request's memory goes back, and the channel reads on
        # (unless the answer said to close, or a quota mutes it for a while).
        channel.in_flight = False
        self.context.pool.release(channel.in_flight_bytes)
        channel.in_flight_bytes = 0
        if channel.close_after_send:
            self._close(channel)
            return
        now = time.monotonic()
        muted_until = channel.session.muted_until
        if muted_until > now:
            channel.muted_until = muted_until
            self._deadlines.at(muted_until, channel)
            self._update(channel)
            return
        self._read(channel)  # a TLS record may hold the next request already
