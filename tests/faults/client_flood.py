"""A flood of a gateway's client listeners by clients that never finish what they start, as
a stranger can: connections and memory.

- Stalled gRPC calls: raw HTTP/2 connections, each opening several Produce calls whose gRPC
  message header announces a large request and then sending only its first bytes. gRPC's
  Python server reads a unary request on one of its pool's threads, so each such call holds
  a server thread (and a slot of max.concurrent.requests) for as long as it stalls: past the
  server's 32 threads, every later call on that listener queues behind them.
- Large gRPC Produce calls: callers looping Produce requests of `produce_bytes`, each held
  in (or refused by) the gateway's request-memory pool (queued.max.request.bytes) when
  they are larger than what it has free.
- Kafka connections each announcing a frame of `kafka_frame_bytes` and sending nothing
  more (a listener that reserves the announced size before reading the body holds it; one
  that refuses such frames before authentication closes the connection).

All of it is held until `release()`, which closes every connection and stops the callers.
Real sockets on loopback; the HTTP/2 framing is written here (RFC 7540: 9-byte frame
headers; RFC 7541: header fields as literals without indexing), since no client library
sends half a message.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from seglog.v1 import common_pb2

MIB = 1024 * 1024
_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_DATA, _HEADERS, _SETTINGS, _PING, _GOAWAY = 0x0, 0x1, 0x4, 0x6, 0x7
_END_HEADERS, _ACK = 0x4, 0x1
_PRODUCE_PATH = "/seglog.v1.Gateway/Produce"
# What a stalled call sends of its announced request before it stalls.
_STALLED_PREFIX_BYTES = 1024
_CONNECT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class FloodShape:
    """How much of each: the defaults hold every one of a gateway's 32 gRPC server threads
    twice over, a 256 MiB request pool (Kafka frames announcing 100 MiB) and more."""

    stalled_connections: int = 8
    stalled_calls_per_connection: int = 8
    stalled_announced_bytes: int = 64 * MIB
    produce_callers: int = 8
    produce_bytes: int = 4 * MIB
    kafka_connections: int = 4
    kafka_frame_bytes: int = 100 * MIB


def _frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload))[1:] + struct.pack(">BBI", kind, flags, stream) + payload


def _literal(name: str, value: str) -> bytes:
    """An HPACK literal header field without indexing, new name, no Huffman coding (the
    names and values here are shorter than 127 bytes, one length byte each)."""
    out = bytearray([0x00])
    for text in (name.encode(), value.encode()):
        assert len(text) < 127
        out += bytes([len(text)]) + text
    return bytes(out)


class _StalledConnection:
    """One HTTP/2 connection holding `calls` Produce calls open with half-sent requests; a
    thread answers the server's SETTINGS and PINGs so the connection stays up."""

    def __init__(self, address: str, calls: int, announced_bytes: int) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=_CONNECT_TIMEOUT_S)
        self.sock.settimeout(None)
        self.opened = 0
        self.goaway = False
        self._lock = threading.Lock()
        fields = b"".join(
            _literal(name, value)
            for name, value in (
                (":method", "POST"),
                (":scheme", "http"),
                (":path", _PRODUCE_PATH),
                (":authority", address),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
            )
        )
        out = [_PREFACE, _frame(_SETTINGS, 0, 0, b"")]
        for i in range(calls):
            stream = 2 * i + 1
            message = struct.pack(">BI", 0, announced_bytes) + b"\0" * _STALLED_PREFIX_BYTES
            out += [
                _frame(_HEADERS, _END_HEADERS, stream, fields),
                _frame(_DATA, 0, stream, message),
            ]
        self._send(b"".join(out))
        self.opened = calls
        self._reader = threading.Thread(target=self._read, name="flood-h2-reader", daemon=True)
        self._reader.start()

    def _send(self, data: bytes) -> None:
        with self._lock:
            self.sock.sendall(data)

    def _read(self) -> None:
        buffer = b""
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return
                buffer += chunk
                while len(buffer) >= 9:
                    length = int.from_bytes(buffer[:3], "big")
                    if len(buffer) < 9 + length:
                        break
                    kind, flags = buffer[3], buffer[4]
                    payload = buffer[9 : 9 + length]
                    buffer = buffer[9 + length :]
                    if kind == _SETTINGS and not flags & _ACK:
                        self._send(_frame(_SETTINGS, _ACK, 0, b""))
                    elif kind == _PING and not flags & _ACK:
                        self._send(_frame(_PING, _ACK, 0, payload))
                    elif kind == _GOAWAY:
                        self.goaway = True
        except OSError:
            return  # closed by release() or by the server

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self._reader.join(timeout=5)


