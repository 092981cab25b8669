"""A share group's records (share/share_group_log.py) over an in-memory log: written in
Kafka's order on change, read back by a new membership (a coordinator taking over) at the
same epochs and assignments, and a failed write leaving the group as it was."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from seglog.errors import CoordinatorNotAvailableError
from services.gateway.share import share_group_records as records
from services.gateway.share.share_group_log import ShareGroupLog
from services.gateway.share.share_membership import ShareHeartbeat, ShareMembership

TOPIC_IDS = {"queue": "AAAAAAAAAAAAAAAAAAAAAQ"}
PARTITIONS = {"queue": 2}


class MemoryLog:
    """What __consumer_offsets would hold of the group: every record in order, and the
    newest per key (a tombstone removes it)."""

    def __init__(self) -> None:
        self.appended: list[records.Record] = []
        self.held: dict[bytes, bytes] = {}
        self.failing = False

    def persist(self, group_id: str, written: list[records.Record]) -> None:
        if self.failing:
            raise CoordinatorNotAvailableError("the log is not writable")
        self.appended.extend(written)
        for key, value in written:
            if value is None:
                self.held.pop(key, None)
            else:
                self.held[key] = value


def membership(log: MemoryLog, now: list[float]) -> ShareMembership:
    names = {v: k for k, v in TOPIC_IDS.items()}
    registry = SimpleNamespace(
        image=SimpleNamespace(
            topic_id_of=lambda name: TOPIC_IDS.get(name, ""),
            topic_name_of=lambda topic_id: names.get(topic_id, ""),
        )
    )
    return ShareMembership(
        lambda topic: PARTITIONS.get(topic, 0),
        lambda group, member: None,
        heartbeat_interval_ms=1000,
        session_timeout_ms=10_000,
        max_size=10,
        clock=lambda: now[0],
        log=ShareGroupLog(registry, lambda group: dict(log.held), log.persist),  # type: ignore[arg-type]
    )


def beat(member: str, epoch: int, topics: tuple[str, ...] | None = None) -> ShareHeartbeat:
    return ShareHeartbeat("g", member, epoch, None, topics, "client", "/127.0.0.1")


def test_records_are_written_in_kafkas_order_and_read_back_by_a_new_coordinator():
    log, now = MemoryLog(), [100.0]
    first = membership(log, now)
    a = first.heartbeat(beat("a", 0, ("queue",)))
    kinds = [records.record_type(k) for k, _ in log.appended]
    assert kinds == [10, 11, 13, 12, 14, 15]
    b = first.heartbeat(beat("b", 0, ("queue",)))
    a = first.heartbeat(beat("a", a.member_epoch))
    before = first.group("g")
    assert before is not None
    # A second coordinator reads the group back: same epochs, same assignments, and a
    # member heartbeating at its epoch is told nothing new.
    second = membership(log, now)
    loaded = second.group("g")
    assert loaded is not None
    assert (loaded.epoch, loaded.assignment_epoch) == (before.epoch, before.assignment_epoch)
    assert {m: (x.epoch, x.assignment) for m, x in loaded.members.items()} == {
        m: (x.epoch, x.assignment) for m, x in before.members.items()
    }
    assert loaded.state_partitions == {("queue", 0), ("queue", 1)}
    again = second.heartbeat(beat("b", b.member_epoch))
    assert (again.member_epoch, again.assignment) == (b.member_epoch, None)
    # A member leaving: its records tombstoned (14, 13, 10), then the new epoch.
    log.appended.clear()
    second.heartbeat(beat("b", -1))
    tombstones = [(records.record_type(k), v is None) for k, v in log.appended][:3]
    assert tombstones == [(14, True), (13, True), (10, True)]
    assert membership(log, now).group("g").members.keys() == {"a"}  # type: ignore[union-attr]


def test_a_failed_write_leaves_the_group_as_it_was():
    log, now = MemoryLog(), [100.0]
    held = membership(log, now)
    held.heartbeat(beat("a", 0, ("queue",)))
    epoch = held.group("g").epoch  # type: ignore[union-attr]
    log.failing = True
    with pytest.raises(CoordinatorNotAvailableError):
        held.heartbeat(beat("b", 0, ("queue",)))
    group = held.group("g")
    assert group is not None and set(group.members) == {"a"} and group.epoch == epoch
    # Sessions lapse: the expiry's write fails too, and the member stays until it succeeds.
    now[0] += 60
    held.expire_all()
    assert set(held.group("g").members) == {"a"}  # type: ignore[union-attr]
    log.failing = False
    held.expire_all()
    assert held.group("g").members == {}  # type: ignore[union-attr]
    assert membership(log, now).group("g").members == {}  # type: ignore[union-attr]
