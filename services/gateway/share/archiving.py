"""Records archived as failed deliveries whose dead letters are not yet written stay
*archiving* in __share_group_state (KIP-1191's ARCHIVING step before ARCHIVED): they are
written as AVAILABLE with their delivery count, which is at the group's delivery count limit,
and the start offset is kept at or below them, until the dead-letter write is confirmed. A
gateway taking the partition over after the holder's death reads them back as reached the
limit, archives them and writes their dead letters again (SharePartition.from_state): a dead
letter is written at least once, never lost with the holder.

What the holder has in memory is unchanged (archived, the start offset moved past them): only
what is persisted says "archiving". Offsets between the persisted start and the in-memory one
that are not pending are written ACKNOWLEDGED (done with, whichever way): Kafka's state names
every in-flight offset it does not treat as never delivered."""

from __future__ import annotations

from .share_partition import ACKNOWLEDGED, AVAILABLE, SharePartition, StateBatch
from .state_formats import laid_over


def persisted_start_offset(partition: SharePartition) -> int:
    """The start offset to persist: at or below every pending dead letter."""
    return min([partition.start_offset, *(d.first_offset for d in partition.dead_letters)])


def persisted_batches(partition: SharePartition) -> list[StateBatch]:
    """The state batches to persist: the partition's own, with its pending dead letters'
    ranges laid over them as archiving (a range per letter, never per record)."""
    batches = partition.state_batches()
    if not partition.dead_letters:
        return batches
    start = persisted_start_offset(partition)
    head = []
    if start < partition.start_offset:
        head.append(StateBatch(start, partition.start_offset - 1, ACKNOWLEDGED, 1))
    pending = [
        StateBatch(d.first_offset, d.last_offset, AVAILABLE, d.delivery_count)
        for d in partition.dead_letters
    ]
    return laid_over([*head, *batches], pending)
