import os
import subprocess
import sys
import textwrap
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from seglog.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    SeglogError,
)
from seglog.records import CompressionType, RecordBatchBuilder, iter_batches, iter_records
from seglog.storage import Log, LogConfig, ManualClock
from seglog.storage.log import MAX_TIMESTAMP, TimestampAndOffset
from seglog.storage.retention import delete_old_segments
from seglog.storage.segment_factory import SegmentFactory
from seglog.storage.validation import validate_records
from tests.batches import make_batch


def read_all(log):
    """Every record from the log start, following Kafka's one-segment-per-read rule."""
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        records = [r for r in iter_records(log.read(offset, 1 << 20)) if r.offset >= offset]
        if not records:
            break
        out += records
        offset = records[-1].offset + 1
    return out


def files(directory):
    return sorted(p.name for p in directory.iterdir())


def test_kafka_python_batches_append_survive_reopen_and_read_back_identical(tmp_path, now_ms):
    log = Log.open(tmp_path / "compat-0", LogConfig())
    originals = []
    for codec in CompressionType:
        builder = DefaultRecordBatchBuilder(2, int(codec), 0, -1, -1, -1, 1 << 20)
        builder.append(0, now_ms, b"key", b"v" * 200, [("h", b"1")])
        builder.append(1, now_ms + 1, None, None, [])
        raw = bytes(builder.build())
        originals.append(raw)
        log.append(raw)
    log.close()
    log = Log.open(tmp_path / "compat-0", LogConfig())
    stored = log.read(0, 1 << 20)
    batches = list(iter_batches(stored))
    assert len(batches) == len(originals)
    for i, (batch, raw) in enumerate(zip(batches, originals, strict=True)):
        stored_raw = bytes(batch.raw())
        # Only baseOffset (assigned by the log) differs; the CRC-covered bytes are identical.
        assert stored_raw[8:] == raw[8:]
        assert int.from_bytes(stored_raw[:8], "big") == 2 * i
        decoded = DefaultRecordBatch(stored_raw)
        assert decoded.validate_crc()
        assert [(r.key, r.value, list(r.headers)) for r in decoded] == [
            (b"key", b"v" * 200, [("h", b"1")]),
            (None, None, []),
        ]
    log.close()


def test_append_assigns_offsets_from_the_log_end(tmp_path):
    log = Log.open(tmp_path / "t-0")
    first = log.append(make_batch([b"a", b"b", b"c"]))
    second = log.append(make_batch([b"d"]) + make_batch([b"e", b"f"]))
    assert (first.first_offset, first.last_offset) == (0, 2)
    assert (second.first_offset, second.last_offset, second.batch_count) == (3, 5, 2)
    assert [r.offset for r in read_all(log)] == list(range(6))
    assert log.log_end_offset == 6
    log.close()


@pytest.mark.parametrize(
    ("mangle", "error", "message"),
    [
        (lambda b: b[:-5], CorruptRecordError, "declares"),
        (lambda b: b[:10], CorruptRecordError, "too short"),
        (lambda b: b[:16] + b"\x05" + b[17:], InvalidRecordError, "expected magic 2, found 5"),
        (lambda b: b[:-1] + bytes([b[-1] ^ 1]), CorruptRecordError, "CRC-32C"),
    ],
    ids=["truncated", "stray-bytes", "magic", "crc"],
)
def test_bad_input_raises_a_named_error_and_leaves_the_log_unchanged(
    tmp_path, mangle, error, message
):
    log = Log.open(tmp_path / "t-0")
    log.append(make_batch([b"kept"]))
    before = (log.log_end_offset, log.active_segment.size)
    good = make_batch([b"x", b"y"])
    with pytest.raises(error, match=message):
        log.append(good + mangle(make_batch([b"z"])))  # the good batch in front is not written
    assert (log.log_end_offset, log.active_segment.size) == before
    log.close()


