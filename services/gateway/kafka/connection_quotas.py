"""How many Kafka connections the listener keeps open, in all and per client address, as
Kafka's broker counts them (its ConnectionQuotas): `max.connections` over every connection,
`max.connections.per.ip` per peer address, and `max.connections.per.ip.overrides` naming
addresses that may have more or fewer (Kafka's syntax: `host:count,host:count`; a host is
an IP address or a name, resolved once when the listener starts). A connection past a bound
is closed as soon as it is accepted, before a byte of it is read.

The acceptor threads count a connection in; the network thread that closes it counts it out.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from dataclasses import dataclass, field

# Kafka's default is Int.MaxValue (unbounded). seglog's listener keeps 10,000 connections
# by default (they cost a selector entry and a few KiB each, not a thread), and one address
# may hold a tenth of them, so it takes ten hosts to fill the listener while a host running
# many clients (one connection per client per lane) is far from its bound.
DEFAULT_MAX_CONNECTIONS = 10_000
DEFAULT_MAX_CONNECTIONS_PER_IP = 1_000


def parse_overrides(text: str) -> dict[str, int]:
    """`host:count,host:count` (Kafka's max.connections.per.ip.overrides) into {host: count};
    ValueError naming the part that is not of that form. An IPv6 address is written bare or
    in brackets: the count is after its last colon."""
    overrides: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        host, sep, count = part.rpartition(":")
        host = host.strip().removeprefix("[").removesuffix("]")
        if not sep or not host or not count.strip().isdigit():
            raise ValueError(
                f"max.connections.per.ip.overrides: {part!r} is not host:count "
                f"(e.g. 10.0.0.7:2000,client.example:50)"
            )
        overrides[host] = int(count)
    return overrides


def _addresses_of(host: str) -> list[str]:
    """The IP addresses a host of the overrides stands for (itself when it is one)."""
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError:
        return []  # a name that does not resolve overrides nobody
    return sorted({str(info[4][0]) for info in infos})


@dataclass
class ConnectionQuotas:
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_connections_per_ip: int = DEFAULT_MAX_CONNECTIONS_PER_IP
    overrides: dict[str, int] = field(default_factory=dict)
    _by_ip: dict[str, int] = field(default_factory=dict, init=False)
    _total: int = field(default=0, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def __post_init__(self) -> None:
        self._limits = {
            address: count
            for host, count in self.overrides.items()
            for address in _addresses_of(host)
        }

    def limit_for(self, ip: str) -> int:
        return self._limits.get(ip, self.max_connections_per_ip)

    def try_open(self, ip: str) -> str | None:
        """Counts a new connection from `ip` in; None when it may stay, else the setting it
        is past (the connection is then not counted)."""
        with self._lock:
            if self._total >= self.max_connections:
                return f"{self._total} open (max.connections)"
            held = self._by_ip.get(ip, 0)
            if held >= self.limit_for(ip):
                return f"{held} open from {ip} (max.connections.per.ip)"
            self._by_ip[ip] = held + 1
            self._total += 1
            return None

    def closed(self, ip: str) -> None:
        with self._lock:
            held = self._by_ip.pop(ip, 0) - 1
            if held > 0:
                self._by_ip[ip] = held
            self._total -= 1

    @property
    def total(self) -> int:
        return self._total

    def open_from(self, ip: str) -> int:
        return self._by_ip.get(ip, 0)
