"""Where the registry's state lives: one JSON document, read whole at start and written
whole after every change, through a store with two backends.

- `FileRegistryStore` (the default, one gateway): `registry.json` in the gateway's data dir,
  replaced atomically (write, fsync, rename).
- `EtcdRegistryStore` (several gateways): the document is the key `<prefix>/registry` of an
  etcd v3 cluster, written only by a transaction that compares the key's mod revision with
  the one this store last read or wrote (etcd's compare-and-swap). A writer whose state is
  stale — another gateway wrote since — fails with `StaleRegistryError` and writes nothing;
  it must take the newer state (pushed by `watch`) before it decides again. This is how a
  deposed controller's writes are fenced, and what Kafka's partition-epoch check on
  AlterPartition becomes across gateways. The registry is small (topics, assignments,
  nodes, ACLs, producer-id blocks: kilobytes per thousand partitions), so one document is
  read and written whole, as the file is.

The etcd client is etcd3gw (etcd's JSON gateway, /v3/ over HTTP): it needs no generated
protobuf code, so it cannot clash with the protobuf the project pins.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from seglog.errors import SeglogError
from seglog.storage.log_files import atomic_write

logger = logging.getLogger(__name__)

State = dict[str, Any]


class StaleRegistryError(SeglogError):
    """Another gateway changed the registry since this one last read it: nothing was
    written; take the newer state first."""


class RegistryStore(Protocol):
    def load(self) -> State | None:
        """The stored state, or None when nothing was stored yet."""

    def save(self, state: State) -> None:
        """Store `state` whole, or raise StaleRegistryError (nothing written)."""

    def watch(self, on_change: Callable[[State], None]) -> None:
        """Call `on_change` with the state each time another writer changes it."""

    def close(self) -> None: ...


class FileRegistryStore:
    """registry.json in the gateway's data dir: the only writer is this process."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def load(self) -> State | None:
        if not self.path.exists():
            return None
        state: State = json.loads(self.path.read_text())
        return state

    def save(self, state: State) -> None:
        atomic_write(self.path, _encode(state))

    def watch(self, on_change: Callable[[State], None]) -> None:
        """Nothing else writes the file."""

    def close(self) -> None:
        pass


class EtcdRegistryStore:
    def __init__(self, endpoint: str, prefix: str = "/seglog", *, timeout_s: float = 5.0) -> None:
        from etcd3gw.client import Etcd3Client

        host, _, port = endpoint.removeprefix("http://").rpartition(":")
        self.key = f"{prefix.rstrip('/')}/registry"
        self.client = Etcd3Client(host=host or "127.0.0.1", port=int(port), timeout=timeout_s)
        self._lock = threading.Lock()
        self._revision = 0  # the key's mod revision this store last saw; 0: absent
        self._cancel_watch: Callable[[], None] | None = None

    def load(self) -> State | None:
        found = self.client.get(self.key, metadata=True)
        with self._lock:
            if not found:
                self._revision = 0
                return None
            value, metadata = found[0]
            self._revision = int(metadata["mod_revision"])
        state: State = json.loads(value)
        return state

    def save(self, state: State) -> None:
        with self._lock:
            expected = self._revision
            compare: dict[str, Any] = {"key": _b64(self.key), "target": "MOD", "result": "EQUAL"}
            compare["mod_revision"] = str(expected)
            txn = {
                "compare": [compare],
                "success": [
                    {"request_put": {"key": _b64(self.key), "value": _b64(_encode(state))}}
                ],
                "failure": [],
            }
            answer = self.client.transaction(txn)
            if not answer.get("succeeded"):
                raise StaleRegistryError(
                    f"the registry at {self.key} changed since revision {expected}: another "
                    "gateway wrote it; this change was not stored"
                )
            self._revision = int(answer["header"]["revision"])

    def watch(self, on_change: Callable[[State], None]) -> None:
        """Every change by another writer (its revision differs from this store's own),
        pushed from etcd's watch on the key; this store's revision moves with it."""
        events, cancel = self.client.watch(self.key)
        self._cancel_watch = cancel

        def pump() -> None:
            for event in events:
                kv = event.get("kv", {})
                revision = int(kv.get("mod_revision", 0))
                with self._lock:
                    if revision <= self._revision:
                        continue  # this store's own write, or older
                    self._revision = revision
                if kv.get("value"):  # etcd3gw hands it over decoded
                    on_change(json.loads(kv["value"]))

        threading.Thread(target=pump, name="registry-watch", daemon=True).start()

    def close(self) -> None:
        if self._cancel_watch is not None:
            self._cancel_watch()
            self._cancel_watch = None


def _encode(state: State) -> bytes:
    return json.dumps(state, indent=1, sort_keys=True).encode()


def _b64(data: str | bytes) -> str:
    """Keys and values as etcd's JSON gateway takes them."""
    raw = data.encode() if isinstance(data, str) else data
    return base64.b64encode(raw).decode()
