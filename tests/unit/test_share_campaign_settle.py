"""The share campaign's wait for its members once the producers stopped
(tests/faults/share_campaign.py ShareMembers.settle), on histories written here as the
workload's processes write them: it waits as long as records keep being acknowledged, and
gives up once none is for the stall timeout."""

from __future__ import annotations

import threading
import time

from tests.faults.history import HistoryWriter
from tests.faults.share_campaign import ShareMembers

RECORDS = 8


def _members(tmp_path) -> ShareMembers:
    history_dir = tmp_path / "history"
    with HistoryWriter(history_dir, "producer-0") as producer:
        for offset in range(RECORDS):
            sent = {"value": f"producer-0-{offset}", "key": "k0"}
            producer.record("ok", "send", {**sent, "partition": 0, "offset": offset})
    members = ShareMembers(tmp_path, history_dir, "127.0.0.1:1", "t", "id")
    members.history_dir.mkdir(parents=True)
    return members


def _acknowledge(members: ShareMembers, offsets: range, every_s: float = 0.0) -> None:
    with HistoryWriter(members.history_dir, "share-0") as member:
        for offset in offsets:
            member.record("ok", "share-fetch", {"records": [[0, offset, 1]]})
            member.record("ok", "share-ack", {"records": [[0, offset]]})
            time.sleep(every_s)  # a member's pace, not synchronisation


def test_settles_at_once_when_every_record_is_done(tmp_path):
    members = _members(tmp_path)
    _acknowledge(members, range(RECORDS))
    assert members.settle(stall_timeout_s=5.0)


def test_a_queue_that_stops_draining_fails_after_the_stall_timeout(tmp_path):
    members = _members(tmp_path)
    _acknowledge(members, range(RECORDS - 1))  # the last record never done
    started = time.monotonic()
    assert not members.settle(stall_timeout_s=1.0)
    assert time.monotonic() - started >= 1.0
    assert not members.verdict().ok


def test_a_queue_draining_slower_than_the_stall_timeout_in_total_settles(tmp_path):
    members = _members(tmp_path)
    # each record done within the stall timeout of the one before, all of them well past it
    pace_s, stall_timeout_s = 0.5, 3.0
    writer = threading.Thread(target=_acknowledge, args=(members, range(RECORDS), pace_s))
    started = time.monotonic()
    writer.start()
    try:
        assert members.settle(stall_timeout_s=stall_timeout_s)
    finally:
        writer.join()
    assert time.monotonic() - started > pace_s * (RECORDS - 1)
