"""A TCP proxy in front of one gRPC server (or one Kafka listener) that loses answers on
purpose: the request reaches the server and is handled, and the connection is cut when the
server's answer starts, so the client sees UNAVAILABLE (or a broken connection) and cannot
know whether its call landed (the "unknown" outcome).

It reads the server-to-client byte stream as HTTP/2 frames (a 9-byte header: length, 24 bits;
type; flags; stream id, 31 bits). The server never sends a preface of its own, so that stream
is frames from its first byte. A stream's answer starts with its first HEADERS frame (type
0x1): that is where an answer is dropped or delayed. Client-to-server bytes pass unchanged.

With `framing="kafka"` the server's stream is Kafka's responses instead: each a 4-byte
big-endian size, then that many bytes; every response is an answer of its own.

Each connection has three threads (client to server; server frames read; server frames
written, so that delays are measured from each frame's arrival), and at most
MAX_CONNECTIONS connections are open at once."""

from __future__ import annotations

import logging
import queue
import random
import socket
import struct
import threading
import time
from types import TracebackType

logger = logging.getLogger(__name__)

FRAME_HEADER_BYTES = 9
HEADERS_FRAME = 0x1
RST_STREAM_FRAME = 0x3
END_STREAM_FLAG = 0x1
MAX_CONNECTIONS = 64
CONNECT_TIMEOUT_S = 5.0
RECV_BYTES = 65536
# Frames read ahead of the writer at most (the reader then waits: back pressure).
QUEUED_FRAMES_MAX = 4096
KAFKA_SIZE_BYTES = 4
KAFKA_ANSWER = -1  # the frame type given a whole Kafka response
FRAMINGS = ("http2", "kafka")


class FaultProxy:
    """Listens on 127.0.0.1 (at `listen_port`, or one the kernel picks) and forwards each
    connection to `target` ("host:port")."""

    def __init__(self, target: str, framing: str = "http2", listen_port: int = 0) -> None:
        if framing not in FRAMINGS:
            raise ValueError(f"framing must be one of {FRAMINGS}, not {framing!r}")
        self.framing = framing
        host, _, port = target.rpartition(":")
        self.target = (host.strip("[]"), int(port))
        self.answers_dropped = 0
        self._lock = threading.Condition()
        self._drops_armed = 0
        self._drop_probability = 0.0
        self._rng: random.Random | None = None
        self._delay_s = 0.0
        self._connections: set[_Connection] = set()
        self._closed = False
        self._listener = socket.create_server(("127.0.0.1", listen_port))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._acceptor = threading.Thread(
            target=self._accept, name=f"fault-proxy-accept-{self.address}", daemon=True
        )
        self._acceptor.start()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # -- faults ------------------------------------------------------------------------

    def drop_answers(self, count: int) -> None:
        """The next `count` answers (first HEADERS frames of streams) are lost: each cuts the
        connection it arrives on."""
        if count < 0:
            raise ValueError(f"count {count} must be >= 0")
        with self._lock:
            self._drops_armed += count

    def drop_answer_probability(self, probability: float, rng: random.Random) -> None:
        """Each answer is lost with `probability`, drawn from `rng` (seeded by the caller so
        a run can be repeated)."""
        if not 0.0 <= probability <= 1.0:
            raise ValueError(f"probability {probability} must be within [0, 1]")
        with self._lock:
            self._drop_probability = probability
            self._rng = rng

    def delay_answers(self, delay_ms: int) -> None:
        """Every frame from the server is held until `delay_ms` after it arrived, in order
        (a slow link back to clients; calls are answered `delay_ms` late)."""
        if delay_ms < 0:
            raise ValueError(f"delay_ms {delay_ms} must be >= 0")
        with self._lock:
            self._delay_s = delay_ms / 1000
            self._lock.notify_all()

    def sever(self) -> None:
        """Cut every open connection now (clients reconnect through the proxy afterwards)."""
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            connection.cut()

    def heal(self) -> None:
        """Forward everything again: no drops armed, no delay (held frames go at once)."""
        with self._lock:
            self._drops_armed = 0
            self._drop_probability = 0.0
            self._delay_s = 0.0
            self._lock.notify_all()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._lock.notify_all()
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        self._acceptor.join(CONNECT_TIMEOUT_S)
        self.sever()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            connection.join(CONNECT_TIMEOUT_S)

    # -- what connections ask --------------------------------------------------------------

    def _answer_fate(self) -> bool:
        """Whether the answer starting now is to be dropped (and counted)."""
        with self._lock:
            drop = False
            if self._drops_armed > 0:
                self._drops_armed -= 1
                drop = True
            elif self._drop_probability > 0 and self._rng is not None:
                drop = self._rng.random() < self._drop_probability
            if drop:
                self.answers_dropped += 1
            return drop

    def _hold(self, arrived_s: float, connection: _Connection) -> None:
        """Wait until `arrived_s` plus the current delay (re-read when it changes)."""
        with self._lock:
            while not self._closed and not connection.is_cut:
                remaining_s = arrived_s + self._delay_s - time.monotonic()
                if remaining_s <= 0:
                    return
                self._lock.wait(remaining_s)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                if self._closed or len(self._connections) >= MAX_CONNECTIONS:
                    client.close()
                    continue
            try:
                server = socket.create_connection(self.target, timeout=CONNECT_TIMEOUT_S)
                server.settimeout(None)
            except OSError as exc:
                logger.info("fault proxy: %s unreachable: %s", self.target, exc)
                client.close()
                continue
            connection = _Connection(self, client, server)
            with self._lock:
                self._connections.add(connection)
            connection.start()

    def _forget(self, connection: _Connection) -> None:
        with self._lock:
            self._connections.discard(connection)
            self._lock.notify_all()


