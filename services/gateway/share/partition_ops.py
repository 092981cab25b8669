"""What a ShareFetch or ShareAcknowledge does to one share partition's state, as calls the
share core makes whichever gateway holds the partition: `LocalOps` on the holder (the state
in this gateway's memory, written to __share_group_state before any answer), `ShareRouter`
choosing it or the holder's forwarding client (forwarding.py) per partition.

Every change is all or nothing: the state is snapshotted, changed, written; a failed write
puts the snapshot back, so what a client was told is what the log holds. Records a change
archives as failed deliveries go to the group's dead-letter topic first (dead_letters.py):
an acknowledgement whose dead letters could not be written fails like a failed state write;
those archived by a lapsed lock or a member gone wait on the partition for its next fetch,
persisted meanwhile as archiving (archiving.py), so a gateway taking over writes them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol

from seglog.errors import SeglogError

from .dead_letters import DeadLetterQueue
from .partition_states import PartitionId, PartitionStates
from .share_partition import AcquiredRange, FetchedBatch, SharePartition

logger = logging.getLogger(__name__)


class AckBatch(NamedTuple):
    first_offset: int
    last_offset: int
    types: tuple[int, ...]  # one for the whole range, or one per offset


class Prepared(NamedTuple):
    """Where a fetch for the partition reads from (None: its window is full) and its stored
    bytes per record so far (0.0: not known yet)."""

    fetch_offset: int | None
    bytes_per_record: float


class ShareStart(NamedTuple):
    """A share partition's start offset and its in-flight records already done with (Kafka's
    deliveryCompleteCount), what DescribeShareGroupOffsets' lag is counted from."""

    start_offset: int
    delivery_complete_count: int


class PartitionOps(Protocol):
    def prepare(self, pid: PartitionId) -> Prepared: ...

    def acquire(
        self,
        pid: PartitionId,
        member_id: str,
        fetch_offset: int,
        batches: Sequence[FetchedBatch],
        max_records: int,
        bytes_seen: int,
    ) -> list[AcquiredRange]: ...

    def acknowledge(self, pid: PartitionId, member_id: str, acks: Sequence[AckBatch]) -> None: ...

    def release_member(self, pid: PartitionId, member_id: str) -> None: ...

    def start_offsets(self, group_id: str) -> dict[tuple[str, int], ShareStart]: ...

    def reset_start(self, pid: PartitionId, start_offset: int | None) -> None: ...


