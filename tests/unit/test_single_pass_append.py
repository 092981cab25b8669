"""The single-pass append (records/_scan.c: scan_append, scan_follower, index_entries,
write_batches) against the per-batch path it replaced (tests/unit/append_reference.py): the
same inputs refused with the same errors, and accepted ones written as the same bytes with
the same index entries, the leader's append and the follower's."""

from __future__ import annotations

import os
import time

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.errors import SeglogError, StorageError
from seglog.records import RecordBatchBuilder
from seglog.records._scan import crc32c as scan_crc32c
from seglog.records.batch import CRC_OFFSET, NO_TIMESTAMP, compute_crc, read_header
from seglog.storage import Log, LogConfig
from seglog.storage.config import CLEANUP_COMPACT, LOG_APPEND_TIME
from seglog.storage.validation import (
    assign_offsets,
    scan_follower_records,
    validate_follower_records,
    validate_records,
)

from . import append_reference

NOW_MS = 1_700_000_000_000
CONFIGS = [
    LogConfig(),
    LogConfig(max_message_bytes=400),
    LogConfig(cleanup_policy=CLEANUP_COMPACT),
    LogConfig(message_timestamp_type=LOG_APPEND_TIME),
    LogConfig(message_timestamp_before_max_ms=1000, message_timestamp_after_max_ms=1000),
]
# One batch: records, value size, keyed, codec (none, gzip, zstd), timestamp offset from
# now, producer id (-1: none), partitionLeaderEpoch.
BATCH = st.tuples(
    st.integers(1, 5),
    st.integers(0, 120),
    st.booleans(),
    st.sampled_from([0, 0, 0, 1, 4]),
    st.sampled_from([0, 0, -5000, 5000, -(10**8)]),
    st.sampled_from([-1, -1, 7]),
    st.integers(0, 3),
)


def build(spec, base_offset=0) -> bytes:
    count, size, keyed, codec, ts_offset, producer_id, epoch = spec
    builder = RecordBatchBuilder(
        compression=codec,
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=0 if producer_id >= 0 else -1,
        partition_leader_epoch=epoch,
    )
    for i in range(count):
        key = b"k%d" % i if keyed else None
        builder.append(key, bytes([i % 256]) * size, NOW_MS + ts_offset + i, None)
    return builder.build()


def fix_crcs(raw: bytearray) -> None:
    """Each batch whose header still parses gets its CRC recomputed, so changes reach the
    checks behind the CRC."""
    pos = 0
    while len(raw) - pos >= 61:
        header = read_header(raw, pos)
        size = header.size_in_bytes
        if header.batch_length < 49 or pos + size > len(raw):
            return
        raw[CRC_OFFSET + pos : CRC_OFFSET + pos + 4] = compute_crc(raw, pos, size).to_bytes(
            4, "big"
        )
        pos += size


@st.composite
def mangled_input(draw) -> bytes:
    raw = bytearray(b"".join(build(spec) for spec in draw(st.lists(BATCH, min_size=1, max_size=4))))
    for position, value in draw(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)))):
        raw[position % len(raw)] = value
    if draw(st.booleans()):
        fix_crcs(raw)
    cut = draw(st.sampled_from([0, 0, 0, 1, 13, 70]))
    return bytes(raw[: max(0, len(raw) - cut)]) + draw(st.sampled_from([b"", b"", b"\x00" * 5]))


def outcome(run):
    try:
        return "accepted", run()
    except SeglogError as exc:
        return type(exc), str(exc)


@settings(max_examples=400, deadline=None)
@given(mangled_input(), st.sampled_from(CONFIGS))
def test_the_scan_refuses_exactly_what_the_per_batch_validation_refuses(raw, config):
    def single_pass():
        validated = validate_records(raw, config, NOW_MS)
        return bytes(validated.view), validated.batches, validated.offsets, validated.max_timestamp

    def reference():
        view, batches = append_reference.validate_records(raw, config, NOW_MS)
        offsets = sum(h.record_count for _, h in batches)
        max_timestamp = max([NO_TIMESTAMP, *(h.max_timestamp for _, h in batches)])
        return bytes(view), batches, offsets, max_timestamp

    assert outcome(single_pass) == outcome(reference)


def index_entries(index) -> list[tuple[int, int]]:
    return [tuple(index.entry(n)) for n in range(index.entries)]


