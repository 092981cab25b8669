"""Where the registry's metadata log is kept: a seam with two backends, each holding a
snapshot of the whole image and the batches of records written after it
(metadata_records.py), so recovery reads one snapshot and a bounded tail.

- `FileMetadataStore` (metadata_file_store.py, one gateway): an append-only framed file in
  the gateway's data dir, fsync'd before a change is acknowledged, and a snapshot file.
- `EtcdMetadataStore` (metadata_etcd_store.py, several gateways): each batch is keys whose
  etcd revision is its offset, written by a transaction that compares a small head key's
  revision with the offset the writer's image is at (etcd's compare-and-swap). A writer
  whose image is stale — another gateway wrote since — fails with `StaleRegistryError` and
  writes nothing; it must take the newer records before it decides again. This is how a
  deposed controller's writes are fenced, and what Kafka's partition-epoch check on
  AlterPartition becomes across gateways.

A controller's own decisions (fencing a node whose session expired, preferred-leader
rebalance) carry a `Fence` (coordination/election.py): the transaction also compares the
controller key's create revision with the one its election made, so a controller deposed
since — its lease expired while it was paused or cut off — writes nothing
(`ControllerFencedError`) and steps down.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from seglog.errors import SeglogError

from ..coordination.election import Fence
from .metadata_records import Record

# (offset, records): one batch; a store's load gives the snapshot's batch first (applied
# onto an empty image), then the tail in offset order.
Batch = tuple[int, list[Record]]
# A snapshot is taken once this many records were written after the last one.
DEFAULT_SNAPSHOT_INTERVAL_RECORDS = 20_000


class StaleRegistryError(SeglogError):
    """Another gateway changed the registry since this one last read it: nothing was
    written; take the newer state first."""

    retriable = True


class ControllerFencedError(StaleRegistryError):
    """A controller's decision refused: another gateway has been elected since."""


class MetadataStore(Protocol):
    # Bytes the last append wrote (the records as stored): what a change costs.
    last_write_bytes: int

    def load(self) -> list[Batch]:
        """The snapshot's batch (if any) then every later batch."""

    def append(self, records: list[Record], after_offset: int, fence: Fence | None = None) -> int:
        """Store one batch written by an image at `after_offset`; its offset. Raises
        StaleRegistryError (nothing written) when the log has moved past `after_offset`."""

    def wants_snapshot(self) -> bool:
        """Enough records were written since the last snapshot to take one."""

    def snapshot(self, offset: int, records: list[Record]) -> None:
        """Store the image at `offset` whole and drop the batches it covers."""

    def watch(
        self,
        on_batch: Callable[[int, list[Record]], None],
        on_reset: Callable[[list[Batch]], None],
    ) -> None:
        """Call `on_batch` for each batch another writer stores, in offset order, and
        `on_reset` with a whole fresh load when the stream of batches had to start over."""
