"""A produce (or a DeleteRecords) checked while this node led a partition, which becomes a
follower before the produce is written, is refused, not written (Kafka holds its
leaderIsrUpdateLock across the append for this). Written, it would land on a follower
stamped with the new leader's epoch: the follower's log then holds a batch its leader never
wrote, in the leader's own epoch, which truncation by epoch cannot find, and every later
fetch of the partition fails.

The call is held at the partition's lock, which the test holds while the new registration
is applied (as a registration takes that lock), and then let go."""

from __future__ import annotations

import linecache
import sys
import threading

import pytest

from seglog.errors import NotLeaderError
from seglog.storage import LogConfig
from seglog.storage.config import LogManagerConfig
from seglog.storage.log_manager import LogManager
from services.storage_node.partition import Registration
from services.storage_node.replica_manager import ReplicaManager
from tests.batches import make_batch
from tests.waiting import wait_until

LEADER_EPOCH = 9


@pytest.fixture
def replicas(tmp_path):
    logs = LogManager(LogManagerConfig(log_dirs=(str(tmp_path),)), LogConfig())
    logs.startup()
    manager = ReplicaManager(logs, node_id=1)
    manager.apply_state("t", 0, {}, Registration(1, LEADER_EPOCH, 3, (1, 2, 3), (1, 2, 3)))
    yield manager
    manager.stop()
    logs.shutdown()


def waiting_for_the_partition_lock(thread: threading.Thread) -> bool:
    """The thread's innermost Python frame is at a `with held._lock:` statement: it waits
    for the lock the test holds (the acquisition itself runs no Python code)."""
    frame = sys._current_frames().get(thread.ident or -1)
    if frame is None:
        return False
    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    return line.startswith("with held._lock:")


def test_a_produce_checked_as_leader_is_refused_once_the_node_follows(replicas):
    held = replicas.partition("t", 0)
    held.log.append(make_batch([b"before"]), leader_epoch=LEADER_EPOCH)
    results: list[object] = []
    producing = threading.Thread(
        target=lambda: results.append(
            replicas.append("t", [(0, make_batch([b"late"]), LEADER_EPOCH)], acks=1)
        )
    )
    with held._lock:
        producing.start()
        assert wait_until(lambda: waiting_for_the_partition_lock(producing), timeout_s=10)
        # Node 2 leads the next epoch; this node follows it from now on.
        held.apply(Registration(2, LEADER_EPOCH + 1, 4, (1, 2, 3), (1, 2, 3)))
    producing.join(timeout=10)
    [[result]] = results
    assert result.info is None and isinstance(result.error, NotLeaderError)
    assert held.log.log_end_offset == 1
    assert held.log.leader_epochs.latest_epoch == LEADER_EPOCH


def test_records_deleted_as_leader_are_refused_once_the_node_follows(replicas):
    """A DeleteRecords answered on a node that follows by then would move only that
    replica's log start: the caller told its records are gone, the leader keeping them."""
    held = replicas.partition("t", 0)
    for value in (b"a", b"b"):
        held.log.append(make_batch([value]), leader_epoch=LEADER_EPOCH)
    held.log.update_high_watermark(2)
    errors: list[Exception] = []

    def delete() -> None:
        try:
            replicas.delete_records("t", 0, 1, LEADER_EPOCH)
        except NotLeaderError as exc:
            errors.append(exc)

    deleting = threading.Thread(target=delete)
    with held._lock:
        deleting.start()
        assert wait_until(lambda: waiting_for_the_partition_lock(deleting), timeout_s=10)
        held.apply(Registration(2, LEADER_EPOCH + 1, 4, (1, 2, 3), (1, 2, 3)))
    deleting.join(timeout=10)
    assert len(errors) == 1
    assert held.log.log_start_offset == 0
