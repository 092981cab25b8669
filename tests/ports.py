"""Free loopback ports for servers the tests start as processes (containers, etcd, gateways
that must know each other's addresses before they start).

A port is picked before its server binds it, so something else may take it in between. Ports
the kernel hands out itself (a bind to port 0, every outgoing connection's local port) come
from its ephemeral range, and a full test run makes thousands of those: a port picked there
was taken by another worker's node or connection often enough to fail a run now and then. So
the ports are picked at random below that range, where only other pickers look; each is
checked free by binding it."""

from __future__ import annotations

import random
import socket
from pathlib import Path

# Below this, ports are often some system service's; above it and below the ephemeral range,
# only pickers like this one.
LOWEST_PICKED_PORT = 10_000
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_ATTEMPTS = 1000


def free_ports(count: int) -> list[int]:
    """`count` distinct ports free on 127.0.0.1 now (all bound at once, then released), below
    the kernel's ephemeral range when it leaves room for that."""
    highest = _ephemeral_low() - 1
    if highest - LOWEST_PICKED_PORT < 10 * count:
        return _kernel_picked(count)
    pick = random.SystemRandom().randint
    sockets: list[socket.socket] = []
    try:
        attempts = 0
        while len(sockets) < count:
            attempts += 1
            if attempts > _ATTEMPTS:
                raise RuntimeError(f"no {count} free ports below {highest + 1}")
            probe = socket.socket()
            try:
                probe.bind(("127.0.0.1", pick(LOWEST_PICKED_PORT, highest)))
            except OSError:  # in use (or another picker's, bound this very moment)
                probe.close()
                continue
            sockets.append(probe)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def free_port_run(count: int) -> int:
    """The first of `count` consecutive ports free on 127.0.0.1 now (for a setting that names
    one port and derives the rest), below the kernel's ephemeral range."""
    ephemeral_low = _ephemeral_low()
    # The whole run below the ephemeral range, when free_ports picks there at all.
    limit = ephemeral_low if ephemeral_low - LOWEST_PICKED_PORT >= 10 * count else 65536
    for _ in range(_ATTEMPTS):
        [first] = free_ports(1)
        if first + count > limit:
            continue
        sockets: list[socket.socket] = []
        try:
            for port in range(first, first + count):
                probe = socket.socket()
                sockets.append(probe)
                probe.bind(("127.0.0.1", port))
            return first
        except OSError:  # one of the run is in use: try another
            continue
        finally:
            for s in sockets:
                s.close()
    raise RuntimeError(f"no {count} consecutive free ports on loopback")


def _ephemeral_low() -> int:
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _kernel_picked(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()
