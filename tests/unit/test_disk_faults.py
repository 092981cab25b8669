"""Bits flipped on disk in a partition directory, found by recovery after a crash.

The CRC-32C of a batch does not cover baseOffset, batchLength, partitionLeaderEpoch or magic,
and index and checkpoint files carry no checksum at all: recovery must check what its place
in the log says each field must be, cut the log before the damage, and never invent an offset.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog.errors import CorruptRecordError
from seglog.records import iter_records
from seglog.storage import Log, LogConfig
from tests.batches import make_batch

CONFIG = LogConfig(segment_bytes=1024, index_interval_bytes=128)
BATCHES = 60
# Field offsets inside a v2 batch header.
BASE_OFFSET_AT, BATCH_LENGTH_AT, EPOCH_AT, MAGIC_AT = 0, 8, 12, 16
FIRST_RECORD_AT = 61


def value_of(offset: int) -> bytes:
    return b"%04d" % offset + b"v" * 40


def write_crashed_log(directory: Path, *, leader_epoch: int | None = None) -> Path:
    """A log of several segments, one record per batch, left as after a SIGKILL: no
    clean-shutdown marker (its recovery point is whatever the last checkpoint said)."""
    log = Log.open(directory / "t-0", CONFIG)
    for offset in range(BATCHES):
        log.append(make_batch([value_of(offset)]), leader_epoch=leader_epoch)
    assert len(log.segments) >= 5
    log.close()
    (directory / ".kafka_cleanshutdown").unlink()
    return directory / "t-0"


def batch_starts(path: Path) -> list[int]:
    raw = path.read_bytes()
    starts, position = [], 0
    while position < len(raw):
        starts.append(position)
        position += 12 + struct.unpack_from(">i", raw, position + BATCH_LENGTH_AT)[0]
    return starts


def flip_bit(path: Path, byte_position: int, bit: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[byte_position] ^= 1 << bit
    path.write_bytes(bytes(raw))


def flip_in_field(path: Path, batch_start: int, field_at: int, field_bytes: int, bit: int) -> None:
    """Flip bit `bit` (0 = least significant) of a big-endian field."""
    flip_bit(path, batch_start + field_at + field_bytes - 1 - bit // 8, bit % 8)


def read_everything(log: Log) -> list[tuple[int, bytes]]:
    """Every record from the log start to the log end, segment by segment (each read answers
    from one segment). Decoding checks every batch's CRC."""
    records: list[tuple[int, bytes]] = []
    offset = log.log_start_offset
    for _ in range(BATCHES * 4):
        if offset >= log.log_end_offset:
            break
        chunk = [(r.offset, r.value) for r in iter_records(log.read(offset, 1 << 20))]
        assert chunk, f"no record at {offset} below the log end {log.log_end_offset}"
        records += chunk
        offset = chunk[-1][0] + 1
    return records


def assert_a_clean_prefix(log: Log) -> int:
    """The log holds offsets 0.. with their own values and nothing else, and takes appends
    at its end with the right offsets (also after another reopen)."""
    records = read_everything(log)
    end = log.log_end_offset
    assert records == [(offset, value_of(offset)) for offset in range(end)]
    assert log.append(make_batch([value_of(end)])).first_offset == end
    return end


def older_segment(directory: Path) -> tuple[Path, int]:
    """The second segment (neither the first nor the last) and its base offset."""
    path = sorted(directory.glob("*.log"))[1]
    return path, int(path.name[:20])


