"""What a hosted log costs in descriptors: its active segment's `.log` and nothing else.
Indexes are mapped with no descriptor and only once used; old segments' files are opened on
use and closed when idle by the node's OpenFileCache, never under a reader (pins)."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest

from seglog.records import iter_records
from seglog.storage import Log, LogConfig
from seglog.storage import open_files as open_files_module
from tests.batches import make_batch

# Small segments with an index entry every batch: many segments, every index in use.
MANY_SEGMENTS = LogConfig(segment_bytes=1024, index_interval_bytes=100)


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def descriptors_on(path: Path) -> int:
    """Descriptors of this process open on `path` (whatever its name became)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        count += target.startswith(str(path))
    return count


def write_segments(log: Log, batches: int) -> None:
    for i in range(batches):
        log.append(make_batch([b"%05d" % i + b"v" * 200]))


def values(log: Log) -> list[int]:
    out: list[int] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        records = list(iter_records(log.read(offset, 1 << 20)))
        out += [int(r.value[:5]) for r in records if r.offset >= offset]
        offset = records[-1].offset + 1
    return out


@pytest.fixture
def small_cache(monkeypatch):
    """The node-wide cache of old segments' files, at 2 files and empty for this test."""
    cache = open_files_module.SHARED
    cache.close_idle()
    monkeypatch.setattr(cache, "capacity", 2)
    yield cache
    cache.close_idle()


def test_a_log_with_one_segment_holds_one_descriptor(tmp_path):
    open_files_module.SHARED.close_idle()  # what earlier tests left in the node-wide cache
    before = open_descriptors()
    log = Log.open(tmp_path / "t-0", LogConfig(index_interval_bytes=0))
    write_segments(log, 20)  # an index entry per batch: both indexes written and mapped
    segment = log.active_segment
    assert segment.offset_index.entries == 19 and segment.time_index.entries > 0
    try:
        # The .log, and the indexes' writing descriptors while the node's cache keeps them
        # (each index had two for good before: its own and its mmap's duplicate).
        assert open_descriptors() - before <= 3
        open_files_module.SHARED.close_idle()
        assert descriptors_on(tmp_path / "t-0") == 1
        write_segments(log, 5)  # appends go on: the indexes open their files again
        assert segment.offset_index.entries == 24
    finally:
        log.close()
    # Its own files all closed; other descriptors of this worker may close meanwhile (a
    # previous test's objects collected), never open.
    assert descriptors_on(tmp_path) == 0 and open_descriptors() <= before


def test_idle_old_segments_hold_no_descriptor(tmp_path, small_cache):
    before = open_descriptors()
    log = Log.open(tmp_path / "t-0", MANY_SEGMENTS)
    try:
        write_segments(log, 60)
        assert len(log.segments) >= 10
        # Rolled segments stay open while among the node's 2 most recently used.
        assert descriptors_on(tmp_path / "t-0") <= 1 + small_cache.capacity
        assert values(log) == list(range(60))  # every old segment read once more
        assert descriptors_on(tmp_path / "t-0") <= 1 + small_cache.capacity
        small_cache.close_idle()
        # Counted on the log's own files: another test's sockets, collected meanwhile in
        # this worker process, once made a process-wide count come out 4 lower.
        assert descriptors_on(tmp_path / "t-0") == 1
    finally:
        log.close()
    reopened = Log.open(tmp_path / "t-0", MANY_SEGMENTS)
    try:
        # Loading opens each segment to check it; the old ones go back to the cache's bound.
        assert descriptors_on(tmp_path / "t-0") <= 1 + small_cache.capacity
        assert values(reopened) == list(range(60))
    finally:
        reopened.close()
    # Its own files all closed; other descriptors of this worker may close meanwhile (a
    # previous test's objects collected), never open.
    assert descriptors_on(tmp_path) == 0 and open_descriptors() <= before


def test_a_new_log_creates_only_its_log_file_and_a_clean_close_leaves_kafkas_three(tmp_path):
    log = Log.open(tmp_path / "t-0")
    names = sorted(p.name for p in (tmp_path / "t-0").iterdir())
    assert names == ["00000000000000000000.log"]  # indexes are created by their first entry
    log.append(make_batch([b"one small batch"]))  # below index_interval_bytes: no entry
    assert sorted(p.name for p in (tmp_path / "t-0").iterdir()) == names
    log.close()
    segment_files = (".log", ".index", ".timeindex")
    names = sorted(p.name for p in (tmp_path / "t-0").iterdir() if p.suffix in segment_files)
    assert names == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
    ]
    assert (tmp_path / "t-0" / "00000000000000000000.index").stat().st_size == 0


