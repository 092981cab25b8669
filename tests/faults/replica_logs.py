"""The campaign's second judge: once every replica has caught up, the replicas of a
partition hold the same batches. Followers copy their leader's batches byte for byte, so
two replicas that hold different batches over the same offsets (a batch that starts, ends
or was written in another leader epoch elsewhere) went through two histories, which is how
an acknowledged record can later vanish. Read from the files alone, as Kafka's format lays
them out; nothing here imports seglog, so it cannot share a bug with what it judges.

A batch's header (Kafka's RecordBatch v2, the fields read here, big-endian):
    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 |
    crc uint32 | attributes int16 | lastOffsetDelta int32 | ...
batchLength counts the bytes after itself, so a batch takes 12 + batchLength bytes.

Replicas delete old segments on their own schedules, so only the offsets every replica
still holds are compared: from the highest first offset among them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

HEADER_READ_BYTES = 27  # up to and including lastOffsetDelta
LOG_OVERHEAD = 12  # baseOffset and batchLength


@dataclass(frozen=True)
class BatchHeader:
    base_offset: int
    last_offset: int
    leader_epoch: int
    crc: int

    def __str__(self) -> str:
        return f"{self.base_offset}-{self.last_offset}@e{self.leader_epoch}"


def read_batches(partition_dir: Path) -> list[BatchHeader]:
    """Every whole batch of the partition's segments, in offset order (segment files are
    named by their base offset, zero-padded, so their names sort in that order)."""
    found: list[BatchHeader] = []
    for segment in sorted(partition_dir.glob("*.log")):
        raw = segment.read_bytes()
        position = 0
        while position + HEADER_READ_BYTES <= len(raw):
            base_offset, batch_length, leader_epoch, _magic, crc, _attributes, last_delta = (
                struct.unpack_from(">qiibIhi", raw, position)
            )
            end = position + LOG_OVERHEAD + batch_length
            if batch_length <= 0 or end > len(raw):
                break  # preallocated zeros, or a tail cut short
            found.append(BatchHeader(base_offset, base_offset + last_delta, leader_epoch, crc))
            position = end
    return found


def compare_replicas(replicas: dict[int, list[BatchHeader]]) -> str | None:
    """None when the replicas hold the same batches over the offsets all of them hold;
    else where they first differ, each replica's batch there."""
    if len(replicas) < 2:
        return None
    start = max((batches[0].base_offset for batches in replicas.values() if batches), default=0)
    held = {
        node: [b for b in batches if b.base_offset >= start] for node, batches in replicas.items()
    }
    longest = max(len(batches) for batches in held.values())
    for index in range(longest):
        at = {
            node: batches[index] if index < len(batches) else None for node, batches in held.items()
        }
        if len(set(at.values())) > 1:
            shown = ", ".join(f"node {n}: {b or 'nothing'}" for n, b in sorted(at.items()))
            return f"batch {index} from offset {start} differs ({shown})"
    return None


def diverged_partitions(root: Path, topic: str, partitions: int, nodes: list[int]) -> list[str]:
    """For each partition whose replicas (the nodes' directories under `root`) differ, where."""
    problems = []
    for partition in range(partitions):
        replicas = {
            node: read_batches(root / f"node-{node}" / f"{topic}-{partition}")
            for node in nodes
            if (root / f"node-{node}" / f"{topic}-{partition}").is_dir()
        }
        difference = compare_replicas(replicas)
        if difference is not None:
            problems.append(f"{topic}-{partition}: replicas diverge: {difference}")
    return problems
