"""Storage faults the engine contains: a failed index write, rolls that flush, torn tails
under a clean-shutdown marker, and index entries that point inside a batch."""

from __future__ import annotations

import os

import pytest

from seglog.errors import StorageError
from seglog.records import iter_records
from seglog.storage import Log, LogConfig
from tests.cluster import batch


def _values(log: Log) -> list[bytes]:
    return [r.value for r in iter_records(log.read(log.log_start_offset, 1 << 30))]


def test_a_failed_index_write_rolls_the_append_back_and_later_appends_work(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(index_interval_bytes=0))
    log.append(batch([b"a"]))
    log.append(batch([b"b"]))
    segment = log.active_segment
    size_before, entries_before = segment.size, segment.offset_index.entries
    index_fd = segment.offset_index._fd
    saved = os.dup(index_fd)
    read_only = os.open(tmp_path / "read-only", os.O_RDONLY | os.O_CREAT, 0o644)
    os.dup2(read_only, index_fd)  # every pwrite to the index now fails with EBADF
    try:
        with pytest.raises(StorageError, match="rolled back") as caught:
            log.append(batch([b"lost"]))
        assert caught.value.retriable
        assert (segment.size, segment.offset_index.entries) == (size_before, entries_before)
        assert log.log_end_offset == 2
    finally:
        os.dup2(saved, index_fd)
        os.close(saved)
        os.close(read_only)
    assert log.append(batch([b"c"])).first_offset == 2
    assert _values(log) == [b"a", b"b", b"c"]
    log.close()
    reopened = Log.open(tmp_path / "t-0")
    try:
        assert _values(reopened) == [b"a", b"b", b"c"]  # nothing of the failed append
    finally:
        reopened.close()
