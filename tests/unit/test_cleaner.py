"""The cleaner against Kafka's LogCleaner semantics: latest record per key with its offset,
tombstones kept for delete.retention.ms after the clean that first saw them (the delete
horizon), control batches untouched, recomputed max timestamps, compaction lags, the bounded
offset map and its checkpoint, and a corrupt batch that stops cleaning but not serving."""

from __future__ import annotations

import pytest

from seglog.records import RecordBatchBuilder
from seglog.records.batch import CONTROL_MASK, DELETE_HORIZON_MASK, RecordBatch
from seglog.records.record import Record
from seglog.records.rewrite import encode_batch
from seglog.storage import Log, LogConfig, ManualClock
from seglog.storage.checkpoint import CLEANER_OFFSET_CHECKPOINT, read_checkpoint
from seglog.storage.cleaner import OFFSET_MAP_BYTES_PER_ENTRY, Cleaner, OffsetMap
from tests.batches import make_batch
from tests.unit.test_log import files, read_all

DAY_MS = 24 * 60 * 60 * 1000


def compacted(**overrides) -> LogConfig:
    settings = dict(
        segment_bytes=600,
        cleanup_policy="compact",
        delete_retention_ms=1000,
        file_delete_delay_ms=0,
    )
    settings.update(overrides)
    return LogConfig(**settings)


def batches_of(log: Log) -> list[RecordBatch]:
    out = []
    for segment in log.segments:
        for found in segment.log.batches(0):
            out.append(RecordBatch(segment.log.read(found.position, found.header.size_in_bytes)))
    return out


def test_compaction_keeps_the_latest_record_per_key_and_their_offsets(tmp_path, now_ms):
    clock = ManualClock(now_ms)
    config = compacted()
    log = Log.open(tmp_path / "c-0", config, clock=clock)
    for i in range(60):
        value = None if i == 41 else b"v%d" % i  # k1's tombstone
        log.append(
            make_batch([value], keys=[b"k%d" % (i % 5)], timestamp_ms=now_ms, compression=i % 5)
        )
    before = read_all(log)
    expected = {r.key: r for r in before}
    assert Cleaner(clock=clock).maybe_clean(log) > 0
    after = read_all(log)
    active_base = log.active_segment.base_offset
    for key, record in expected.items():
        mine = [r for r in after if r.key == key]
        assert mine[-1] == record  # latest value, same offset
        assert len([r for r in mine if r.offset < active_base]) <= 1
    assert len(after) < len(before)
    log.close()
    reopened = Log.open(tmp_path / "c-0", config, clock=clock)
    assert read_all(reopened) == after
    reopened.close()


def test_a_tombstone_lives_delete_retention_ms_after_the_clean_that_first_kept_it(tmp_path):
    # Written a week ago, so older than delete_retention_ms already: Kafka still keeps it
    # until the horizon stamped by the first clean has passed.
    clock = ManualClock(1_700_000_000_000)
    written_ms = clock.now_ms() - 7 * DAY_MS
    log = Log.open(tmp_path / "c-0", compacted(delete_retention_ms=DAY_MS), clock=clock)
    log.append(make_batch([b"v"], keys=[b"gone"], timestamp_ms=written_ms))
    log.append(make_batch([None], keys=[b"gone"], timestamp_ms=written_ms))
    log.roll()
    cleaner = Cleaner(clock=clock)
    cleaner.clean(log, log.log_start_offset, log.active_segment.base_offset)
    tombstone_batch = next(b for b in batches_of(log) if b.header.record_count)
    assert [r.value for r in read_all(log)] == [None]
    assert tombstone_batch.header.attributes & DELETE_HORIZON_MASK
    assert tombstone_batch.header.delete_horizon_ms == clock.now_ms() + DAY_MS
    # Records keep their timestamps, deltas from the horizon.
    assert tombstone_batch.records()[0].timestamp_ms == written_ms
    clock.advance(DAY_MS - 1)
    cleaner.clean(log, log.log_start_offset, log.active_segment.base_offset)
    assert [r.value for r in read_all(log)] == [None]
    clock.advance(1)
    cleaner.clean(log, log.log_start_offset, log.active_segment.base_offset)
    assert read_all(log) == []
    # The last batch of the pass stays, empty, so the offsets it held stay taken.
    assert log.log_end_offset == 2
    log.close()