class LocalOps:
    """The operations on partitions this gateway holds."""

    def __init__(
        self, states: PartitionStates, dead_letters: DeadLetterQueue | None = None
    ) -> None:
        self.states = states
        self.dead_letters = dead_letters

    def _write_dead_letters(self, pid: PartitionId, partition: SharePartition) -> None:
        """Write the partition's pending dead letters (the caller holds its lock); on a
        failure they stay pending and the error is raised."""
        letters = partition.dead_letters
        if not letters or self.dead_letters is None:
            partition.dead_letters = []
            return
        partition.dead_letters = []
        try:
            self.dead_letters.write(pid, letters)
        except SeglogError:
            partition.dead_letters = letters + partition.dead_letters
            raise

    def _try_dead_letters(self, pid: PartitionId, partition: SharePartition) -> None:
        try:
            self._write_dead_letters(pid, partition)
        except SeglogError as exc:
            logger.warning("dead letters of %s kept for the next try: %s", pid, exc)

    def prepare(self, pid: PartitionId) -> Prepared:
        partition = self.states.get(pid)
        with partition.lock:
            partition.expire_locks(time.monotonic())
            self._try_dead_letters(pid, partition)
            return Prepared(partition.next_fetch_offset(), partition.bytes_per_record)

    def acquire(
        self,
        pid: PartitionId,
        member_id: str,
        fetch_offset: int,
        batches: Sequence[FetchedBatch],
        max_records: int,
        bytes_seen: int,
    ) -> list[AcquiredRange]:
        partition = self.states.get(pid)
        spanned = sum(b.last_offset - b.base_offset + 1 for b in batches)
        with partition.lock:
            if spanned:
                seen = bytes_seen / spanned
                partition.bytes_per_record = (
                    seen
                    if not partition.bytes_per_record
                    else (partition.bytes_per_record + seen) / 2
                )
            saved = partition.snapshot()
            acquired = partition.acquire(
                member_id, fetch_offset, batches, max_records, time.monotonic()
            )
            if acquired:
                try:
                    # Written before the records go out: a delivery is counted even if
                    # this gateway dies before the consumer acknowledges.
                    self.states.persist(pid, partition)
                except SeglogError:
                    partition.restore(saved)
                    raise
            return acquired

    def acknowledge(self, pid: PartitionId, member_id: str, acks: Sequence[AckBatch]) -> None:
        partition = self.states.get(pid)
        with partition.lock:
            saved, pending = partition.snapshot(), list(partition.dead_letters)
            try:
                now = time.monotonic()
                for batch in acks:
                    partition.acknowledge(
                        member_id, batch.first_offset, batch.last_offset, batch.types, now
                    )
                self._write_dead_letters(pid, partition)
                self.states.persist(pid, partition)
            except SeglogError:
                partition.restore(saved)
                partition.dead_letters = pending
                raise

    def release_member(self, pid: PartitionId, member_id: str) -> None:
        partition = self.states.get(pid)
        with partition.lock:
            partition.release_member(member_id)
            self._try_dead_letters(pid, partition)

    def reset_start(self, pid: PartitionId, start_offset: int | None) -> None:
        self.states.reset(pid, start_offset)

    def start_offsets(self, group_id: str) -> dict[tuple[str, int], ShareStart]:
        """The start offset of each of the group's share partitions loaded here."""
        found = {}
        for (_, topic, index), p in self.states.of_group(group_id):
            with p.lock:
                found[(topic, index)] = ShareStart(p.start_offset, p.delivery_complete_count())
        return found


class ShareRouter:
    """Each partition's operations where it is held: here (`local`) when `holder_of(pid)`
    says "" (this gateway), else through `remote(address)`; `peers()`: the other gateways'
    peer servers (each holds some of a group's partitions)."""

    def __init__(
        self,
        local: LocalOps,
        holder_of: Callable[[PartitionId], str] = lambda pid: "",
        remote: Callable[[str], PartitionOps] | None = None,
        peers: Callable[[], list[str]] = list,
    ) -> None:
        self.local = local
        self.holder_of = holder_of
        self.remote = remote
        self.peers = peers

    def ops_for(self, pid: PartitionId) -> PartitionOps:
        address = self.holder_of(pid)
        if not address or self.remote is None:
            return self.local
        return self.remote(address)

    def prepare(self, pid: PartitionId) -> Prepared:
        return self.ops_for(pid).prepare(pid)

    def acquire(
        self,
        pid: PartitionId,
        member_id: str,
        fetch_offset: int,
        batches: Sequence[FetchedBatch],
        max_records: int,
        bytes_seen: int,
    ) -> list[AcquiredRange]:
        return self.ops_for(pid).acquire(
            pid, member_id, fetch_offset, batches, max_records, bytes_seen
        )

    def acknowledge(self, pid: PartitionId, member_id: str, acks: Sequence[AckBatch]) -> None:
        self.ops_for(pid).acknowledge(pid, member_id, acks)

    def release_member(self, pid: PartitionId, member_id: str) -> None:
        self.ops_for(pid).release_member(pid, member_id)

    def reset_start(self, pid: PartitionId, start_offset: int | None) -> None:
        self.ops_for(pid).reset_start(pid, start_offset)

    def start_offsets(self, group_id: str) -> dict[tuple[str, int], ShareStart]:
        """The group's share partitions' start offsets, from this gateway and every other
        live one (a gateway not answering is left out: its partitions are taken over and
        answered again once their holder is gone)."""
        found = self.local.start_offsets(group_id)
        if self.remote is None:
            return found
        for address in self.peers():
            try:
                found.update(self.remote(address).start_offsets(group_id))
            except SeglogError as exc:
                logger.info("share start offsets of %s from %s: %s", group_id, address, exc)
        return found