class ClientFlood:
    """Started on construction (`grpc_address`: a gateway's clients' gRPC listener;
    `kafka_address`: its Kafka listener, or None); `release()` ends it."""

    def __init__(
        self,
        grpc_address: str,
        kafka_address: str | None = None,
        shape: FloodShape = FloodShape(),
        *,
        produce_topic: str = "flood-no-such-topic",
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        self.shape = shape
        self.grpc_address = grpc_address
        self.produce_topic = produce_topic
        self.credentials = credentials
        self.stalled: list[_StalledConnection] = []
        self.kafka: list[socket.socket] = []
        self.refused = 0  # connections the gateway would not take
        self.produce_calls = 0
        self.produce_failures: dict[str, int] = {}
        self._stop = threading.Event()
        self._callers: list[threading.Thread] = []
        self._counts = threading.Lock()
        try:
            if credentials is None:  # raw HTTP/2 is written here in plaintext only
                for _ in range(shape.stalled_connections):
                    self._try(
                        lambda: self.stalled.append(
                            _StalledConnection(
                                grpc_address,
                                shape.stalled_calls_per_connection,
                                shape.stalled_announced_bytes,
                            )
                        )
                    )
            if kafka_address is not None:
                for _ in range(shape.kafka_connections):
                    self._try(lambda: self.kafka.append(self._announce(kafka_address)))
            for i in range(shape.produce_callers):
                caller = threading.Thread(target=self._produce_loop, name=f"flood-produce-{i}")
                caller.daemon = True
                caller.start()
                self._callers.append(caller)
        except BaseException:
            self.release()
            raise

    def _try(self, open_one: Callable[[], None]) -> None:
        try:
            open_one()
        except OSError:
            self.refused += 1

    def _announce(self, address: str) -> socket.socket:
        """A Kafka connection that announces a frame of kafka_frame_bytes and a Produce v9
        request header's first bytes, then sends nothing more."""
        host, port = address.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)), timeout=_CONNECT_TIMEOUT_S)
        sock.sendall(struct.pack(">ihh", self.shape.kafka_frame_bytes, 0, 9))
        return sock

    def _produce_loop(self) -> None:
        """Produce calls of produce_bytes, one after another until released (each answered
        or refused within a few seconds)."""
        request = common_pb2.ProduceRequest(topic=self.produce_topic, acks=1, timeout_ms=1000)
        request.partitions.add(partition=0, records=b"\0" * self.shape.produce_bytes)
        payload = request.SerializeToString()
        options = [("grpc.max_send_message_length", -1), ("grpc.use_local_subchannel_pool", 1)]
        if self.credentials is None:
            channel = grpc.insecure_channel(self.grpc_address, options=options)
        else:
            channel = grpc.secure_channel(self.grpc_address, self.credentials, options=options)
        produce = channel.unary_unary(
            _PRODUCE_PATH,
            request_serializer=lambda raw: raw,
            response_deserializer=common_pb2.ProduceResponse.FromString,
        )
        with channel:
            while not self._stop.is_set():
                try:
                    produce(payload, timeout=3)
                    outcome = "answered"
                except grpc.RpcError as exc:
                    outcome = exc.code().name
                with self._counts:
                    self.produce_calls += 1
                    self.produce_failures[outcome] = self.produce_failures.get(outcome, 0) + 1
                self._stop.wait(0.01)

    def kafka_connections_open(self) -> int:
        """Kafka connections still held (the gateway has not closed them)."""
        open_now = 0
        for sock in self.kafka:
            sock.setblocking(False)
            try:
                open_now += sock.recv(1, socket.MSG_PEEK) != b""
            except BlockingIOError:
                open_now += 1
            except OSError:
                pass
            finally:
                sock.setblocking(True)
        return open_now

    def summary(self) -> str:
        return (
            f"{sum(c.opened for c in self.stalled)} stalled gRPC calls on "
            f"{len(self.stalled)} connections, {len(self.kafka)} Kafka connections announcing "
            f"{self.shape.kafka_frame_bytes // MIB} MiB ({self.kafka_connections_open()} still "
            f"open), {self.produce_calls} produce calls of {self.shape.produce_bytes // MIB} MiB "
            f"{dict(sorted(self.produce_failures.items()))}, {self.refused} connections refused"
        )

    def release(self) -> None:
        self._stop.set()
        for caller in self._callers:
            caller.join(timeout=10)
        for connection in self.stalled:
            connection.close()
        for sock in self.kafka:
            sock.close()
