"""One Kafka connection's bytes on a non-blocking socket, as a network thread (processor.py)
moves them: the TLS handshake, requests read frame by frame, answers written as the socket
takes them. No call here blocks; each says how far it got.

A request is read in steps (framing.py has the layout), and what it may hold grows with
what it has shown:
1. its 4-byte size, checked: at least a header's 10 bytes, at most socket.request.max.bytes,
   and before the connection has authenticated at most sasl.server.max.receive.size (512
   KiB). "Authenticated": on a SASL listener, SaslAuthenticate succeeded; on one that needs
   none, the connection's first request header was read and checked. So what a stranger can
   make the gateway hold is this object and its 14 bytes of buffers.
2. its header's 10 fixed bytes, checked: an api key the listener serves, a version it
   serves (ApiVersions apart), allowed before authentication, a client id that fits.
3. only then the frame's size is taken from the gateway's request pool (services/
   memory_pool.py). No room: the channel waits muted (its socket unread, its network thread
   serving the others) until room comes or the pool's wait runs out (then it is closed;
   nothing of the request was read, the client sends it again).
4. the rest of the frame, into one buffer of its size (the 10 bytes copied in front).

After a Produce request, the ones the client has already queued behind it (whose bytes are
here now) are read too, up to MAX_QUEUED_REQUESTS and socket.request.max.bytes in all, while
the pool has room for them at once, and answered together (produce_coalescing.py). A
request of another api met on the way is left where its reading stopped, unchecked, and
read on once the answers are sent.

A frame's pool bytes are held only while it arrives: a connection that sends none of its
body for the pool's wait (30 s, the time a request may wait for room) is closed, so one that
announces a large frame and goes silent gives its share back after 30 s, not after the
10-minute idle timeout. (A frame read ahead behind a request in flight is not read, so not
timed, until that request is answered.)

The pool share a connection holds: one frame at a time (coalesced Produce requests: at most
socket.request.max.bytes in all) and its answers, until they are sent. With the defaults
(256 MiB pool, 100 MiB frames) two connections sending frames of the largest size fill at
most 200 MiB; the rest wait muted, never blocking a network thread or another connection's
reads, and a small request still fits in what is left. (Kafka's broker mutes a connection
the pool cannot serve the same way, and like it a frame is taken whole before its body is
read, so a half-read frame never waits for memory while holding some.)
"""

from __future__ import annotations

import socket
import ssl
import time
from collections import deque
from enum import Enum
from typing import TYPE_CHECKING

from services.memory_pool import RequestMemoryPool

from .connection import BEFORE_AUTHENTICATION, KafkaConnection, PendingAnswer
from .framing import (
    API_VERSIONS_KEY,
    FIXED_HEADER,
    SASL_SERVER_MAX_RECEIVE_SIZE,
    SIZE,
    FrameError,
)

if TYPE_CHECKING:
    from .api_table import ApiTable

# Queued requests of one api answered together (produce_coalescing.py): librdkafka keeps up
# to a million in flight without idempotence.
MAX_QUEUED_REQUESTS = 64
TLS_HANDSHAKE_TIMEOUT_S = 10.0


class PeerClosed(Exception):
    """The client closed its end."""


class Stage(Enum):
    SIZE = 1  # reading the 4-byte size
    HEADER = 2  # reading the header's fixed 10 bytes
    CHECK = 3  # header read, not checked yet (left by a coalescing read-ahead)
    RESERVE = 4  # checked, waiting for the pool
    BODY = 5  # the frame's buffer, being filled


class Step(Enum):
    COMPLETE = 1  # a frame is read
    BLOCKED = 2  # the socket has no more bytes now
    WAIT_MEMORY = 3  # the pool has no room for the frame now
    STOPPED = 4  # read-ahead stopped before a frame it does not take


class FrameReader:
    """Where the reading of the connection's next frame stands."""

    __slots__ = ("body", "filled", "head", "raw", "reserved", "size", "size_bytes", "stage")

    def __init__(self) -> None:
        self.size_bytes = bytearray(SIZE.size)
        self.head = bytearray(FIXED_HEADER.size)
        self.reset()

    def reset(self) -> None:
        self.stage = Stage.SIZE
        self.filled = 0
        self.size = 0
        self.raw = False  # SaslHandshake v0's bare token: no header
        self.body: bytearray | None = None
        self.reserved = 0

    @property
    def started(self) -> bool:
        return self.stage is not Stage.SIZE or self.filled > 0