def test_a_flipped_base_offset_bit_in_an_older_segment_ends_the_log_before_it(tmp_path, caplog):
    """The audit's case: bit 60 of a batch's base offset, in a segment below the recovery
    point, once made the log end 2^60 + 385, deleted the later segments and wedged appends."""
    directory = write_crashed_log(tmp_path)
    path, base = older_segment(directory)
    flip_in_field(path, batch_starts(path)[1], BASE_OFFSET_AT, 8, 60)
    log = Log.open(directory, CONFIG)
    try:
        assert log.log_end_offset == base + 1  # the last valid offset before the damage, + 1
        assert assert_a_clean_prefix(log) == base + 1
    finally:
        log.close()
    message = next(r.getMessage() for r in caplog.records if "corrupt data" in r.getMessage())
    assert path.name in message and f"baseOffset {(1 << 60) + base + 1}" in message
    assert "next segment's base offset" in message
    reopened = Log.open(directory, CONFIG)
    try:
        assert reopened.log_end_offset == base + 2
    finally:
        reopened.close()


def test_every_bit_of_an_older_batch_s_base_offset_is_caught(tmp_path):
    """Low bits too: raised a little, the batch overlaps the next one (its offsets jumped);
    lowered, it goes back below the previous batch's end."""
    for bit in range(64):
        directory = write_crashed_log(tmp_path / str(bit))
        path, base = older_segment(directory)
        flip_in_field(path, batch_starts(path)[1], BASE_OFFSET_AT, 8, bit)
        log = Log.open(directory, CONFIG)
        try:
            assert log.log_end_offset == base + 1, f"bit {bit}"
            assert_a_clean_prefix(log)
        finally:
            log.close()


def test_a_flipped_bit_in_length_magic_epoch_or_a_record_cuts_at_that_batch(tmp_path):
    cases = {
        "batchLength high bit": (BATCH_LENGTH_AT, 4, 20),
        "batchLength low bit": (BATCH_LENGTH_AT, 4, 1),
        "magic": (MAGIC_AT, 1, 0),
        "partitionLeaderEpoch": (EPOCH_AT, 4, 3),
        "a record byte (the CRC)": (FIRST_RECORD_AT, 1, 5),
    }
    for name, (field_at, field_bytes, bit) in cases.items():
        directory = write_crashed_log(tmp_path / name.replace(" ", "-"), leader_epoch=7)
        path, base = older_segment(directory)
        flip_in_field(path, batch_starts(path)[2], field_at, field_bytes, bit)
        log = Log.open(directory, CONFIG)
        try:
            assert log.log_end_offset == base + 2, name
            assert_a_clean_prefix(log)
            assert log.leader_epochs.latest_epoch == 7
        finally:
            log.close()


def older_index(directory: Path, suffix: str, entries: int, entry_bytes: int) -> Path:
    path = sorted(directory.glob(f"*{suffix}"))[1]
    assert path.stat().st_size >= entries * entry_bytes, path
    return path


def test_a_flipped_offset_index_entry_is_rebuilt_not_trusted(tmp_path):
    directory = write_crashed_log(tmp_path)
    path = older_index(directory, ".index", 2, 8)
    original = path.read_bytes()
    # The first entry's relative offset raised by one: still increasing, still inside the
    # segment, so only a comparison with the log shows it.
    flip_bit(path, 3, 0)
    log = Log.open(directory, CONFIG)
    try:
        assert log.log_end_offset == BATCHES
        assert read_everything(log) == [(o, value_of(o)) for o in range(BATCHES)]
    finally:
        log.close()
    assert path.read_bytes() == original


def test_a_flipped_time_index_entry_is_rebuilt_not_trusted(tmp_path):
    directory = write_crashed_log(tmp_path)
    path = older_index(directory, ".timeindex", 1, 12)
    original = path.read_bytes()
    flip_bit(path, 7, 0)  # the first entry's timestamp, one millisecond off
    log = Log.open(directory, CONFIG)
    try:
        assert log.log_end_offset == BATCHES
    finally:
        log.close()
    assert path.read_bytes() == original


