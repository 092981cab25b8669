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

A controller's own decisions (fencing a node whose session expired, preferred-leader
rebalance) carry a `Fence` (coordination/election.py): the transaction also compares the
controller key's create revision with the one its election made, so a controller deposed
since — its lease expired while it was paused or cut off — writes nothing
(`ControllerFencedError`) and steps down.

The etcd client is etcd3gw (etcd's JSON gateway, /v3/ over HTTP, etcd_keyspace.py): it needs
no generated protobuf code, so it cannot clash with the protobuf the project pins.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from seglog.errors import SeglogError
from seglog.storage.log_files import atomic_write

from ..coordination.election import Fence
from ..coordination.etcd_keyspace import Changes, EtcdKeyspace

logger = logging.getLogger(__name__)

State = dict[str, Any]


class StaleRegistryError(SeglogError):
    """Another gateway changed the registry since this one last read it: nothing was
    written; take the newer state first."""

    retriable = True


class ControllerFencedError(StaleRegistryError):
    """A controller's decision refused: another gateway has been elected since."""


class RegistryStore(Protocol):
    revision: int  # of the state last loaded, saved or adopted from a watch

    def load(self) -> State | None:
        """The stored state, or None when nothing was stored yet."""

    def save(self, state: State, fence: Fence | None = None) -> None:
        """Store `state` whole, or raise StaleRegistryError (nothing written)."""

    def watch(self, on_change: Callable[[State, int], None]) -> None:
        """Call `on_change(state, revision)` when any writer changes the stored state; the
        caller adopts it (sets `revision`) under the same lock as its saves."""


class FileRegistryStore:
    """registry.json in the gateway's data dir: the only writer is this process."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.revision = 0
        path.parent.mkdir(parents=True, exist_ok=True)

    def load(self) -> State | None:
        if not self.path.exists():
            return None
        state: State = json.loads(self.path.read_text())
        return state

    def save(self, state: State, fence: Fence | None = None) -> None:
        atomic_write(self.path, _encode(state))

    def watch(self, on_change: Callable[[State, int], None]) -> None:
        """Nothing else writes the file."""


class EtcdRegistryStore:
    KEY = "registry"

    def __init__(self, keyspace: EtcdKeyspace) -> None:
        self.keyspace = keyspace
        self.revision = 0  # the key's mod revision this store last saw; 0: absent

    def load(self) -> State | None:
        found = self.keyspace.get(self.KEY)
        if found is None:
            self.revision = 0
            return None
        self.revision = found.mod_revision
        state: State = json.loads(found.value)
        return state

    def save(self, state: State, fence: Fence | None = None) -> None:
        compare = [self.keyspace.compare_modified(self.KEY, self.revision)]
        failure: list[dict[str, Any]] = []
        if fence is not None:
            compare.append(self.keyspace.compare_created(fence.key, fence.create_revision))
            failure.append(self.keyspace.range_op(fence.key))
        answer = self.keyspace.txn(
            compare, [self.keyspace.put_op(self.KEY, _encode(state).decode())], failure
        )
        if not answer.get("succeeded"):
            if fence is not None:
                current = self.keyspace.txn_ranges(answer)
                if not current or current[0].create_revision != fence.create_revision:
                    raise ControllerFencedError(
                        f"this gateway's controller election (revision "
                        f"{fence.create_revision}) is over: another gateway is controller; "
                        "its decision was not stored"
                    )
            raise StaleRegistryError(
                f"the registry changed since revision {self.revision}: another gateway "
                "wrote it; this change was not stored"
            )
        self.revision = int(answer["header"]["revision"])

    def watch(self, on_change: Callable[[State, int], None]) -> None:
        def changed(changes: Changes, full: bool) -> None:
            found = changes.get(self.KEY)
            if found is not None and found.value:
                on_change(json.loads(found.value), found.mod_revision)

        self.keyspace.subscribe(self.KEY, changed)


def _encode(state: State) -> bytes:
    return json.dumps(state, indent=1, sort_keys=True).encode()