@settings(max_examples=300, deadline=None)
@given(
    position=st.integers(min_value=0, max_value=200),
    value=st.integers(min_value=0, max_value=255),
    max_message_bytes=st.sampled_from([100, 1_000_000]),
)
def test_any_byte_changed_is_accepted_or_refused_by_name_never_half_written(
    position, value, max_message_bytes
):
    """The fast per-batch checks and the checks that name the error must agree: a batch the
    fast loop refuses always gets its named error, and a refused input writes nothing."""
    raw = bytearray(make_batch([b"x", b"y" * 20]) + make_batch([b"z"] * 3))
    raw[position % len(raw)] = value
    config = LogConfig(max_message_bytes=max_message_bytes)
    try:
        validated = validate_records(bytes(raw), config, time.time_ns() // 1_000_000)
    except SeglogError as exc:
        assert type(exc) is not SeglogError and str(exc)
    else:
        assert sum(h.size_in_bytes for _, h in validated.batches) == len(raw)


def test_empty_append_is_invalid(tmp_path):
    log = Log.open(tmp_path / "t-0")
    with pytest.raises(InvalidRecordError, match="empty"):
        log.append(b"")
    log.close()


def test_inconsistent_record_count_is_invalid(tmp_path):
    raw = bytearray(make_batch([b"a", b"b"]))
    raw[57:61] = (3).to_bytes(4, "big")  # count 3, lastOffsetDelta 1; CRC recomputed
    from seglog.records.batch import compute_crc

    raw[17:21] = compute_crc(raw, 0, len(raw)).to_bytes(4, "big")
    log = Log.open(tmp_path / "t-0")
    with pytest.raises(InvalidRecordError, match="recordCount 3 does not match lastOffsetDelta 1"):
        log.append(bytes(raw))
    log.close()


def test_batch_over_max_message_bytes_is_refused(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(max_message_bytes=500))
    with pytest.raises(RecordTooLargeError, match="larger than max.message.bytes 500"):
        log.append(make_batch([b"x" * 600]))
    assert log.log_end_offset == 0
    log.close()


def test_timestamps_outside_the_window_are_refused(tmp_path, now_ms):
    log = Log.open(tmp_path / "t-0", LogConfig(message_timestamp_before_max_ms=60_000))
    with pytest.raises(InvalidTimestampError, match="outside the accepted window"):
        log.append(make_batch([b"old"], timestamp_ms=now_ms - 3_600_000))
    with pytest.raises(InvalidTimestampError):
        log.append(make_batch([b"future"], timestamp_ms=now_ms + 2 * 3_600_000))
    assert log.log_end_offset == 0
    log.close()


def test_log_append_time_is_stamped_and_the_crc_recomputed(tmp_path):
    clock = ManualClock(1_800_000_000_000)
    log = Log.open(tmp_path / "t-0", LogConfig(message_timestamp_type="LogAppendTime"), clock=clock)
    info = log.append(make_batch([b"a", b"b"], timestamp_ms=5))
    assert info.log_append_time_ms == clock.now_ms()
    batch = next(iter_batches(log.read(0, 1 << 20)))
    assert batch.header.timestamp_type == 1 and batch.is_valid()
    assert [r.timestamp_ms for r in batch.records()] == [clock.now_ms()] * 2
    log.close()


def test_segments_roll_by_size_and_reads_stay_within_one_segment(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=1024, index_interval_bytes=128))
    for i in range(40):
        log.append(make_batch([b"%03d" % i + b"x" * 100]))
    assert len(log.segments) > 3
    assert [int(r.value[:3]) for r in read_all(log)] == list(range(40))
    log.close()
    names = files(tmp_path / "t-0")
    assert "00000000000000000000.log" in names and all(
        n[:20].isdigit() for n in names if n.endswith((".log", ".index", ".timeindex"))
    )


def test_read_returns_at_least_one_whole_batch_even_past_max_bytes(tmp_path):
    log = Log.open(tmp_path / "t-0")
    log.append(make_batch([b"x" * 1000]))
    assert len(log.read(0, 10)) > 1000
    assert log.read(0, 10, min_one_message=False) == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(2, 100)
    assert log.read(1, 100) == b""
    log.close()


def test_offset_for_timestamp_uses_the_time_index(tmp_path, now_ms):
    log = Log.open(tmp_path / "t-0", LogConfig(index_interval_bytes=64))
    for i in range(50):
        log.append(make_batch([b"v%d" % i, b"w%d" % i], timestamp_ms=now_ms + 10 * i))
    found = log.offset_for_timestamp(now_ms + 255)
    assert (found.offset, found.timestamp_ms) == (52, now_ms + 260)
    assert log.offset_for_timestamp(now_ms + 10**6) is None
    assert log.offset_for_timestamp(-1).offset == 100
    assert log.offset_for_timestamp(-2).offset == 0
    log.close()


def test_truncate_to_removes_whole_batches(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=400))
    for i in range(20):
        log.append(make_batch([b"a%d" % i, b"b%d" % i]))
    log.truncate_to(11)  # batch 10-11 straddles: it goes too
    assert log.log_end_offset == 10
    assert [r.offset for r in read_all(log)] == list(range(10))
    assert log.append(make_batch([b"new"])).first_offset == 10
    log.truncate_fully_and_start_at(500)
    assert (log.log_start_offset, log.log_end_offset, len(log.segments)) == (500, 500, 1)
    log.close()


