"""How a direct read's plan cuts a copied segment into tasks (remote_planning._Cutter), from
the segment's offset index alone: byte-balanced cuts at index entries, contiguous offsets,
and no sliver of a last task."""

from __future__ import annotations

from seglog.client.structs import TopicPartition
from seglog.spark.remote_planning import SMALLEST_TASK_PARTS, _Cutter
from seglog.storage.remote_indexes import OFFSET_ENTRY, RemoteIndexes
from seglog.storage.remote_metadata import RemoteSegment
from seglog.storage.remote_store import RemoteStorageConfig

BATCHES = 100
RECORDS_PER_BATCH = 10
BATCH_BYTES = 1000
STORAGE = RemoteStorageConfig(
    endpoint_url="http://127.0.0.1:1", bucket="b", access_key_id="k", secret_access_key="s"
)


def _segment() -> tuple[RemoteSegment, RemoteIndexes]:
    """Offsets 0..999 in 100 batches of 1000 bytes, every batch indexed (its last offset)."""
    index = b"".join(
        OFFSET_ENTRY.pack(k * RECORDS_PER_BATCH + RECORDS_PER_BATCH - 1, k * BATCH_BYTES)
        for k in range(BATCHES)
    )
    segment = RemoteSegment(
        "id", 0, "seg", 0, BATCHES * RECORDS_PER_BATCH - 1, 0, BATCHES * BATCH_BYTES, (), "x", "t"
    )
    return segment, RemoteIndexes(0, index, b"")


def _plan(max_bytes: int):  # type: ignore[no-untyped-def]
    segment, indexes = _segment()
    cutter = _Cutter(TopicPartition("t", 0), STORAGE, max_bytes, False, True)
    cutter.add(segment, indexes, 0, BATCHES * RECORDS_PER_BATCH)
    return cutter.finish()


def _bytes(task) -> int:  # type: ignore[no-untyped-def]
    return sum(p.end_position - p.start_position for p in task.pieces)


def test_tasks_are_cut_by_bytes_at_index_entries_and_cover_the_offsets():
    tasks = _plan(30_000)  # 100 kB: three of about 30 kB and a last one of about 10 kB
    assert len(tasks) == 4
    assert tasks[0].start == 0 and tasks[-1].end == BATCHES * RECORDS_PER_BATCH
    assert all(a.end == b.start for a, b in zip(tasks, tasks[1:], strict=False))
    assert all(abs(_bytes(t) - 30_000) <= 2 * BATCH_BYTES for t in tasks[:-1])
    for task in tasks:
        piece = task.pieces[0]
        # A task starts at the batch holding its first offset, whose bytes it reads.
        assert piece.start_position <= (task.start // RECORDS_PER_BATCH) * BATCH_BYTES


def test_a_last_task_below_a_quarter_of_the_task_size_joins_the_one_before():
    max_bytes = 45_000  # cuts near 45 kB and 90 kB: the last 10 kB is below 45 kB / 4
    assert BATCHES * BATCH_BYTES % max_bytes < max_bytes // SMALLEST_TASK_PARTS
    tasks = _plan(max_bytes)
    assert len(tasks) == 2
    assert [(t.start, t.end) for t in tasks][-1][1] == BATCHES * RECORDS_PER_BATCH
    assert tasks[0].end == tasks[1].start
    assert _bytes(tasks[-1]) >= max_bytes  # its own bytes and the sliver's
    # The sliver's piece is kept as it was cut: it starts at the batch before its first
    # offset, which the read skips by offset.
    assert len(tasks[-1].pieces) == 2
