"""What a share partition persists while dead letters are pending (share/archiving.py): the
archived-at-the-limit records stay "archiving" (available at the limit, the start offset at or
below them) until their dead letters are written, and a partition read back from that state
archives them again with their dead letters pending; once written, they persist archived."""

from __future__ import annotations

from services.gateway.share.archiving import persisted_batches, persisted_start_offset
from services.gateway.share.share_partition import (
    ACCEPT,
    ACKNOWLEDGED,
    ARCHIVED,
    AVAILABLE,
    DeadLetter,
    FetchedBatch,
    PartitionLimits,
    SharePartition,
    StateBatch,
)

LIMITS = PartitionLimits(lock_duration_s=1.0, delivery_count_limit=2, max_record_locks=100)


def held_to_the_limit() -> SharePartition:
    """Offsets 0..9 fetched; 0..4 lapse twice (archived at the limit), 5..9 accepted."""
    p = SharePartition(LIMITS, 0)
    now = 0.0
    for _ in range(2):
        p.acquire("m", 0, [FetchedBatch(0, 9, False)], 5, now)
        now += 2
        p.expire_locks(now)
    p.acquire("m", 5, [FetchedBatch(0, 9, False)], 5, now)
    p.acknowledge("m", 5, 9, (ACCEPT,), now)
    return p


def test_pending_dead_letters_persist_as_archiving_and_are_archived_again_when_read_back():
    p = held_to_the_limit()
    assert p.start_offset == 10  # in memory: done with
    assert p.dead_letters == [DeadLetter(0, 4, 2, False)]
    assert persisted_start_offset(p) == 0
    written = persisted_batches(p)
    assert written == [
        StateBatch(0, 4, AVAILABLE, 2),  # archiving: at the limit, not yet dead-lettered
        StateBatch(5, 9, ACKNOWLEDGED, 1),
    ]
    again = SharePartition.from_state(LIMITS, persisted_start_offset(p), written, 0)
    assert again.dead_letters == [DeadLetter(0, 4, 2, False)]
    assert again.start_offset == 10
    assert again.next_fetch_offset() == 10  # never delivered again


def test_once_written_they_persist_archived():
    p = held_to_the_limit()
    p.dead_letters = []  # what partition_ops does once the dead-letter topic took them
    assert persisted_start_offset(p) == 10
    assert persisted_batches(p) == []
    p = SharePartition(LIMITS, 0)
    p.acquire("m", 0, [FetchedBatch(0, 3, False)], 4, 0.0)
    p.acknowledge("m", 0, 1, (ACCEPT,), 0.0)
    p.dead_letters = [DeadLetter(2, 3, 2, False)]  # within the window: laid over its runs
    p.runs.runs[-1].state = ARCHIVED
    assert persisted_batches(p) == [
        StateBatch(2, 3, AVAILABLE, 2),
    ]