@settings(max_examples=60, deadline=None)
@given(
    appends=st.lists(
        st.tuples(st.lists(BATCH, min_size=1, max_size=6), st.sampled_from([None, None, 9])),
        min_size=1,
        max_size=6,
    ),
    interval=st.sampled_from([0, 100, 700, 4096]),
)
def test_the_single_pass_append_writes_the_bytes_and_index_entries_of_the_per_batch_path(
    tmp_path_factory, appends, interval
):
    config = LogConfig(index_interval_bytes=interval, message_timestamp_before_max_ms=2**62)
    root = tmp_path_factory.mktemp("append")
    leader = Log.open(root / "t-0", config)
    follower = Log.open(root / "t-1", config)
    expected = bytearray()
    offset_entries: list[tuple[int, int]] = []
    time_entries: list[tuple[int, int]] = []
    state = (0, NO_TIMESTAMP, 0)
    next_offset = 0
    producers = iter(range(1000, 2000))  # a producer per batch: each its first sequence
    for specs, leader_epoch in appends:
        specs = [s if s[5] < 0 else (*s[:5], next(producers), s[6]) for s in specs]
        raw = b"".join(build(spec) for spec in specs)
        view, batches = append_reference.validate_records(raw, config, NOW_MS)
        buffers, appended, _ = assign_offsets(view, batches, next_offset, leader_epoch, -1)
        old_entries, old_times, state = append_reference.index_entries(
            list(appended),
            position=len(expected),
            interval=interval,
            state=state,
            last_time_ms=time_entries[-1][0] if time_entries else NO_TIMESTAMP,
        )
        offset_entries += old_entries
        time_entries += old_times
        written = b"".join(bytes(b) for b in buffers)
        info = leader.append(raw, leader_epoch=leader_epoch)
        assert (info.first_offset, info.last_offset) == (next_offset, appended[-1].last_offset)
        next_offset = appended[-1].last_offset + 1
        follower.append_as_follower(written)
        expected += written
    for log in (leader, follower):
        segment = log.active_segment
        assert segment.log.read(0, segment.size) == bytes(expected)
        assert index_entries(segment.offset_index) == offset_entries
        assert index_entries(segment.time_index) == time_entries
        assert log.log_end_offset == next_offset
    leader.close()
    follower.close()


@st.composite
def replicated_input(draw) -> tuple[bytes, int]:
    """Batches as a leader stored them (offsets from 100 on), then changed."""
    parts, offset = [], 100
    for spec in draw(st.lists(BATCH, min_size=1, max_size=4)):
        offset += draw(st.sampled_from([0, 0, 0, 3]))  # a compacted leader's gaps
        parts.append(build(spec, base_offset=offset))
        offset += spec[0]
    raw = bytearray(b"".join(parts))
    for position, value in draw(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)))):
        raw[position % len(raw)] = value
    if draw(st.booleans()):
        fix_crcs(raw)
    return bytes(raw), draw(st.sampled_from([100, 99, 101]))


@settings(max_examples=300, deadline=None)
@given(replicated_input(), st.booleans())
def test_the_follower_scan_refuses_exactly_what_the_per_batch_check_refuses(
    replicated, gaps_allowed
):
    raw, next_offset = replicated

    def single_pass():
        scanned = scan_follower_records(raw, next_offset, gaps_allowed=gaps_allowed)
        return scanned.first_offset, scanned.last_offset, scanned.max_timestamp

    def reference():
        batches = validate_follower_records(raw, next_offset, gaps_allowed=gaps_allowed)
        return (
            batches[0][1].base_offset,
            batches[-1][1].last_offset,
            max(h.max_timestamp for _, h in batches),
        )

    assert outcome(single_pass) == outcome(reference)


def test_the_scans_crc32c_is_the_crc32c_librarys():
    data = os.urandom(1_100_000)
    # Lengths around the three-way loop's block sizes (3 x 256, 3 x 8192), the folding's
    # threshold (1024: 4 blocks of 64 bytes and more) and its 256-byte steps, a 1 MiB batch,
    # and unaligned starts.
    lengths = (0, 1, 7, 8, 9, 767, 768, 769, 1023, 1024, 1025, 1087, 1279, 1280, 1343)
    for length in (*lengths, 24_575, 24_576, 24_577, 69_000, 1_048_576 - 4096, 1_048_576):
        for start in range(4):
            chunk = data[start : start + length]
            expected = crc32c(chunk)
            assert scan_crc32c(chunk) == expected
            assert scan_crc32c(chunk, False, False) == expected  # the crc32 loop, unfolded
            assert scan_crc32c(chunk, True) == expected


def test_a_leader_append_keeps_the_batches_own_epochs_when_the_node_gives_none(tmp_path):
    log = Log.open(tmp_path / "t-0")
    now = time.time_ns() // 1_000_000
    raw = b"".join(build((2, 10, False, 0, now - NOW_MS, -1, epoch)) for epoch in (1, 1, 3))
    log.append(raw)
    assert [(e.epoch, e.start_offset) for e in log.leader_epochs.entries] == [(1, 0), (3, 4)]
    log.close()


def test_a_failed_batch_write_leaves_nothing_behind_and_later_appends_work(tmp_path):
    """write_batches' error path: the system call's error, as a retriable StorageError, the
    log end where it was, and the next append at the same offset."""
    log = Log.open(tmp_path / "t-0", LogConfig(index_interval_bytes=0))
    now = time.time_ns() // 1_000_000
    first = build((2, 10, False, 0, now - NOW_MS, -1, 0))
    log.append(first)
    segment = log.active_segment
    log_fd = segment.log._fd
    saved = os.dup(log_fd)
    read_only = os.open(tmp_path / "read-only", os.O_RDONLY | os.O_CREAT, 0o644)
    os.dup2(read_only, log_fd)  # every write to the .log now fails with EBADF
    try:
        with pytest.raises(StorageError, match="failed") as caught:
            log.append(first + first)
        assert caught.value.retriable
    finally:
        os.dup2(saved, log_fd)
        os.close(saved)
        os.close(read_only)
    assert (log.log_end_offset, segment.size) == (2, len(first))
    assert log.append(first).first_offset == 2
    assert segment.log.read(0, segment.size)[len(first) + 16 :] == first[16:]
    log.close()
