"""A new partition's leader writes its first leader-epoch entry without fsync (the log holds no
batch yet; leader_epoch_cache.py gives the argument, after Kafka's KAFKA-15046). What must
still hold after a crash, shown with a real process SIGKILLed and, on a loop-mounted ext4, a
power cut that loses everything not fsynced:

- every partition created comes back usable (it opens, takes a newer epoch, appends);
- a log flushed after its appends keeps its data and its epoch entry, even when its recovery
  point was checkpointed past them (nothing then recovers it from the batches);
- a log appended and not flushed comes back with epochs that agree with whatever batches
  survived.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from seglog.storage.config import LogConfig, LogManagerConfig
from seglog.storage.leader_epoch_cache import EpochEntry
from seglog.storage.log_manager import LogManager
from services.storage_node.partition import Registration
from services.storage_node.replica_manager import ReplicaManager
from tests.batches import make_batch
from tests.small_filesystem import cut_power, mounted_ext4
from tests.unit.test_log import read_all

EPOCH = 5
TOPIC_ID = "Vw0MOr7cTMqUabAmiOSm4g"  # written in partition.metadata without fsync, at creation
PARTITIONS = 12
RECORDS = 40
FLUSHED, UNFLUSHED = 0, 1  # the partitions appended to; the others stay empty

# The node's own creation path (ReplicaManager.apply_state -> Partition._start_leading), then
# appends stamped with the epoch; partition FLUSHED is flushed and its recovery point
# checkpointed. "ready" once all of it is done; the test then kills the process.
CREATOR = textwrap.dedent("""
    import sys, time
    sys.path[:0] = {paths!r}
    from seglog.storage.config import LogConfig, LogManagerConfig
    from seglog.storage.log_manager import LogManager
    from services.storage_node.partition import Registration
    from services.storage_node.replica_manager import ReplicaManager
    from tests.batches import make_batch
    logs = LogManager(LogManagerConfig(log_dirs=({data!r},)), LogConfig())
    replicas = ReplicaManager(logs, node_id=1)
    for p in range({partitions}):
        state = Registration(1, {epoch}, 0, (1,), (1,), topic_id={topic_id!r})
        replicas.apply_state("t", p, {{}}, state)
    for p in ({flushed}, {unflushed}):
        log = logs.get_log("t", p)
        for i in range({records}):
            log.append(make_batch([b"%04d" % i]), leader_epoch={epoch})
    logs.get_log("t", {flushed}).flush()
    logs.checkpoint_recovery_points()
    print("ready", flush=True)
    time.sleep(600)  # killed long before
""")


def _create_and_kill(data: Path) -> None:
    script = CREATOR.format(
        paths=[str(Path.cwd() / "libs"), str(Path.cwd())],
        data=str(data),
        partitions=PARTITIONS,
        epoch=EPOCH,
        flushed=FLUSHED,
        unflushed=UNFLUSHED,
        records=RECORDS,
        topic_id=TOPIC_ID,
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()


def _reopened(data: Path) -> tuple[LogManager, ReplicaManager]:
    logs = LogManager(LogManagerConfig(log_dirs=(str(data),)), LogConfig())
    logs.load_logs()
    return logs, ReplicaManager(logs, node_id=1)


def _values(log) -> list[int]:
    return [int(r.value) for r in read_all(log)]


def _every_partition_usable(logs: LogManager, replicas: ReplicaManager) -> None:
    """A newer epoch on each partition that came back (a power cut may take an empty new
    partition's directory with it: the registry's next state creates it again), then an
    append at its end."""
    assert not logs.offline()
    for (topic, p), log in sorted(logs.logs().items()):
        end = log.log_end_offset
        me = (1,)
        replicas.apply_state(topic, p, {}, Registration(1, EPOCH + 1, 1, me, me))
        assert log.leader_epochs.latest_epoch == EPOCH + 1
        assert log.append(make_batch([b"9999"]), leader_epoch=EPOCH + 1).first_offset == end


def test_new_partitions_come_back_whole_after_sigkill(tmp_path):
    data = tmp_path / "data"
    _create_and_kill(data)
    logs, replicas = _reopened(data)
    try:
        # The process died; the kernel kept every write: every file is as it was left.
        assert sorted(logs.logs()) == [("t", p) for p in range(PARTITIONS)]
        for p in range(PARTITIONS):
            log = logs.get_log("t", p)
            if p in (FLUSHED, UNFLUSHED):
                assert _values(log) == list(range(RECORDS)), p
                assert log.leader_epochs.entries == [EpochEntry(EPOCH, 0)], p
            else:  # loading drops entries at or past the log end, as Kafka's LogLoader does
                assert _values(log) == [], p
                assert log.leader_epochs.entries == [], p
            assert logs.topic_id("t", p) == TOPIC_ID, p
        _every_partition_usable(logs, replicas)
    finally:
        logs.shutdown()


def test_new_partitions_come_back_consistent_after_a_power_cut(tmp_path):
    image, mount = tmp_path / "disk.img", tmp_path / "disk"
    with mounted_ext4(image, mount, 32 * 1024 * 1024):
        data = mount / "data"
        _create_and_kill(data)
        cut_power(image, mount)
        logs, replicas = _reopened(data)
        try:
            flushed = logs.get_log("t", FLUSHED)
            # Flushed: its data, and the entry its unsynced write made, were fsynced by the
            # flush, before the checkpointed recovery point let recovery skip its batches.
            assert _values(flushed) == list(range(RECORDS))
            assert flushed.leader_epochs.entries == [EpochEntry(EPOCH, 0)]
            # Its topic id too (synced before the checkpoint); another partition's file may be
            # lost or empty (no id: it adopts the registry's), never unreadable.
            assert logs.topic_id("t", FLUSHED) == TOPIC_ID
            assert {logs.topic_id(*tp) for tp in logs.logs()} <= {TOPIC_ID, ""}
            for (_, p), log in logs.logs().items():
                if log.log_end_offset > 0:  # batches survived: their epoch is known
                    assert log.leader_epochs.entries == [EpochEntry(EPOCH, 0)], p
                    assert _values(log) == list(range(log.log_end_offset)), p
                else:  # nothing survived, and loading drops an entry at the log end
                    assert log.leader_epochs.entries == [], p
            _every_partition_usable(logs, replicas)
        finally:
            logs.shutdown()
