"""Reads run without the log's lock while an append writes the file and then moves the log
end offset: a batch already in the file but not yet appended (its offsets past the log end,
so past any high watermark) must not be read, by a consumer (bounded at the high watermark)
or a follower (bounded at the log end). Seen on a real cluster at 60,000 records/s: a
consumer got records past the leader's high watermark and its next fetch was refused
OFFSET_OUT_OF_RANGE. The append is held between its file write and its log end update, so no
timing decides these tests."""

import threading

import pytest

from seglog.records import iter_records
from seglog.storage import Log
from tests.batches import make_batch


def _held_mid_append(log: Log):  # type: ignore[no-untyped-def]
    """Start an append of one batch in a thread and hold it once the batch is in the file,
    before the log end moves; returns (written, release, thread)."""
    segment = log._state._segments.active
    write = segment.append_table
    written, release = threading.Event(), threading.Event()

    def append_then_hold(*args, **kwargs):  # type: ignore[no-untyped-def]
        result = write(*args, **kwargs)
        written.set()
        assert release.wait(30)
        return result

    segment.append_table = append_then_hold  # type: ignore[method-assign]
    thread = threading.Thread(target=log.append, args=(make_batch([b"in flight"]),))
    thread.start()
    assert written.wait(30)
    return written, release, thread


@pytest.mark.parametrize("reader", ["consumer", "follower"])
def test_a_batch_written_but_not_yet_appended_is_not_read(tmp_path, reader):  # type: ignore[no-untyped-def]
    log = Log.open(tmp_path / "t-0")
    log.append(make_batch([b"a", b"b"]))
    log.update_high_watermark(log.log_end_offset)  # caught up: the HW is the log end
    _, release, thread = _held_mid_append(log)
    try:
        assert log.log_end_offset == 2  # the file holds offset 2; the log does not yet
        max_offset = log.high_watermark if reader == "consumer" else None
        found = log.locate_records(0, 1 << 20, max_offset=max_offset)
        assert found.next_offset == 2
        offsets = [r.offset for r in iter_records(found.read())]
        assert offsets == [0, 1]
    finally:
        release.set()
        thread.join()
    # Appended now: read in full.
    found = log.locate_records(0, 1 << 20)
    assert [r.offset for r in iter_records(found.read())] == [0, 1, 2]
    log.close()
