import os
import threading

import pytest

from seglog.errors import CorruptIndexError, InvalidOffsetError
from seglog.storage import OffsetIndex, TimeIndex, open_files


def test_offset_index_stores_offsets_relative_to_the_base(tmp_path):
    index = OffsetIndex(tmp_path / "00000000000000000050.index", 50, 1024)
    index.append(55, 4096)
    index.close()
    raw = (tmp_path / "00000000000000000050.index").read_bytes()
    assert raw == (5).to_bytes(4, "big") + (4096).to_bytes(4, "big")  # trimmed on close


def test_offset_index_lookup_finds_the_largest_entry_not_above_the_target(tmp_path):
    # Enough entries that the warm tail (8192 bytes = 1024 entries) and the cold head differ.
    index = OffsetIndex(tmp_path / "0.index", 0, 1 << 20)
    for i in range(1, 3000):
        index.append(i * 10, i * 100)
    assert index.lookup(5) == (0, 0)  # below the first entry
    assert index.lookup(10) == (10, 100)
    assert index.lookup(15) == (10, 100)  # cold section
    assert index.lookup(29_985) == (29_980, 299_800)  # warm section
    assert index.lookup(10**9) == (29_990, 299_900)


def test_offset_index_refuses_offsets_that_do_not_increase(tmp_path):
    index = OffsetIndex(tmp_path / "0.index", 0, 1024)
    index.append(9, 100)
    with pytest.raises(
        InvalidOffsetError, match=r"offset \(7\) no larger than the last offset appended \(9\)"
    ):
        index.append(7, 200)


def test_offset_index_reports_full_and_refuses_more(tmp_path):
    index = OffsetIndex(tmp_path / "0.index", 0, 8 * 3)
    for i in range(3):
        index.append(i + 1, (i + 1) * 10)
    assert index.is_full()
    # A programmer error (the segment rolls before an index fills), not corrupt data.
    with pytest.raises(AssertionError, match="full index"):
        index.append(10, 1000)


def test_offset_index_truncate_and_reopen(tmp_path):
    path = tmp_path / "0.index"
    index = OffsetIndex(path, 0, 1024)
    for i in range(1, 10):
        index.append(i * 2, i * 50)
    index.truncate_to(9)  # drops entries with offsets 10, 12, ... 18
    assert index.entries == 4 and index.lookup(100).offset == 8
    index.close()
    reopened = OffsetIndex(path, 0, 1024, writable=False)
    assert reopened.entries == 4 and reopened.lookup(7) == (6, 150)


def test_untrimmed_index_fails_its_sanity_check(tmp_path):
    path = tmp_path / "0.index"
    index = OffsetIndex(path, 0, 1024)
    index.append(3, 100)
    index.flush()  # left at its preallocated 1024 bytes, as a crash leaves it
    reopened = OffsetIndex(path, 0, 1024, writable=False)
    with pytest.raises(CorruptIndexError, match="preallocated"):
        reopened.sanity_check(log_bytes=10_000)


def test_time_index_keeps_only_increasing_timestamps(tmp_path):
    index = TimeIndex(tmp_path / "100.timeindex", 100, 1200)
    index.maybe_append(1000, 100)
    index.maybe_append(900, 105)  # not larger: skipped
    index.maybe_append(2000, 110)
    assert index.entries == 2
    assert index.lookup(1500) == (1000, 100)
    assert index.lookup(500) == (-1, 100)
    assert index.lookup(2500) == (2000, 110)
    index.truncate_to(110)
    assert index.entries == 1


def test_time_index_never_writes_the_no_timestamp_value(tmp_path):
    # A segment whose batches carry no timestamp (-1) rolls or closes with no time entry,
    # as Kafka's maybeAppend compares against the (-1, baseOffset) of an empty index.
    index = TimeIndex(tmp_path / "100.timeindex", 100, 1200)
    index.maybe_append(-1, 100, skip_full_check=True)
    index.append_entries([(-1, 101), (-1, 102)])
    assert index.entries == 0
    index.append_entries([(-1, 103), (0, 104)])
    assert [index.entry(n) for n in range(index.entries)] == [(0, 104)]


def test_offset_index_appends_many_entries_in_one_write_and_checks_each(tmp_path):
    index = OffsetIndex(tmp_path / "0.index", 0, 1024)
    index.append_entries([(3, 100), (7, 200), (9, 350)])
    assert [index.entry(n) for n in range(3)] == [(3, 100), (7, 200), (9, 350)]
    with pytest.raises(CorruptIndexError, match="position 300 no larger"):
        index.append_entries([(12, 400), (15, 300)])
    assert index.entries == 3  # nothing of a refused list is written


def test_time_index_reserves_its_last_slot_for_the_rolling_segment(tmp_path):
    index = TimeIndex(tmp_path / "0.timeindex", 0, 12 * 3)
    index.append_entries([(1000, 1), (900, 2), (2000, 3)])  # 900 is not larger: skipped
    assert index.entries == 2 and index.is_full() and index.free_slots() == 0
    with pytest.raises(CorruptIndexError, match="full time index"):
        index.maybe_append(3000, 4)
    index.maybe_append(3000, 4, skip_full_check=True)  # the roll's final entry
    assert index.entries == 3 and index.last_entry == (3000, 4)
    index.append_entries([])  # a segment's append that adds no entry: nothing to refuse
    index.append_entries([(2500, 5)])  # not larger than the last: skipped, not refused
    assert index.entries == 3