def test_lazily_opened_indexes_answer_lookups_after_reopen(tmp_path):
    log = Log.open(tmp_path / "t-0", MANY_SEGMENTS)
    write_segments(log, 60)
    log.close()
    reopened = Log.open(tmp_path / "t-0", MANY_SEGMENTS)
    try:
        old = reopened.segments[len(reopened.segments) // 2]
        active = reopened.active_segment
        # Loading checked them; then old segments let their mappings go, and nothing has
        # used the active segment's since the check.
        assert not old.offset_index.is_loaded and not old.time_index.is_loaded
        assert not active.offset_index.is_loaded and not active.time_index.is_loaded
        middle = (
            old.base_offset + reopened.segments[len(reopened.segments) // 2 + 1].base_offset
        ) // 2
        records = list(iter_records(reopened.read(middle, 1 << 20)))
        assert records[0].offset <= middle and int(records[-1].value[:5]) >= middle
        assert old.offset_index.is_loaded and old.offset_index.entries > 0
        found = reopened.offset_for_timestamp(0)
        assert found is not None and found.offset == 0
        assert reopened.append(make_batch([b"%05d" % 60])).first_offset == 60
        assert active.offset_index.writable
        assert descriptors_on(tmp_path / "t-0") <= 1 + open_files_module.SHARED.capacity
    finally:
        reopened.close()


def test_a_read_of_an_old_segment_does_not_fail_while_the_cache_closes_it(tmp_path, small_cache):
    log = Log.open(tmp_path / "t-0", MANY_SEGMENTS)
    try:
        write_segments(log, 60)
        old = log.segments[1]
        found = log.locate_records(old.base_offset, 1 << 20)
        assert found.segment_slice is not None and found.segment_slice.segment is old
        small_cache.close_idle()
        assert not old.log.is_open
        # A slice found before its file was closed for idleness reads it again by path.
        expected = found.read()
        assert expected and old.log.is_open
        with old.log.pinned() as fd:
            small_cache.close_idle()
            assert old.log.is_open  # pinned: the cache skipped it
            assert os.readlink(f"/proc/self/fd/{fd}").endswith(old.log.path.name)
            assert os.pread(fd, 61, 0) == expected[:61]
        assert small_cache.close_idle() >= 1 and not old.log.is_open  # offered again
    finally:
        log.close()


def test_readers_of_old_segments_race_the_cache_without_an_error(tmp_path, small_cache):
    log = Log.open(tmp_path / "t-0", MANY_SEGMENTS)
    write_segments(log, 60)
    expected = values(log)
    errors: list[BaseException] = []
    stop = threading.Event()

    def closer() -> None:
        while not stop.is_set():
            small_cache.close_idle()

    def reader() -> None:
        try:
            for _ in range(15):
                assert values(log) == expected
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=closer)] + [
        threading.Thread(target=reader) for _ in range(2)
    ]
    try:
        for t in threads:
            t.start()
        for t in threads[1:]:
            t.join(timeout=60)
    finally:
        stop.set()
        threads[0].join(timeout=10)
        log.close()
    assert not errors, errors[0]
    assert small_cache.closed_count > 0


def test_a_transfer_in_progress_survives_its_file_being_closed_for_idleness(tmp_path, small_cache):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=512 * 1024))
    sender, receiver = socket.socketpair()
    try:
        for i in range(40):
            log.append(make_batch([b"%05d" % i + bytes(20_000)]))
        assert len(log.segments) > 1
        found = log.locate_records(log.segments[0].base_offset, 1 << 20).segment_slice
        assert found is not None and found.size > 0
        expected = found.read()
        # A socket buffer far smaller than the slice: the sendfile blocks mid-transfer until
        # the receiver drains it, and the file is closed for idleness meanwhile.
        sender.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1024)
        sent: list[int] = []
        transfer = threading.Thread(target=lambda: sent.append(found.write_to(sender)))
        transfer.start()
        received = bytearray()
        while len(received) < len(expected):
            small_cache.close_idle()
            received += receiver.recv(64 * 1024)
        transfer.join(timeout=10)
        assert bytes(received) == expected and sent == [len(expected)]
    finally:
        sender.close()
        receiver.close()
        log.close()


def test_an_index_loading_while_the_cache_closes_its_own_segment_stays_loaded(
    tmp_path, small_cache, monkeypatch
):
    """Deterministic form of the race above: with room for one file, an old segment's
    index opening its descriptor evicts that same segment's `.log`, whose close releases the
    segment's indexes — on the loading thread, inside the index's own lock. The index must
    come out of its load usable, not unmapped."""
    log = Log.open(tmp_path / "t-0", MANY_SEGMENTS)
    try:
        write_segments(log, 60)
        expected = values(log)
        old = log.segments[1]
        small_cache.close_idle()
        old.release_indexes()
        monkeypatch.setattr(small_cache, "capacity", 1)
        with old.log.pinned():
            pass  # its .log is now the cache's one open file
        assert old.log.is_open and not old.offset_index.is_loaded
        assert old.offset_index.entries > 0  # loads: its descriptor evicts the .log
        assert not old.log.is_open
        assert old.offset_index.lookup(old.base_offset + 1).offset >= old.base_offset
        assert values(log) == expected
    finally:
        log.close()
