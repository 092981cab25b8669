"""Byte-balanced split points of an offset range (the Spark source's planning): cut at batch
starts found in the sparse offset index, near-equal bytes per piece even when record sizes
are skewed, clamped to [log start, high watermark]."""

from __future__ import annotations

import random

from seglog.records.batch import RecordBatch
from seglog.storage import Log, LogConfig
from tests.batches import make_batch


def _skewed_log(tmp_path, now_ms, *, segment_bytes=256 * 1024) -> tuple[Log, list[int]]:
    """Batches of one record each whose sizes vary 100x (100 B .. 10 KB), offsets in order;
    returns the log and each batch's size in bytes."""
    log = Log.open(
        tmp_path / "t-0", LogConfig(segment_bytes=segment_bytes, index_interval_bytes=4096)
    )
    rng = random.Random(7)
    sizes = []
    for i in range(600):
        # Long runs of small and of large records: an offset-count cut is far off balance.
        large = (i // 100) % 2 == 1
        value = bytes(rng.randrange(256) for _ in range(10_000 if large else 100))
        batch = make_batch([value], timestamp_ms=now_ms + i)
        sizes.append(len(batch))
        log.append(batch)
    log.maybe_increment_high_watermark(log.log_end_offset)
    return log, sizes


def test_pieces_cover_the_range_at_batch_starts_with_near_equal_bytes(tmp_path, now_ms):
    log, sizes = _skewed_log(tmp_path, now_ms)
    assert len(log.segments) > 3  # the range crosses segments
    start, end, pieces = log.split_points(0, -1, sum(sizes) // 8)
    assert (start, end) == (0, 600)
    assert len(pieces) == 8
    assert pieces[0].start_offset == 0
    offsets = [p.start_offset for p in pieces]
    assert offsets == sorted(set(offsets))
    # The sizes are those of the batches each piece holds (one record per batch here).
    for piece, following in zip(pieces, [*offsets[1:], 600], strict=True):
        assert piece.size_bytes == sum(sizes[piece.start_offset : following])
    largest = max(p.size_bytes for p in pieces)
    smallest = min(p.size_bytes for p in pieces)
    assert largest <= 1.25 * smallest
    # Cutting the same range by offset count instead is far off balance.
    by_count = [sum(sizes[i : i + 75]) for i in range(0, 600, 75)]
    assert max(by_count) > 5 * min(by_count)


def test_a_piece_starts_where_a_read_at_its_offset_starts(tmp_path, now_ms):
    log, _ = _skewed_log(tmp_path, now_ms)
    _, _, pieces = log.split_points(0, -1, 64 * 1024)
    for piece in pieces[1:]:
        first = RecordBatch(log.read(piece.start_offset, 1 << 20))
        assert first.header.base_offset == piece.start_offset


def test_the_range_is_clamped_to_the_log_start_and_high_watermark(tmp_path, now_ms):
    log, sizes = _skewed_log(tmp_path, now_ms)
    log.delete_records_before(log.segments[1].base_offset)
    log_start = log.log_start_offset
    log.update_high_watermark(500)
    start, end, pieces = log.split_points(0, 10_000, 0)
    assert (start, end) == (log_start, 500)
    assert [p.start_offset for p in pieces] == [log_start]
    assert pieces[0].size_bytes == sum(sizes[log_start:500])
    # A sub-range, and an empty one.
    _, _, inner = log.split_points(200, 300, 1)
    assert [p.start_offset for p in inner][0] == 200
    assert sum(p.size_bytes for p in inner) == sum(sizes[200:300])
    assert log.split_points(450, 450, 1000)[2][0].size_bytes == 0