def test_control_batches_are_kept_whole_and_their_keys_do_not_replace_data(tmp_path, now_ms):
    clock = ManualClock(now_ms)
    log = Log.open(tmp_path / "c-0", compacted(), clock=clock)
    log.append(make_batch([b"data"], keys=[b"k"], timestamp_ms=now_ms))
    marker = encode_batch(
        [Record(0, now_ms, b"k", b"\x00\x00\x00\x00\x00\x00")],
        base_offset=0,
        last_offset_delta=0,
        attributes=CONTROL_MASK,
        producer_id=7,
        producer_epoch=0,
    )
    log.append(marker)
    log.roll()
    Cleaner(clock=clock).clean(log, 0, log.active_segment.base_offset)
    kept = batches_of(log)
    assert [b.header.is_control for b in kept] == [False, True]
    assert kept[0].records()[0].value == b"data"  # not superseded by the marker's key
    log.close()


def test_a_rewritten_batch_takes_the_max_timestamp_of_the_records_it_keeps(tmp_path, now_ms):
    clock = ManualClock(now_ms)
    log = Log.open(tmp_path / "c-0", compacted(), clock=clock)
    builder = RecordBatchBuilder()
    builder.append(b"a", b"1", now_ms - 5000)
    builder.append(b"b", b"1", now_ms - 1000)  # the batch's max timestamp, superseded below
    log.append(builder.build())
    log.append(make_batch([b"2"], keys=[b"b"], timestamp_ms=now_ms - 3000))
    log.roll()
    Cleaner(clock=clock).clean(log, 0, log.active_segment.base_offset)
    first = batches_of(log)[0]
    assert [r.key for r in first.records()] == [b"a"]
    assert first.header.max_timestamp == now_ms - 5000
    assert first.header.last_offset == 1  # the last offset survives for producer state
    # No time-index entry ever carries the -1 "no timestamp".
    for segment in log.segments:
        entries = [segment.time_index.entry(i) for i in range(segment.time_index.entries)]
        assert all(e.timestamp_ms >= 0 for e in entries)
    log.close()


def test_min_compaction_lag_zero_means_no_lag_check(tmp_path, now_ms):
    clock = ManualClock(now_ms)
    log = Log.open(tmp_path / "c-0", compacted(min_compaction_lag_ms=0), clock=clock)
    future_ms = now_ms + 10 * 60 * 1000  # a producer clock ahead of ours, within the window
    for i in range(4):
        log.append(make_batch([b"%d" % i], keys=[b"k"], timestamp_ms=future_ms))
    log.roll()
    cleaner = Cleaner(clock=clock)
    found = cleaner.cleanable_range(log)
    assert found.first_uncleanable_offset == log.active_segment.base_offset
    assert cleaner.maybe_clean(log) > 0
    assert [r.value for r in read_all(log)] == [b"3"]
    # A positive lag holds back segments with records newer than it.
    log.config = compacted(min_compaction_lag_ms=60_000)
    log.append(make_batch([b"4"], keys=[b"k"], timestamp_ms=now_ms))
    log.roll()
    assert cleaner.cleanable_range(log).first_uncleanable_offset == 4
    log.close()


def test_max_compaction_lag_caps_rolls_and_forces_a_clean_below_the_dirty_ratio(tmp_path):
    clock = ManualClock(1_700_000_000_000)
    config = compacted(
        segment_bytes=1 << 20, min_cleanable_dirty_ratio=1.0, max_compaction_lag_ms=60_000
    )
    log = Log.open(tmp_path / "c-0", config, clock=clock)
    start_ms = clock.now_ms()
    log.append(make_batch([b"old"], keys=[b"k"], timestamp_ms=start_ms))
    log.append(make_batch([b"new"], keys=[b"k"], timestamp_ms=start_ms + 30_000))
    assert len(log.segments) == 1
    # segment.ms is a week, but a compacted topic rolls once max.compaction.lag.ms has passed.
    log.append(make_batch([b"x"], keys=[b"other"], timestamp_ms=start_ms + 60_001))
    assert len(log.segments) == 2
    cleaner = Cleaner(clock=clock)
    clock.advance(59_999)
    assert cleaner.maybe_clean(log) == 0  # ratio 1.0 is never exceeded; lag not yet passed
    clock.advance(2)
    assert cleaner.maybe_clean(log) == 1
    assert [r.value for r in read_all(log)] == [b"new", b"x"]
    log.close()