def test_an_unreadable_leader_epoch_checkpoint_is_rebuilt_from_the_batches(tmp_path):
    directory = write_crashed_log(tmp_path, leader_epoch=3)
    checkpoint = directory / "leader-epoch-checkpoint"
    assert checkpoint.read_text() == "0\n1\n3 0\n"
    flip_bit(checkpoint, 0, 1)  # version "0" becomes "2"
    log = Log.open(directory, CONFIG)
    try:
        assert log.leader_epochs.entries == [(3, 0)]
        assert log.log_end_offset == BATCHES
    finally:
        log.close()
    assert checkpoint.read_text() == "0\n1\n3 0\n"


def test_a_damaged_producer_snapshot_falls_back_and_the_log_stays_whole(tmp_path):
    directory = write_crashed_log(tmp_path)
    snapshots = sorted(directory.glob("*.snapshot"))
    assert snapshots, "rolled segments leave producer snapshots"
    flip_bit(snapshots[-1], snapshots[-1].stat().st_size // 2, 4)
    log = Log.open(directory, CONFIG)
    try:
        assert log.log_end_offset == BATCHES
        assert_a_clean_prefix(log)
    finally:
        log.close()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    file_choice=st.integers(min_value=0),
    position_choice=st.integers(min_value=0),
    bit=st.integers(0, 7),
)
def test_a_random_flipped_bit_anywhere_never_invents_an_offset(
    tmp_path_factory, file_choice, position_choice, bit
):
    """Whatever bit of whatever file flips, the reopened log is a prefix of what was written
    (each offset with its own record, every batch passing its CRC) and takes appends at its
    end. Cutting more than the damage is allowed (replicas restore it); inventing is not."""
    directory = write_crashed_log(tmp_path_factory.mktemp("flip"))
    files = sorted(p for p in directory.iterdir() if p.is_file() and p.stat().st_size)
    target = files[file_choice % len(files)]
    flip_bit(target, position_choice % target.stat().st_size, bit)
    log = Log.open(directory, CONFIG)
    try:
        end = assert_a_clean_prefix(log)
        assert end <= BATCHES
    finally:
        log.close()


def test_garbage_after_the_last_batch_blames_nothing_before_it(tmp_path):
    """Bytes that are not a batch (wrong magic, an impossible epoch and offset) end the log
    where they start: only a CRC-valid batch may make recovery cut earlier batches."""
    directory = write_crashed_log(tmp_path, leader_epoch=5)
    last = sorted(directory.glob("*.log"))[-1]
    garbage = struct.pack(">qiiB", 0, 200, -7, 9) + bytes(200)
    with open(last, "ab") as tail:
        tail.write(garbage)
    log = Log.open(directory, CONFIG)
    try:
        assert log.log_end_offset == BATCHES
        assert_a_clean_prefix(log)
    finally:
        log.close()


def test_after_a_clean_shutdown_a_flipped_base_offset_at_a_segment_s_ends_is_still_cut(tmp_path):
    """A clean start reads no segment whole (Kafka's trade-off), but it reads the first batch
    of each segment and the batches after its last index entry: a base offset flipped there
    is cut as after a crash."""
    for which in ("first", "last"):
        directory = tmp_path / which / "t-0"
        log = Log.open(directory, CONFIG)
        for offset in range(BATCHES):
            log.append(make_batch([value_of(offset)]))
        log.close()
        assert (tmp_path / which / ".kafka_cleanshutdown").exists()
        path, base = older_segment(directory)
        starts = batch_starts(path)
        damaged = 0 if which == "first" else len(starts) - 1
        flip_in_field(path, starts[damaged], BASE_OFFSET_AT, 8, 60)
        reopened = Log.open(directory, CONFIG)
        try:
            assert reopened.log_end_offset == base + damaged, which
            assert_a_clean_prefix(reopened)
        finally:
            reopened.close()