def test_entries_reach_the_file_as_appended_and_truncation_zeroes_them_there(tmp_path):
    # Entries are written through the file descriptor and read through the map: the file
    # (read here by a separate open, as a crashed process's successor would) and the lookups
    # must agree before any close or flush.
    path = tmp_path / "00000000000000000100.index"
    index = OffsetIndex(path, 100, 1 << 20)
    index.append_entries([(110, 4096), (120, 8192), (130, 12288)])

    def entry(relative: int, position: int) -> bytes:
        return relative.to_bytes(4, "big") + position.to_bytes(4, "big")

    assert path.read_bytes()[:24] == entry(10, 4096) + entry(20, 8192) + entry(30, 12288)
    assert index.lookup(125) == (120, 8192)
    index.truncate_to(120)
    assert path.read_bytes()[:24] == entry(10, 4096) + bytes(16)
    assert index.lookup(125) == (110, 4096)
    index.append(140, 16384)
    assert path.read_bytes()[:16] == entry(10, 4096) + entry(40, 16384)
    assert index.lookup(10**6) == (140, 16384)
    index.flush()
    index.close()
    assert path.read_bytes() == entry(10, 4096) + entry(40, 16384)


def test_resetting_an_untrimmed_index_after_a_crash_keeps_its_preallocation_a_hole(tmp_path):
    # A crash leaves the active segment's index at its preallocated size (a sparse file);
    # reopened, every slot counts as an entry, and recovery resets it before the rebuild.
    # Zeroing every slot allocated max_index_bytes of real blocks per index file (10 MiB,
    # twice per partition at each unclean start): a node with 53 partitions filled its
    # 230 MiB disk on recovery. Only what holds data may be written.
    max_index_bytes = 8 * 1024 * 1024
    path = tmp_path / "00000000000000000000.index"
    index = OffsetIndex(path, 0, max_index_bytes)
    index.append_entries([(10, 4096), (20, 8192)])
    index.flush()  # left at its preallocated size, as a crash leaves it
    allocated_bytes = path.stat().st_blocks * 512
    assert allocated_bytes < 1024 * 1024, "the preallocated file is not sparse here"
    reopened = OffsetIndex(path, 0, max_index_bytes)
    assert reopened.entries == max_index_bytes // 8
    reopened.reset()
    assert reopened.entries == 0
    assert path.stat().st_blocks * 512 <= allocated_bytes + 64 * 1024
    assert path.read_bytes()[:16] == bytes(16)  # the old entries are gone
    reopened.append(30, 12288)
    reopened.close()
    assert path.read_bytes() == (30).to_bytes(4, "big") + (12288).to_bytes(4, "big")


def test_an_index_holds_no_descriptor_and_is_created_by_its_first_entry(tmp_path):
    path = tmp_path / "00000000000000000000.index"
    open_files.SHARED.close_idle()  # what earlier tests left in the node-wide cache
    fds_before = len(os.listdir("/proc/self/fd"))
    index = OffsetIndex(path, 0, 1024)
    assert index.entries == 0 and not path.exists()  # looked at, nothing to create
    index.append(3, 100)
    assert path.stat().st_size == 1024  # preallocated by the first entry
    # The writing descriptor stays while the node's cache keeps it; the mapping needs none.
    assert len(os.listdir("/proc/self/fd")) == fds_before + 1
    open_files.SHARED.close_idle()
    assert len(os.listdir("/proc/self/fd")) == fds_before
    assert index.lookup(4) == (3, 100)
    index.append(5, 200)  # the descriptor opens again for a write
    index.close()
    assert len(os.listdir("/proc/self/fd")) == fds_before
    assert path.read_bytes() == b"".join(n.to_bytes(4, "big") for n in (3, 100, 5, 200))


def test_a_lazy_index_loads_on_its_first_lookup_and_can_be_released_and_reloaded(tmp_path):
    path = tmp_path / "0.index"
    index = OffsetIndex(path, 0, 1 << 16)
    for i in range(1, 500):
        index.append(i * 2, i * 50)
    index.close()
    reopened = OffsetIndex(path, 0, 1 << 16, writable=False)
    assert not reopened.is_loaded  # constructing it read nothing
    assert reopened.lookup(101) == (100, 2500) and reopened.is_loaded
    assert reopened.release() and not reopened.is_loaded
    assert reopened.lookup(999) == (998, 24950) and reopened.entries == 499


def test_lookups_racing_releases_and_remaps_of_their_index_never_fail(tmp_path):
    path = tmp_path / "0.index"
    index = OffsetIndex(path, 0, 1 << 16)
    for i in range(1, 2000):
        index.append(i * 2, i * 50)
    index.make_read_only()
    errors: list[BaseException] = []
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            index.release()
            index.resize(1 << 16)  # stretched and trimmed again: a remap each time
            index.trim_to_valid_size()

    def look() -> None:
        try:
            for i in range(1, 3000):
                target = (i % 1999 + 1) * 2
                assert index.lookup(target + 1) == (target, target * 25)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=churn), threading.Thread(target=look)]
    for t in threads:
        t.start()
    threads[1].join(timeout=60)
    stop.set()
    threads[0].join(timeout=10)
    index.close()
    assert not errors, errors[0]