class Channel:
    def __init__(
        self,
        sock: socket.socket,
        connection: KafkaConnection,
        table: ApiTable,
        pool: RequestMemoryPool,
        *,
        max_request_bytes: int,
        now: float,
    ) -> None:
        self.sock = sock
        self.connection = connection
        self.session = connection.session
        self.table = table
        self.pool = pool
        self.max_request_bytes = max_request_bytes
        self.handshaking = isinstance(sock, ssl.SSLSocket)
        self.handshake_wants_write = False
        self.handshake_deadline = now + TLS_HANDSHAKE_TIMEOUT_S
        self.reader = FrameReader()
        self.out: deque[memoryview] = deque()
        # A request (or coalesced requests) handed to the handlers and its answers not all
        # sent: the channel reads nothing meanwhile (Kafka's mute), and holds their pool bytes.
        self.in_flight = False
        self.in_flight_bytes = 0
        self.handling = False  # a handler holds the request (its bytes are released after)
        # The request's answer to come (later.py): cancelled if the connection closes first.
        self.pending: PendingAnswer | None = None
        # Read and not yet taken by the handlers' queue (it was full): frames, bare SASL token.
        self.parked: tuple[list[bytearray], bool] | None = None
        self.opened_at = now
        self.close_after_send = False
        self.waiting_memory_since: float | None = None
        # When to check that a frame holding pool bytes still arrives (connection_deadlines.py).
        self.body_check_at: float | None = None
        self.waiting_queue = False
        self.muted_until = 0.0  # over a client quota (KIP-219): no reading before
        self.spoke = False  # a valid request header was read (listeners without SASL)
        self.requests_read = 0
        self.last_active = now
        self.closed = False

    # -- state ---------------------------------------------------------------------------

    @property
    def trusted(self) -> bool:
        """Authenticated, in the sense of the bounds above."""
        if self.session.sasl_required:
            return self.session.authenticated_principal is not None
        return self.spoke

    def wants_read(self, now: float) -> bool:
        if self.closed:
            return False
        if self.handshaking:
            return not self.handshake_wants_write
        return (
            (not self.in_flight or self.reading_ahead)
            and self.waiting_memory_since is None
            and not self.waiting_queue
            and self.muted_until <= now
        )

    @property
    def reading_ahead(self) -> bool:
        """Its answer pending (later.py), the connection reads on as far as the next frame's
        size and header (14 bytes, no pool memory: a pending answer may wait minutes), so a
        client that goes away meanwhile is seen at once and its wait given up, not when its
        answer is written. A client that sends a request behind the pending one is muted
        there, as Kafka mutes it, until the answer is sent."""
        return self.pending is not None and self.reader.stage in (Stage.SIZE, Stage.HEADER)

    def wants_write(self) -> bool:
        if self.handshaking:
            return self.handshake_wants_write
        return bool(self.out)

    # -- TLS -----------------------------------------------------------------------------

    def handshake(self) -> bool:
        """One step of the TLS handshake; True once it is done. ssl.SSLError / OSError when
        it fails."""
        assert isinstance(self.sock, ssl.SSLSocket)
        try:
            self.sock.do_handshake()
        except ssl.SSLWantReadError:
            self.handshake_wants_write = False
            return False
        except ssl.SSLWantWriteError:
            self.handshake_wants_write = True
            return False
        self.handshaking = False
        self.connection.verified_by_tls(self.sock)
        return True

    # -- reading -------------------------------------------------------------------------

    def _recv_into(self, view: memoryview) -> int:
        """Bytes read into `view`, -1 when none are here now; PeerClosed at the end."""
        try:
            count = self.sock.recv_into(view)
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return -1
        except ssl.SSLZeroReturnError:
            raise PeerClosed() from None
        if count == 0:
            if self.reader.started:
                raise FrameError(f"connection closed mid-frame ({self.reader.stage.name.lower()})")
            raise PeerClosed()
        return int(count)

    def _fill(self, buffer: bytearray, target: int) -> bool:
        """Fills `buffer` up to `target` bytes from the socket; whether it got there."""
        reader = self.reader
        view = memoryview(buffer)
        while reader.filled < target:
            count = self._recv_into(view[reader.filled : target])
            if count < 0:
                return False
            reader.filled += count
            self.last_active = time.monotonic()
        return True

    def _check_size(self) -> None:
        reader = self.reader
        (size,) = SIZE.unpack(reader.size_bytes)
        reader.size = size
        reader.raw = self.session.raw_sasl_token_next
        smallest = 0 if reader.raw else FIXED_HEADER.size
        if size < smallest or size > self.max_request_bytes:
            raise FrameError(
                f"request size {size} is outside {smallest}..{self.max_request_bytes} "
                f"(socket.request.max.bytes)"
            )
        if size > SASL_SERVER_MAX_RECEIVE_SIZE and not self.trusted:
            raise FrameError(
                f"request size {size} before authentication is past "
                f"{SASL_SERVER_MAX_RECEIVE_SIZE} (sasl.server.max.receive.size)"
            )

    def check_header(self) -> tuple[int, int]:
        """The header's fixed fields checked (FrameError if the connection must close);
        (api key, api version)."""
        reader = self.reader
        api_key, api_version, _, client_id_length = FIXED_HEADER.unpack(reader.head)
        entry = self.table.entry(api_key)
        if entry is None:
            raise FrameError(f"api key {api_key} is not served")
        if not self.session.authenticated and api_key not in BEFORE_AUTHENTICATION:
            raise FrameError(f"{entry.name} before SASL authentication")
        if not entry.serves(api_version) and api_key != API_VERSIONS_KEY:
            raise FrameError(
                f"{entry.name} v{api_version} is not served (v{entry.min_version}.."
                f"v{entry.max_version} are)"
            )
        if client_id_length < -1 or client_id_length > reader.size - FIXED_HEADER.size:
            raise FrameError(f"client id length {client_id_length} in a {reader.size}-byte frame")
        self.spoke = True
        return api_key, api_version

    def read_frame(
        self, now: float, coalescing: tuple[int, int] | None = None, *, ahead: bool = False
    ) -> Step:
        """Reads on with the next frame as far as the socket and the pool allow; `ahead`
        (an answer is pending): no further than its header, unchecked (STOPPED there).

        With `coalescing` ((api key, bytes held so far)), a read-ahead after a complete
        request: it stops (STOPPED) before a frame of another api, one that does not check,
        or one the pool or socket.request.max.bytes cannot take at once, leaving it to be
        read on once the request before it is answered."""
        reader = self.reader
        while True:
            stage = reader.stage
            if stage is Stage.SIZE:
                if not self._fill(reader.size_bytes, SIZE.size):
                    return Step.BLOCKED
                self._check_size()
                reader.filled = 0
                reader.stage = Stage.RESERVE if reader.raw else Stage.HEADER
            elif stage is Stage.HEADER:
                if not self._fill(reader.head, FIXED_HEADER.size):
                    return Step.BLOCKED
                reader.stage = Stage.CHECK
            elif ahead and stage in (Stage.CHECK, Stage.RESERVE):
                return Step.STOPPED
            elif stage is Stage.CHECK:
                if coalescing is not None:
                    api_key, _ = FIXED_HEADER.unpack_from(reader.head)[:2]
                    if api_key != coalescing[0]:
                        return Step.STOPPED
                    try:
                        if not self.connection.batches(*self.check_header()):
                            return Step.STOPPED
                    except FrameError:
                        return Step.STOPPED  # checked again, and refused, in its turn
                else:
                    self.check_header()
                reader.stage = Stage.RESERVE
            elif stage is Stage.RESERVE:
                if coalescing is not None:
                    if coalescing[1] + reader.size > self.max_request_bytes or not (
                        self.pool.try_acquire(reader.size)
                    ):
                        return Step.STOPPED
                elif not self.pool.try_acquire(reader.size, overshoot=True):
                    if self.waiting_memory_since is None:
                        self.waiting_memory_since = now
                    return Step.WAIT_MEMORY
                self.waiting_memory_since = None
                reader.reserved = reader.size
                reader.body = bytearray(reader.size)
                if reader.raw:
                    reader.filled = 0
                else:
                    reader.body[: FIXED_HEADER.size] = reader.head
                    reader.filled = FIXED_HEADER.size
                reader.stage = Stage.BODY
            else:
                assert reader.body is not None
                if not self._fill(reader.body, reader.size):
                    return Step.BLOCKED
                return Step.COMPLETE

    def take_frame(self) -> tuple[bytearray, int, bool]:
        """The frame just read, its pool bytes (now the in-flight request's) and whether it
        is a bare SASL token; the reader starts on the next."""
        reader = self.reader
        assert reader.body is not None
        taken = (reader.body, reader.reserved, reader.raw)
        reader.reset()
        self.body_check_at = None
        self.requests_read += 1
        return taken

    # -- writing -------------------------------------------------------------------------

    def write(self) -> bool:
        """Writes what the socket takes now; True once everything queued is sent."""
        while self.out:
            view = self.out[0]
            try:
                sent = self.sock.send(view)
            except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                return False
            self.last_active = time.monotonic()
            if sent >= len(view):
                self.out.popleft()
            else:
                self.out[0] = view[sent:]
        return True

    def release(self) -> None:
        """Gives back the pool bytes the channel holds (closing)."""
        held = self.reader.reserved + (0 if self.handling else self.in_flight_bytes)
        self.reader.reserved = 0
        self.reader.body = None
        self.parked = None
        if not self.handling:
            self.in_flight_bytes = 0
        self.pool.release(held)