class _Connection:
    """One client connection and its connection to the server."""

    def __init__(self, proxy: FaultProxy, client: socket.socket, server: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.server = server
        self.is_cut = False
        self._cut_lock = threading.Lock()
        self._frames: queue.Queue[tuple[float, bytes, int, int, int] | None] = queue.Queue(
            QUEUED_FRAMES_MAX
        )
        name = f"fault-proxy-{id(self):x}"
        self._threads = [
            threading.Thread(target=self._requests, name=f"{name}-requests", daemon=True),
            threading.Thread(target=self._read_answers, name=f"{name}-read", daemon=True),
            threading.Thread(target=self._write_answers, name=f"{name}-write", daemon=True),
        ]
        self._remaining = len(self._threads)

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def join(self, timeout_s: float) -> None:
        for thread in self._threads:
            thread.join(timeout_s)

    def cut(self) -> None:
        """Both sockets reset (the client sees the connection fail, not a clean end)."""
        with self._cut_lock:
            if self.is_cut:
                return
            self.is_cut = True
        for sock in (self.client, self.server):
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        with self.proxy._lock:
            self.proxy._lock.notify_all()  # a writer holding a delayed frame lets go

    def _thread_done(self) -> None:
        with self._cut_lock:
            self._remaining -= 1
            last = self._remaining == 0
        if last:
            for sock in (self.client, self.server):
                sock.close()
            self.proxy._forget(self)

    def _requests(self) -> None:
        try:
            while not self.is_cut:
                data = self.client.recv(RECV_BYTES)
                if not data:
                    break
                self.server.sendall(data)
        except OSError:
            pass
        finally:
            self.cut()
            self._thread_done()

    def _read_answers(self) -> None:
        """Split the server's bytes into frames, each stamped with its arrival time."""
        buffer = bytearray()
        try:
            while not self.is_cut:
                data = self.server.recv(RECV_BYTES)
                if not data:
                    break
                arrived_s = time.monotonic()
                buffer += data
                if self.proxy.framing == "kafka":
                    self._split_kafka(buffer, arrived_s)
                    continue
                while len(buffer) >= FRAME_HEADER_BYTES:
                    length = int.from_bytes(buffer[0:3], "big")
                    end = FRAME_HEADER_BYTES + length
                    if len(buffer) < end:
                        break
                    frame_type, flags = buffer[3], buffer[4]
                    stream_id = int.from_bytes(buffer[5:9], "big") & 0x7FFFFFFF
                    self._put((arrived_s, bytes(buffer[:end]), frame_type, flags, stream_id))
                    del buffer[:end]
        except OSError:
            pass
        finally:
            self._put(None)
            self._thread_done()

    def _split_kafka(self, buffer: bytearray, arrived_s: float) -> None:
        """Queue each whole Kafka response in `buffer` (removed from it) as one answer."""
        while len(buffer) >= KAFKA_SIZE_BYTES:
            end = KAFKA_SIZE_BYTES + int.from_bytes(buffer[:KAFKA_SIZE_BYTES], "big")
            if len(buffer) < end:
                return
            self._put((arrived_s, bytes(buffer[:end]), KAFKA_ANSWER, 0, 0))
            del buffer[:end]

    def _put(self, item: tuple[float, bytes, int, int, int] | None) -> None:
        while True:
            try:
                self._frames.put(item, timeout=0.2)
                return
            except queue.Full:
                if self.is_cut:
                    return

    def _write_answers(self) -> None:
        answering: set[int] = set()  # streams whose answer has started
        try:
            while True:
                try:
                    item = self._frames.get(timeout=0.2)
                except queue.Empty:
                    if self.is_cut:
                        break
                    continue
                if item is None:
                    break
                arrived_s, frame, frame_type, flags, stream_id = item
                if frame_type == KAFKA_ANSWER:
                    self.proxy._hold(arrived_s, self)
                    if self.is_cut or self.proxy._answer_fate():
                        break
                elif frame_type == HEADERS_FRAME and stream_id > 0:
                    if stream_id not in answering:
                        self.proxy._hold(arrived_s, self)
                        if self.is_cut:
                            break
                        if self.proxy._answer_fate():
                            logger.info("fault proxy: answer on stream %d dropped", stream_id)
                            break
                    if flags & END_STREAM_FLAG:
                        answering.discard(stream_id)
                    else:
                        answering.add(stream_id)
                elif frame_type == RST_STREAM_FRAME:
                    answering.discard(stream_id)
                else:
                    self.proxy._hold(arrived_s, self)
                if self.is_cut:
                    break
                self.client.sendall(frame)
        except OSError:
            pass
        finally:
            self.cut()
            self._thread_done()