def test_a_read_refuses_a_batch_whose_offsets_cannot_be_in_its_segment(tmp_path):
    """A flipped bit in the middle of a segment after a clean start is not read at start-up
    (only a crash pays for the full walk); a fetch reaching that batch refuses it instead of
    answering records under offset 2^60, and reads before it are untouched."""
    directory = tmp_path / "t-0"
    log = Log.open(directory, CONFIG)
    for offset in range(BATCHES):
        log.append(make_batch([value_of(offset)]))
    log.close()
    path, base = older_segment(directory)
    middle = len(batch_starts(path)) // 2
    flip_in_field(path, batch_starts(path)[middle], BASE_OFFSET_AT, 8, 60)
    reopened = Log.open(directory, CONFIG)
    try:
        before = [(r.offset, r.value) for r in iter_records(reopened.read(base, 1 << 20))]
        assert before[:middle] == [(o, value_of(o)) for o in range(base, base + middle)]
        with pytest.raises(CorruptRecordError, match="outside the segment"):
            reopened.read(base + middle, 1 << 20)
    finally:
        reopened.close()


def test_a_segment_rebuilt_in_the_middle_keeps_the_epochs_of_the_segments_after_it(tmp_path):
    """An older segment whose index did not match its log is rebuilt while the segments
    after it are kept: the leader epochs that start in those later segments stay."""
    directory = tmp_path / "t-0"
    log = Log.open(directory, CONFIG)
    for offset in range(BATCHES):
        log.append(make_batch([value_of(offset)]), leader_epoch=1 if offset < 30 else 2)
    epochs = log.leader_epochs.entries
    assert [e.epoch for e in epochs] == [1, 2]
    log.close()
    (tmp_path / ".kafka_cleanshutdown").unlink()
    index = sorted(directory.glob("*.index"))[1]
    assert index.stat().st_size >= 16
    flip_bit(index, 3, 0)  # rebuilt from the log, the later segments kept
    reopened = Log.open(directory, CONFIG)
    try:
        assert reopened.log_end_offset == BATCHES
        assert reopened.leader_epochs.entries == epochs
    finally:
        reopened.close()


def test_an_unreadable_data_dir_checkpoint_is_forgotten_and_the_logs_are_checked_whole(tmp_path):
    """The recovery-point file beside the logs damaged after a clean shutdown: the data dir
    still opens, and the logs are checked as after a crash (the marker is not trusted)."""
    directory = tmp_path / "t-0"
    log = Log.open(directory, CONFIG)
    for offset in range(BATCHES):
        log.append(make_batch([value_of(offset)]))
    log.close()
    assert (tmp_path / ".kafka_cleanshutdown").exists()
    flip_bit(tmp_path / "recovery-point-offset-checkpoint", 0, 1)  # version "0" becomes "2"
    path, base = older_segment(directory)
    middle = len(batch_starts(path)) // 2
    flip_in_field(path, batch_starts(path)[middle], BASE_OFFSET_AT, 8, 60)
    reopened = Log.open(directory, CONFIG)
    try:
        assert reopened.log_end_offset == base + middle
        assert_a_clean_prefix(reopened)
    finally:
        reopened.close()


def test_a_power_cut_that_emptied_an_unflushed_middle_segment_ends_the_log_there(tmp_path):
    """A power cut keeps the files it had created but not their unflushed bytes: a rolled
    segment above the recovery point can come back empty, or ending at a batch boundary
    short of the next segment's base, with whole later segments after it. Each piece looks
    valid; together they skip offsets. The log ends at the gap (a log that is not compacted
    never skips offsets), so the replica fetches the rest instead of claiming it."""
    for cut in ("emptied", "short by one batch"):
        directory = write_crashed_log(tmp_path / cut.replace(" ", "-"))
        (directory.parent / "recovery-point-offset-checkpoint").write_text("0\n1\nt 0 0\n")
        path, base = older_segment(directory)
        starts = batch_starts(path)
        keep = 0 if cut == "emptied" else starts[-1]
        os.truncate(path, keep)
        log = Log.open(directory, CONFIG)
        try:
            expected_end = base if cut == "emptied" else base + len(starts) - 1
            assert log.log_end_offset == expected_end, cut
            assert_a_clean_prefix(log)
        finally:
            log.close()