def test_retention_by_time_rolls_the_active_segment_when_it_alone_expired(tmp_path):
    clock = ManualClock()
    config = LogConfig(retention_ms=1000, file_delete_delay_ms=500)
    log = Log.open(tmp_path / "t-0", config, clock=clock)
    log.append(make_batch([b"a"], timestamp_ms=clock.now_ms()))
    assert delete_old_segments(log, clock.now_ms()) == 0
    clock.advance(2000)
    assert delete_old_segments(log, clock.now_ms()) == 1
    assert log.log_start_offset == 1 and len(log.segments) == 1
    assert any(n.endswith(".deleted") for n in files(tmp_path / "t-0"))
    clock.advance(501)
    log.delete_due_files()
    assert not any(n.endswith(".deleted") for n in files(tmp_path / "t-0"))
    log.close()


def test_retention_by_size_and_by_log_start_offset(tmp_path, now_ms):
    clock = ManualClock(now_ms)
    log = Log.open(
        tmp_path / "t-0",
        LogConfig(segment_bytes=300, retention_bytes=700, file_delete_delay_ms=0),
        clock=clock,
    )
    for _ in range(12):
        log.append(make_batch([b"x" * 100], timestamp_ms=now_ms))
    assert delete_old_segments(log, clock.now_ms()) > 0
    assert log.size_in_bytes <= 700 + 300
    log.delete_records_before(log.log_end_offset - 1)
    delete_old_segments(log, clock.now_ms())
    assert log.segments[0].base_offset <= log.log_start_offset == 11
    assert [r.offset for r in read_all(log)] == [11]
    log.close()


def test_a_tiered_logs_local_retention_deletes_only_what_the_store_holds(tmp_path, now_ms):
    clock = ManualClock(now_ms)
    config = LogConfig(
        segment_bytes=300,
        remote_storage_enable=True,
        local_retention_ms=1000,
        local_retention_bytes=1,
        file_delete_delay_ms=0,
    )
    log = Log.open(tmp_path / "t-0", config, clock=clock)
    for _ in range(8):  # a batch of two records a segment
        log.append(make_batch([b"x" * 100, b"y" * 100], timestamp_ms=now_ms))
    segments = len(log.segments)
    assert segments >= 4
    clock.advance(2000)
    # Past both local retentions, but nothing copied: nothing goes.
    assert delete_old_segments(log, clock.now_ms()) == 0
    assert len(log.segments) == segments and log.log_start_offset == 0
    # The store holds the first two segments whole, and half of the third.
    third = log.segments[2]
    assert log.segments[3].base_offset - third.base_offset == 2
    log.highest_offset_in_remote_storage = third.base_offset
    assert delete_old_segments(log, clock.now_ms()) == 2
    assert log.log_start_offset == third.base_offset
    # Everything copied: all but the active segment go.
    log.highest_offset_in_remote_storage = log.segments[-1].base_offset - 1
    delete_old_segments(log, clock.now_ms())
    assert len(log.segments) == 1
    log.close()


def test_a_tiered_logs_local_retention_defaults_to_the_total_one(tmp_path, now_ms):
    clock = ManualClock(now_ms)
    config = LogConfig(segment_bytes=300, remote_storage_enable=True, retention_ms=1000)
    log = Log.open(tmp_path / "t-0", config, clock=clock)
    for _ in range(4):
        log.append(make_batch([b"x" * 100], timestamp_ms=now_ms))
    log.highest_offset_in_remote_storage = log.log_end_offset
    assert delete_old_segments(log, clock.now_ms()) == 0  # -2: retention.ms, not yet passed
    clock.advance(2000)
    assert delete_old_segments(log, clock.now_ms()) > 0
    log.close()


