"""The campaign's replica comparison (tests/faults/replica_logs.py) over real logs: a
follower's copy matches its leader's, retention on one replica only is not a difference,
and a replica that holds another batch over the same offsets in the same epoch (two
histories) is found, with where."""

from __future__ import annotations

from pathlib import Path

from seglog.storage import Log, LogConfig
from tests.batches import make_batch
from tests.faults.replica_logs import compare_replicas, diverged_partitions, read_batches

CONFIG = LogConfig(segment_bytes=1024, index_interval_bytes=128)
TOPIC = "t"


def leader_log(directory: Path, batches: int, epoch: int = 3) -> Log:
    log = Log.open(directory, CONFIG)
    log.leader_epochs.assign(epoch, 0)
    for n in range(batches):
        log.append(make_batch([b"%04d" % n, b"x" * 40]), leader_epoch=epoch)
    return log


def copy_as_follower(leader: Log, directory: Path) -> Log:
    follower = Log.open(directory, CONFIG)
    while follower.log_end_offset < leader.log_end_offset:
        follower.append_as_follower(leader.read(follower.log_end_offset, 4096))
    return follower


def test_a_followers_copy_and_retention_on_one_replica_are_no_difference(tmp_path: Path) -> None:
    leader = leader_log(tmp_path / "node-1" / f"{TOPIC}-0", 40)
    follower = copy_as_follower(leader, tmp_path / "node-2" / f"{TOPIC}-0")
    assert len(leader.segments) >= 4
    follower.delete_records_before(follower.segments[2].base_offset)
    follower.delete_segments(follower.segments[:2])  # what retention does next
    leader.flush()
    follower.flush()
    held = read_batches(tmp_path / "node-1" / f"{TOPIC}-0")
    assert [b.base_offset for b in held] == list(range(0, 80, 2))
    assert {b.leader_epoch for b in held} == {3}
    assert read_batches(tmp_path / "node-2" / f"{TOPIC}-0")[0].base_offset > 0
    assert diverged_partitions(tmp_path, TOPIC, 1, [1, 2]) == []
    leader.close()
    follower.close()


def test_another_batch_over_the_same_offsets_in_the_same_epoch_is_found(tmp_path: Path) -> None:
    leader = leader_log(tmp_path / "node-1" / f"{TOPIC}-0", 10)
    follower = copy_as_follower(leader, tmp_path / "node-2" / f"{TOPIC}-0")
    # The leader loses its last three batches and writes one other batch over their offsets,
    # in the same epoch; the follower kept what it had copied.
    leader.truncate_to(14)
    leader.append(make_batch([b"other"] * 6), leader_epoch=3)
    leader.flush()
    follower.flush()
    problems = diverged_partitions(tmp_path, TOPIC, 1, [1, 2])
    assert problems == [
        f"{TOPIC}-0: replicas diverge: batch 7 from offset 0 differs "
        "(node 1: 14-19@e3, node 2: 14-15@e3)"
    ]
    leader.close()
    follower.close()


def test_a_replica_ending_early_differs() -> None:
    from tests.faults.replica_logs import BatchHeader

    batches = [BatchHeader(0, 1, 0, 11), BatchHeader(2, 3, 0, 12)]
    assert compare_replicas({1: batches, 2: batches[:1]}) == (
        "batch 1 from offset 0 differs (node 1: 2-3@e0, node 2: nothing)"
    )
    assert compare_replicas({1: batches, 2: list(batches), 3: list(batches)}) is None
