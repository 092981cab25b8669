"""remote_reads.ReadAhead: a read asking for bytes still on their way waits for them instead
of fetching them again; bytes never coming (a failed read-ahead) release it at once."""

from __future__ import annotations

import threading

from seglog.storage.remote_reads import ReadAhead


def _take_in_thread(ahead: ReadAhead, offset: int) -> tuple[threading.Thread, list]:
    got: list = []
    thread = threading.Thread(target=lambda: got.append(ahead.take("seg", offset)), daemon=True)
    thread.start()
    return thread, got


def test_a_read_waits_for_bytes_being_fetched_ahead():
    ahead = ReadAhead(1 << 20, wait_s=30)
    ahead.begin("seg", 10)
    thread, got = _take_in_thread(ahead, 10)
    thread.join(0.2)
    assert thread.is_alive()  # waiting, not gone to the store
    ahead.put("seg", 10, 4096, b"batches")
    thread.join(5)
    assert got == [(4096, b"batches")] and ahead.hits == 1


def test_an_abandoned_read_ahead_releases_the_waiting_read():
    ahead = ReadAhead(1 << 20, wait_s=30)
    ahead.begin("seg", 10)
    thread, got = _take_in_thread(ahead, 10)
    ahead.abandon("seg", 10)
    thread.join(5)
    assert got == [None]
    assert ahead.take("seg", 11) is None  # nothing coming: no wait at all


def test_held_bytes_are_bounded():
    ahead = ReadAhead(10)
    ahead.put("seg", 1, 0, b"123456")
    ahead.put("seg", 2, 6, b"123456")  # past 10 bytes: the oldest goes
    assert ahead.take("seg", 1) is None
    assert ahead.take("seg", 2) == (6, b"123456")
