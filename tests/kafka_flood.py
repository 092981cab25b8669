"""Issue 52's flood of a gateway's Kafka listener, as tests and the benchmark drive it:
connections announcing a 100 MiB frame and then silent, idle TCP connections by the
thousand, and produce latency measured beside them (librdkafka and the gRPC client), with
what the gateway process pays for it (/proc: resident set, its peak, threads)."""

from __future__ import annotations

import socket
import ssl
import struct
import time
from collections.abc import Callable
from pathlib import Path

import confluent_kafka

MIB = 1024 * 1024
# A Produce v9 header's fixed fields (api key 0, version 9, correlation id 1, no client id):
# what a flooder sends after its size to look like a request.
PRODUCE_V9_HEADER = struct.pack(">hhih", 0, 9, 1, -1)
# A request an idle client sends once: ApiVersions v0, correlation id 1, client id "idle".
API_VERSIONS_V0 = struct.pack(">hhih", 18, 0, 1, 4) + b"idle"
FRAMED_API_VERSIONS_V0 = struct.pack(">i", len(API_VERSIONS_V0)) + API_VERSIONS_V0


def _split(address: str) -> tuple[str, int]:
    host, port = address.rsplit(":", 1)
    return host, int(port)


class Flood:
    """`large` connections each announcing `frame_bytes` (a Produce header, then nothing)
    and `idle` TCP connections from `idle_source` that send nothing (or, with `spoken`, one
    ApiVersions whose answer is left unread)."""

    def __init__(
        self,
        address: str,
        *,
        large: int = 3,
        frame_bytes: int = 100 * MIB,
        idle: int = 1000,
        idle_source: str = "127.0.0.2",
        large_source: str = "127.0.0.1",
        spoken: bool = False,
        wrap: Callable[[socket.socket], socket.socket] | None = None,
    ) -> None:
        self.address = address
        self.large_count, self.frame_bytes = large, frame_bytes
        self.idle_count, self.idle_source, self.large_source = idle, idle_source, large_source
        self.spoken = spoken
        self.wrap = wrap  # TLS for the large ones (a SASL_SSL listener)
        self.large: list[socket.socket] = []
        self.idle: list[socket.socket] = []
        self.refused = 0  # connections the listener would not take (closed or reset)

    def start(self) -> None:
        host, port = _split(self.address)
        for _ in range(self.large_count):
            sock = socket.create_connection((host, port), 10, (self.large_source, 0))
            if self.wrap is not None:
                sock = self.wrap(sock)
            try:
                sock.sendall(struct.pack(">i", self.frame_bytes) + PRODUCE_V9_HEADER)
            except OSError:
                self.refused += 1
            self.large.append(sock)
        for _ in range(self.idle_count):
            try:
                sock = socket.create_connection((host, port), 10, (self.idle_source, 0))
                if self.spoken:
                    sock.sendall(FRAMED_API_VERSIONS_V0)
            except OSError:
                self.refused += 1
                continue
            self.idle.append(sock)

    def large_closed(self) -> int:
        """How many of the large ones the listener has closed."""
        return sum(_closed(sock) for sock in self.large)

    def answered(self, timeout_s: float = 30.0) -> int:
        """With `spoken`: how many idle ones got their ApiVersions answer (read now)."""
        count = 0
        deadline = time.monotonic() + timeout_s
        for sock in self.idle:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                head = read_exactly(sock, 4)
                read_exactly(sock, struct.unpack(">i", head)[0])
                count += 1
            except (OSError, EOFError):
                pass
        return count

    def close(self) -> None:
        for sock in self.large + self.idle:
            sock.close()
        self.large, self.idle = [], []


def read_exactly(sock: socket.socket, size: int) -> bytes:
    """`size` bytes from a blocking socket; EOFError if it closes first."""
    out = bytearray()
    while len(out) < size:
        chunk = sock.recv(size - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return bytes(out)


def _closed(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except (BlockingIOError, ssl.SSLWantReadError):
        return False
    except OSError:
        return True  # reset
    finally:
        sock.setblocking(True)


def rdkafka_latencies(producer: confluent_kafka.Producer, topic: str, count: int) -> list[float]:
    """Seconds from produce to delivery report, one record at a time (acks as configured);
    a failed delivery raises."""
    samples = []
    errors: list[object] = []
    for i in range(count):
        started = time.perf_counter()
        producer.produce(topic, value=b"%d" % i, on_delivery=lambda err, _m: errors.append(err))
        if producer.flush(30) != 0:
            raise TimeoutError("a produce was not delivered in 30 s")
        samples.append(time.perf_counter() - started)
    failed = [error for error in errors if error is not None]
    if failed:
        raise AssertionError(f"{len(failed)} produces failed: {failed[0]}")
    return samples


def grpc_latencies(produce: Callable[[], None], count: int) -> list[float]:
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        produce()
        samples.append(time.perf_counter() - started)
    return samples


def p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def process_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (bytes) and Threads of a process."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0]) * 1024
        elif key == "Threads":
            found[key] = int(value)
    return found


def reset_peak(pid: int) -> None:
    """Linux: writing 5 resets the peak resident set (VmHWM) to the current one."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def raise_open_files_limit() -> None:
    """This process's soft limit on open files raised to its hard limit (10,000 sockets)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
