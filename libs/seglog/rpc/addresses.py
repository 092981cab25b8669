"""Checking a `host:port` address a peer hands over (a node's gRPC or bulk listener) before
anything dials it: a malformed one is the caller's error, found when it arrives, not a
thread's crash later when something connects."""

from __future__ import annotations

from ..errors import InvalidRequestError

MAX_ADDRESS_CHARS = 1024


def check_host_port(address: str, what: str) -> None:
    """InvalidRequestError unless `address` is `host:port` (IPv6 hosts in brackets) with a
    port from 1 to 65535; `what` names it in the message."""
    host, sep, port = address.rpartition(":")
    if (
        not sep
        or not host
        or len(address) > MAX_ADDRESS_CHARS
        or not port.isascii()
        or not port.isdigit()
        or not 0 < int(port) < 65536
        or any(c.isspace() for c in host)
    ):
        raise InvalidRequestError(f"{what} {address[:80]!r} is not host:port")
