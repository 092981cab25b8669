"""What the gateway's etcd client passes around: a key's value as etcd answers it, a
subscriber's view of changes, and etcd's base64 keys and range ends (its JSON gateway takes
and gives keys and values base64-encoded)."""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_PREFIX = "/seglog"  # every key of one cluster lives under it


@dataclass(frozen=True)
class KeyValue:
    key: str  # without the prefix
    value: str
    mod_revision: int
    create_revision: int
    lease: int


# A subscriber's view of a change: key (without the prefix) -> its new value, None when
# deleted. `full`: the mapping is a snapshot of every key under the subscriber's prefix.
Changes = dict[str, KeyValue | None]
Subscriber = Callable[[Changes, bool], None]


def b64(data: str | bytes) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return base64.b64encode(raw).decode()


def unb64(data: str) -> str:
    return base64.b64decode(data).decode()


def range_end(prefix: str) -> str:
    """etcd's end of the range of keys starting with `prefix`."""
    raw = prefix.encode()
    return b64(raw[:-1] + bytes([raw[-1] + 1]))