def test_disk_full_mid_append_cuts_the_log_back_and_raises(tmp_path):
    # A real write failure: RLIMIT_FSIZE makes the kernel refuse bytes past the limit.
    script = textwrap.dedent(f"""
        import resource, signal, sys
        sys.path.insert(0, {str(os.getcwd())!r})
        from seglog.errors import StorageError
        from seglog.storage import Log
        from tests.batches import make_batch
        log = Log.open({str(tmp_path / "t-0")!r})
        log.append(make_batch([b"first"]))
        size = log.active_segment.size
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size + 100, resource.RLIM_INFINITY))
        try:
            log.append(make_batch([b"x" * 5000]))
        except StorageError as exc:
            print("storage-error", log.log_end_offset, log.active_segment.size == size)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["storage-error", "1", "True"], out.stderr
    assert os.path.getsize(tmp_path / "t-0" / "00000000000000000000.log") < 5000


def test_retention_bytes_zero_deletes_the_active_segments_data_too(tmp_path, now_ms):
    clock = ManualClock(now_ms)
    config = LogConfig(retention_bytes=0, file_delete_delay_ms=0)
    log = Log.open(tmp_path / "t-0", config, clock=clock)
    for i in range(3):
        log.append(make_batch([b"%d" % i], timestamp_ms=now_ms))
    assert delete_old_segments(log, clock.now_ms()) == 1
    assert log.log_start_offset == log.log_end_offset == 3
    assert log.size_in_bytes == 0 and read_all(log) == []
    log.close()


def test_segment_jitter_is_drawn_per_segment_below_segment_ms(tmp_path):
    config = LogConfig(segment_ms=100, segment_jitter_ms=10_000)
    factory = SegmentFactory(tmp_path / "t-0", config, ManualClock())
    (tmp_path / "t-0").mkdir()
    jitters = set()
    for base in range(0, 200, 4):
        segment = factory.open(base)
        jitters.add(segment.rolling_jitter_ms)
        segment.close()
    assert all(0 <= j < 100 for j in jitters)
    assert len(jitters) > 1  # drawn per segment, not one value for the log
    assert (
        SegmentFactory(tmp_path / "t-0", LogConfig(), ManualClock()).open(0).rolling_jitter_ms == 0
    )


def test_offsets_for_times_looks_past_records_below_the_log_start(tmp_path, now_ms):
    log = Log.open(tmp_path / "t-0", LogConfig())
    builder = RecordBatchBuilder()
    for ts in (now_ms - 900, now_ms - 100, now_ms - 900):  # offsets 0..2, max at offset 1
        builder.append(None, b"x", ts)
    log.append(builder.build())
    log.append(make_batch([b"later"], timestamp_ms=now_ms - 50))  # offset 3
    assert log.offset_for_timestamp(now_ms - 200).offset == 1
    log.delete_records_before(2)
    # The first batch's max timestamp reaches the target only through offset 1, which is
    # below the log start: the search goes on to the next batch.
    assert log.offset_for_timestamp(now_ms - 200) == TimestampAndOffset(now_ms - 50, 3)
    log.close()


def test_list_offsets_max_timestamp_finds_the_record_with_the_largest_timestamp(tmp_path, now_ms):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=200))
    assert log.offset_for_timestamp(MAX_TIMESTAMP) is None
    for i, ts in enumerate([now_ms - 500, now_ms - 10, now_ms - 300, now_ms - 10, now_ms - 700]):
        log.append(make_batch([b"%d" % i], timestamp_ms=ts))
    assert len(log.segments) > 1
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == TimestampAndOffset(now_ms - 10, 1)
    log.close()


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 700), min_size=1, max_size=40),
    interval=st.sampled_from([0, 100, 1000, 1 << 20]),
    offset_seed=st.integers(0, 10_000),
    max_bytes=st.integers(0, 6000),
)
def test_locating_a_read_finds_the_same_whole_batches_as_walking_them(
    tmp_path_factory, sizes, interval, offset_seed, max_bytes
):
    # The read's end comes from the offset index and a few headers, not from reading the
    # batches: it must match a walk over every batch in the file.
    directory = tmp_path_factory.mktemp("locate") / "t-0"
    log = Log.open(directory, LogConfig(index_interval_bytes=interval))
    ts = time.time_ns() // 1_000_000
    for i, size in enumerate(sizes):
        log.append(make_batch([b"v" * size] * (1 + i % 3), timestamp_ms=ts))
    offset = offset_seed % log.log_end_offset
    found = log.locate_records(offset, max_bytes, min_one_message=False)
    data = log.active_segment.log.read(0, log.active_segment.size)
    batches = [(b.position, b.size_in_bytes, b.header) for b in iter_batches(data)]
    first = next(i for i, (_, _, h) in enumerate(batches) if h.last_offset >= offset)
    start = batches[first][0]
    taken = [b for b in batches[first:] if b[0] + b[1] - start <= max_bytes]
    assert found.size == sum(b[1] for b in taken)
    expected_next = taken[-1][2].next_offset if taken else batches[first][2].base_offset
    assert found.next_offset == expected_next
    assert found.read() == data[start : start + found.size]
    log.close()