def test_the_offset_map_is_bounded_and_the_cleaner_checkpoints_its_progress(tmp_path, now_ms):
    clock = ManualClock(now_ms)
    config = compacted(segment_bytes=1 << 20)
    log = Log.open(tmp_path / "c-0", config, clock=clock)
    for round_ in range(2):
        for key in range(30):
            log.append(make_batch([b"%d" % round_], keys=[b"k%d" % key], timestamp_ms=now_ms))
    log.roll()
    # Room for 10 keys: each pass maps 10 batches' keys and cleans up to there.
    cleaner = Cleaner(clock=clock, dedupe_buffer_bytes=12 * OFFSET_MAP_BYTES_PER_ENTRY)
    cleaner.clean(log, 0, log.active_segment.base_offset)
    assert log.cleaned_up_to_offset == 10
    checkpoint = read_checkpoint(tmp_path / CLEANER_OFFSET_CHECKPOINT)
    assert checkpoint == {("c", 0): 10}
    log.close()
    log = Log.open(tmp_path / "c-0", config, clock=clock)
    assert log.cleaned_up_to_offset == 10  # survives a restart
    passes = 0
    while (found := cleaner.cleanable_range(log)).cleanable_bytes and passes < 10:
        cleaner.clean(log, found.first_dirty_offset, found.first_uncleanable_offset)
        passes += 1
    assert log.cleaned_up_to_offset == 60
    assert sorted(r.offset for r in read_all(log)) == list(range(30, 60))
    log.close()


def test_a_corrupt_batch_marks_the_partition_uncleanable_and_it_keeps_serving(tmp_path, now_ms):
    clock = ManualClock(now_ms)
    log = Log.open(tmp_path / "c-0", compacted(segment_bytes=1 << 20), clock=clock)
    for i in range(6):
        log.append(make_batch([b"%d" % i], keys=[b"k"], timestamp_ms=now_ms))
    log.roll()
    segment = log.segments[0]
    data = bytearray(segment.log.path.read_bytes())
    data[-1] ^= 0xFF  # inside the last batch's records: its CRC no longer matches
    segment.log.path.write_bytes(bytes(data))
    before = files(tmp_path / "c-0")
    cleaner = Cleaner(clock=clock)
    assert cleaner.maybe_clean(log) == 0
    assert ("c", 0) in cleaner.uncleanable
    assert files(tmp_path / "c-0") == before  # no .cleaned leftovers, nothing swapped
    assert cleaner.maybe_clean(log) == 0  # skipped, not failing every pass
    assert log.append(make_batch([b"after"], keys=[b"k"], timestamp_ms=now_ms)).first_offset == 6
    assert log.read(0, 1 << 20)  # reads still served
    log.close()


def test_cleaner_config_conflicts_are_refused():
    with pytest.raises(Exception, match="min.compaction.lag.ms"):
        LogConfig(min_compaction_lag_ms=10, max_compaction_lag_ms=5)


def test_the_offset_map_lives_in_one_buffer_of_the_configured_size():
    offset_map = OffsetMap(8 * OFFSET_MAP_BYTES_PER_ENTRY)  # 8 slots, 7 keys at 90%
    assert len(offset_map._table) == 8 * OFFSET_MAP_BYTES_PER_ENTRY
    records = [Record(i, 0, b"key-%d" % i, b"v") for i in range(6)]
    assert offset_map.put_batch(records, 0)
    # Keys collide in 8 slots and probe on; a later offset for a key replaces the earlier.
    assert offset_map.put_batch([Record(9, 0, b"key-3", b"v")], 0)
    assert offset_map.put_batch([Record(6, 0, b"key-6", b"v")], 0)
    assert [offset_map.get(b"key-%d" % i) for i in range(7)] == [0, 1, 2, 9, 4, 5, 6]
    assert offset_map.get(b"absent") == -1 and len(offset_map) == 7
    assert not offset_map.put_batch([Record(10, 0, b"one-more", b"v")], 0)  # full
    assert offset_map.get(b"one-more") == -1
