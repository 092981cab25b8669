"""A deleted topic's partition that the registry's push sets aside around its deletion leaves
no copy (set_aside.py): a clean CI run kept `gone2-1-stray` on one node, the deletion having
come while the set-aside was under way."""

from __future__ import annotations

import threading

import pytest

from seglog.errors import UnknownTopicOrPartitionError
from seglog.storage import LogConfig, ManualClock
from seglog.storage.config import LogManagerConfig
from seglog.storage.log import Log
from seglog.storage.log_manager import LogManager
from seglog.storage.meta_properties import random_uuid
from seglog.storage.set_aside import DeletedTopicIds
from tests.batches import make_batch

CLOCK = ManualClock()


@pytest.fixture
def mgr(tmp_path):
    manager = LogManager(
        LogManagerConfig(log_dirs=(str(tmp_path / "data"),)), LogConfig(), clock=CLOCK
    )
    manager.startup()
    yield manager
    manager.shutdown()


def copies(tmp_path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "data").glob("*-*") if p.is_dir())


def test_a_set_aside_after_its_topics_deletion_deletes_the_log(mgr, tmp_path):
    gone, kept = random_uuid(), random_uuid()
    mgr.create_log("gone", 0, topic_id=gone).append(make_batch([b"v"], timestamp_ms=CLOCK.now_ms()))
    mgr.create_log("kept", 0, topic_id=kept).append(make_batch([b"v"], timestamp_ms=CLOCK.now_ms()))
    assert mgr.delete_set_aside("gone", 0, gone) == []  # came first: nothing set aside yet
    assert mgr.set_aside_log("gone", 0) is None
    assert mgr.set_aside_log("kept", 0).name == "kept-0-stray"  # its topic was not deleted
    assert copies(tmp_path) == ["kept-0-stray"]


def test_a_deletion_during_a_set_aside_waits_for_it_and_deletes_the_copy(
    mgr, tmp_path, monkeypatch
):
    topic_id = random_uuid()
    mgr.create_log("gone", 0, topic_id=topic_id).append(
        make_batch([b"v"], timestamp_ms=CLOCK.now_ms())
    )
    closing, release = threading.Event(), threading.Event()
    close = Log.close

    def slow_close(log: Log) -> None:  # the set-aside held between closing and renaming
        closing.set()
        assert release.wait(10)
        close(log)

    monkeypatch.setattr(Log, "close", slow_close)
    aside = threading.Thread(target=mgr.set_aside_log, args=("gone", 0))
    aside.start()
    assert closing.wait(10)
    with pytest.raises(UnknownTopicOrPartitionError):
        mgr.delete_log("gone", 0)  # already out of the manager's sight
    deleted: list = []
    deletion = threading.Thread(
        target=lambda: deleted.extend(mgr.delete_set_aside("gone", 0, topic_id))
    )
    deletion.start()
    release.set()
    aside.join(10)
    deletion.join(10)
    assert copies(tmp_path) == []
    assert [p.name for p in deleted] == ["gone-0-stray"]


def test_deleted_topic_ids_are_remembered_up_to_their_capacity():
    ids = DeletedTopicIds(capacity=2)
    for topic_id in ("a", "b", "c", ""):
        ids.add(topic_id)
    assert "a" not in ids and "b" in ids and "c" in ids and "" not in ids
