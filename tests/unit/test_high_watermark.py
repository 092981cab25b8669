"""The log's high watermark: kept within [log start, LEO], moved forward only by the leader's
rule, checkpointed in Kafka's `replication-offset-checkpoint`, and bounding consumer reads,
byte counts and ListOffsets at a batch boundary."""

from __future__ import annotations

from seglog.records.batch import RecordBatch
from seglog.storage import Log, LogConfig
from seglog.storage.checkpoint import HIGH_WATERMARK_CHECKPOINT, read_checkpoint
from seglog.storage.log import LATEST_TIMESTAMP
from tests.batches import make_batch


def _fill(log: Log, count: int, now_ms: int) -> None:
    for i in range(count):
        log.append(make_batch([b"v%d" % i, b"w%d" % i], timestamp_ms=now_ms + i))


def _offsets(data: bytes | memoryview) -> list[int]:
    out, view, pos = [], memoryview(data), 0
    while pos < len(view):
        batch = RecordBatch(view[pos:])
        out += [r.offset for r in batch.records()]
        pos += batch.size_in_bytes
    return out


def test_reads_bounded_by_the_high_watermark_stop_at_its_batch_boundary(tmp_path, now_ms):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=300))
    _fill(log, 10, now_ms)  # 20 records, 2 per batch, several segments
    assert log.high_watermark == 0  # nobody moved it: a lone Log is not a leader
    assert log.read_records(0, 1 << 20).next_offset > 0  # unbounded reads see the log end
    assert log.locate_records(0, 1 << 20, max_offset=log.high_watermark).size == 0
    assert log.maybe_increment_high_watermark(8)
    collected: list[int] = []
    collected_bytes = 0
    offset = 0
    while True:
        found = log.locate_records(offset, 1 << 20, max_offset=log.high_watermark)
        if not found.size:
            break
        assert found.high_watermark == 8
        collected += _offsets(found.read())
        collected_bytes += found.size
        offset = found.next_offset
    assert collected == list(range(8))
    # Between the HW and the log end: nothing, not an error (Kafka's consumer read).
    assert log.locate_records(12, 1 << 20, max_offset=8).size == 0
    # Byte counts for a waiting fetch stop at the HW too.
    all_bytes = log.bytes_from(0).available_bytes
    below_hw = log.bytes_from(0, max_offset=8).available_bytes
    assert below_hw == collected_bytes < all_bytes
    assert log.offset_for_timestamp(LATEST_TIMESTAMP, max_offset=8).offset == 8
    assert log.offset_for_timestamp(now_ms + 6, max_offset=8) is None  # offset 12: hidden
    assert log.offset_for_timestamp(now_ms + 3, max_offset=8).offset == 6


def test_the_high_watermark_only_grows_by_the_leaders_rule_and_stays_in_range(tmp_path, now_ms):
    log = Log.open(tmp_path / "t-0")
    _fill(log, 5, now_ms)  # LEO 10
    assert log.maybe_increment_high_watermark(6)
    assert not log.maybe_increment_high_watermark(4)
    assert log.high_watermark == 6
    assert log.maybe_increment_high_watermark(99)
    assert log.high_watermark == 10  # clamped to the log end
    assert log.update_high_watermark(2) == 2  # a follower takes its leader's, even lower
    log.update_high_watermark(10)
    log.truncate_to(4)
    assert log.high_watermark == log.log_end_offset == 4
    log.delete_records_before(4)
    _fill(log, 3, now_ms)
    log.update_high_watermark(0)
    assert log.high_watermark == 4  # not below the log start
    log.truncate_fully_and_start_at(50)
    assert log.high_watermark == 50


def test_reads_after_truncation_do_not_use_a_stale_bound(tmp_path, now_ms):
    log = Log.open(tmp_path / "t-0")
    _fill(log, 5, now_ms)
    log.maybe_increment_high_watermark(6)
    assert log.locate_records(0, 1 << 20, max_offset=6).next_offset == 6
    log.truncate_to(4)
    log.append(make_batch([b"a", b"b", b"c", b"d", b"e"], timestamp_ms=now_ms))  # offsets 4-8
    log.append(make_batch([b"f"], timestamp_ms=now_ms))  # 9
    log.maybe_increment_high_watermark(9)
    found = log.locate_records(0, 1 << 20, max_offset=log.high_watermark)
    assert _offsets(found.read()) == list(range(9))  # not cut at the old HW's position


def test_the_high_watermark_survives_a_restart_through_kafkas_checkpoint(tmp_path, now_ms):
    log = Log.open(tmp_path / "t-0")
    _fill(log, 5, now_ms)
    log.maybe_increment_high_watermark(6)
    log.close()
    assert read_checkpoint(tmp_path / HIGH_WATERMARK_CHECKPOINT) == {("t", 0): 6}
    assert (tmp_path / HIGH_WATERMARK_CHECKPOINT).read_text() == "0\n1\nt 0 6\n"
    reopened = Log.open(tmp_path / "t-0")
    assert reopened.high_watermark == 6
    reopened.close()
