"""What the CLI adds when the gateway cannot be reached: the address it tried, what usually
causes it, and whether that address is a Kafka listener (Kafka's tools' habit of
`--bootstrap-server host:9092` points seglog's gRPC CLI at `make run`'s Kafka port, where the
gRPC handshake is just reset).

The probe is one Kafka ApiVersions v0 request, sent only after a call already failed:

    request:  int32 length | int16 api_key=18 | int16 api_version=0 | int32 correlation_id
              | int16 client_id length | client_id bytes
    answer:   int32 length | int32 correlation_id | ...

An answer carrying the same correlation id is a Kafka listener.
"""

from __future__ import annotations

import socket
import struct

from ..client.gateway import DEFAULT_PORT

PROBE_TIMEOUT_S = 1.0
_API_VERSIONS = 18
_CORRELATION_ID = 0x5E610C
_CLIENT_ID = b"seglog-cli-probe"


def _host_port(bootstrap: str) -> tuple[str, int]:
    first = bootstrap.split(",")[0].strip()
    host, sep, port = first.rpartition(":")
    if not sep or host.endswith(":") or not port.isdigit():  # no port, or a bare IPv6 address
        return first.strip("[]"), DEFAULT_PORT
    return host.strip("[]"), int(port)


def speaks_kafka(host: str, port: int, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Whether host:port answers Kafka's ApiVersions (see the module's docstring)."""
    body = struct.pack(">hhih", _API_VERSIONS, 0, _CORRELATION_ID, len(_CLIENT_ID)) + _CLIENT_ID
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as conn:
            conn.sendall(struct.pack(">i", len(body)) + body)
            answer = b""
            while len(answer) < 8:
                chunk = conn.recv(8 - len(answer))
                if not chunk:
                    return False
                answer += chunk
    except OSError:
        return False
    correlation_id: int = struct.unpack(">ii", answer)[1]
    return correlation_id == _CORRELATION_ID


def _accepts(host: str, port: int, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def hint(bootstrap: str) -> str | None:
    """One line on what to check when a call through the gateway at `bootstrap` failed as
    unavailable; None when the address takes connections and is no Kafka listener (the
    gateway answered: what was unavailable is behind it, and the error says what)."""
    host, port = _host_port(bootstrap)
    if not _accepts(host, port):
        return (
            f"is the cluster running at {host}:{port}? (`make run` starts one at "
            f"127.0.0.1:{DEFAULT_PORT}; --bootstrap-server or SEGLOG_BOOTSTRAP names another)"
        )
    if speaks_kafka(host, port):
        return (
            f"{host}:{port} is a Kafka listener: seglog's CLI speaks gRPC to the gateway "
            f"(make run: 127.0.0.1:{DEFAULT_PORT}); Kafka's own tools use this port"
        )
    return None
