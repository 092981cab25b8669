"""Reassignment as registry decisions (services/gateway/cluster/reassignments.py): the steps
of a move and of a cancel, elections on demand, the records that carry a move through a
restart and a snapshot; and the plans the CLI proposes (libs/seglog/client/
reassignment_plans.py)."""

from __future__ import annotations

import pytest

from seglog.client.reassignment_plans import balance, decommission, generate, parse_plan
from seglog.client.structs import TopicPartition
from seglog.errors import (
    ElectionNotNeededError,
    EligibleLeadersNotAvailableError,
    InvalidReplicaAssignmentError,
    NoReassignmentInProgressError,
    UnknownTopicOrPartitionError,
)
from services.gateway.cluster.metadata_file_store import FileMetadataStore
from services.gateway.cluster.metadata_records import MetadataRecordError, check_records
from services.gateway.cluster.partition_changes import PartitionAssignment
from services.gateway.cluster.reassignments import (
    PREFERRED,
    UNCLEAN,
    cancel,
    complete_if_ready,
    elect,
    start,
)
from services.gateway.cluster.registry import Registry


def everyone(_node: int) -> bool:
    return True


def test_a_move_adds_first_and_removes_once_the_targets_are_in_sync():
    p = PartitionAssignment([1, 2, 3], 1, 5, [1, 2, 3], 7)
    assert start(p, [2, 3, 4], 1000, everyone)
    assert (p.replicas, p.adding, p.removing, p.isr) == ([2, 3, 4, 1], [4], [1], [2, 3, 1])
    assert (p.leader, p.leader_epoch, p.partition_epoch, p.throttle_bytes_per_s) == (1, 5, 8, 1000)
    assert complete_if_ready(p, everyone) == [] and p.reassigning  # 4 is not in sync yet
    p.isr = [2, 3, 1, 4]  # the leader added it (AlterPartition)
    assert complete_if_ready(p, everyone) == [1]
    assert (p.replicas, p.isr, p.adding, p.removing) == ([2, 3, 4], [2, 3, 4], [], [])
    # The leader was removed: the first target replica in sync leads, in a new epoch.
    assert (p.leader, p.leader_epoch, p.throttle_bytes_per_s) == (2, 6, 0)


def test_a_leader_being_removed_waits_for_an_eligible_successor():
    p = PartitionAssignment([1, 2], 1, 0, [1, 2], 0)
    start(p, [3], 0, everyone)
    p.isr = [1, 2, 3]
    assert complete_if_ready(p, lambda n: n != 3) == [] and p.reassigning
    assert complete_if_ready(p, everyone) == [1, 2] and p.leader == 3


def test_cancel_restores_the_original_replicas_and_refuses_an_empty_isr():
    p = PartitionAssignment([1, 2, 3], 1, 0, [1, 2, 3], 0)
    start(p, [2, 3, 4], 0, everyone)
    p.isr = [2, 3, 1, 4]
    cancel("t-0", p, everyone)
    assert (sorted(p.replicas), sorted(p.isr), p.adding, p.removing) == (
        [1, 2, 3],
        [1, 2, 3],
        [],
        [],
    )
    with pytest.raises(NoReassignmentInProgressError):
        cancel("t-0", p, everyone)
    q = PartitionAssignment([1], 1, 0, [1], 0)
    start(q, [2], 0, everyone)
    q.isr = [2]  # only the adding replica is in sync (the original one was fenced)
    with pytest.raises(InvalidReplicaAssignmentError):
        cancel("t-0", q, everyone)


def test_a_new_target_replaces_a_move_from_the_original_replicas():
    p = PartitionAssignment([1, 2, 3], 1, 0, [1, 2, 3], 0)
    start(p, [2, 3, 4], 0, everyone)
    start(p, [1, 2, 5], 0, everyone)
    assert (p.replicas, p.adding, p.removing) == ([1, 2, 5, 3], [5], [3])
    same = PartitionAssignment([1, 2], 1, 0, [1, 2], 0)
    assert start(same, [2, 1], 0, everyone)  # a reorder: done at once, the leader stays
    assert (same.replicas, same.reassigning, same.leader) == ([2, 1], False, 1)
    assert not start(same, [2, 1], 0, everyone)


def _registry(tmp_path, nodes=4):
    registry = Registry(tmp_path, store=FileMetadataStore(tmp_path / "metadata"))
    for n in range(1, nodes + 1):
        registry.register_node(n, f"127.0.0.1:{n}")
    return registry


def test_a_request_is_checked_whole_and_a_move_survives_a_restart(tmp_path):
    registry = _registry(tmp_path)
    registry.create_topic("t", 2, 2, {})
    before = [list(p.replicas) for p in registry.topic("t").partitions]
    offset = registry.metadata_offset
    for bad, error in [
        ({("t", 0): [1, 2], ("t", 1): [1, 9]}, InvalidReplicaAssignmentError),
        ({("t", 0): [1, 2], ("t", 1): [3, 3]}, InvalidReplicaAssignmentError),
        ({("t", 0): [1, 2], ("t", 1): []}, InvalidReplicaAssignmentError),
        ({("t", 0): [1, 2], ("t", 5): [1, 2]}, UnknownTopicOrPartitionError),
        ({("t", 0): [1, 2], ("t", 1): None}, NoReassignmentInProgressError),
    ]:
        with pytest.raises(error):
            registry.alter_reassignments(bad)
        assert registry.metadata_offset == offset  # nothing written
    assert [p.replicas for p in registry.topic("t").partitions] == before
    targets = {("t", 0): [3, 4], ("t", 1): [4, 3]}
    registry.alter_reassignments(targets, 5000)
    assert registry.metadata_offset == offset + 2  # one batch of two records
    moving = {(t.name, i): p for t, i, p in registry.reassignments()}
    again = Registry(tmp_path, store=FileMetadataStore(tmp_path / "metadata"))
    assert {(t.name, i): p for t, i, p in again.reassignments()} == moving
    assert again.image.reassigning == registry.image.reassigning
    # A snapshot keeps it too.
    image = again.image.records()
    check_records(image)
    assert any(r.get("adding_replicas") for r in image)


def test_a_moves_record_is_checked():
    record = {
        "type": "partition",
        "topic": "t",
        "partition": 0,
        "replicas": [1, 2],
        "leader": 1,
        "leader_epoch": 0,
        "isr": [1, 2],
        "partition_epoch": 0,
    }
    check_records([record])  # at rest: no reassignment fields
    check_records([{**record, "adding_replicas": [2], "removing_replicas": [1]}])
    for bad in ({"adding_replicas": [3]}, {"removing_replicas": "1"}, {"throttle_bytes_per_s": -1}):
        with pytest.raises(MetadataRecordError):
            check_records([{**record, **bad}])


def test_preferred_election_on_demand(tmp_path):
    registry = _registry(tmp_path, nodes=3)
    registry.create_topic("e", 1, 3, {})
    p = registry.topic("e").partitions[0]
    other = next(r for r in p.replicas if r != p.leader)
    registry.alter_reassignments({("e", 0): [other, *(r for r in p.replicas if r != other)]})
    assert registry.topic("e").partitions[0].leader == p.leader
    assert registry.elect_leaders(PREFERRED, [("e", 0)]) == {("e", 0): None}
    assert registry.topic("e").partitions[0].leader == other
    [result] = registry.elect_leaders(PREFERRED, [("e", 0)]).values()
    assert isinstance(result, ElectionNotNeededError)


def _tp(i):
    return TopicPartition("t", i)


def test_plans_are_parsed_whole():
    plan = parse_plan('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[2,3]}]}')
    assert plan == {_tp(0): [2, 3]}
    for text in (
        "not json",
        '{"version":2,"partitions":[]}',
        '{"version":1,"partitions":[]}',
        '{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[]}]}',
        '{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,1]}]}',
        '{"version":1,"partitions":[{"topic":"t","partition":"0","replicas":[1]}]}',
        '{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1]},'
        '{"topic":"t","partition":0,"replicas":[2]}]}',
    ):
        with pytest.raises(InvalidReplicaAssignmentError):
            parse_plan(text)


def _per_node(assignment, nodes):
    held = dict.fromkeys(nodes, 0)
    first = dict.fromkeys(nodes, 0)
    for replicas in assignment.values():
        for r in replicas:
            held[r] += 1
        first[replicas[0]] += 1
    return held, first


def test_generate_decommission_and_balance_spread_within_one():
    current = {_tp(i): [1 + i % 3, 1 + (i + 1) % 3] for i in range(6)}
    proposed = generate(current, [2, 3, 4])
    held, first = _per_node(proposed, [2, 3, 4])
    assert max(held.values()) - min(held.values()) <= 1
    assert max(first.values()) - min(first.values()) <= 1

    plan = decommission(current, 1, [2, 3, 4])
    after = {**current, **plan}
    assert all(1 not in r and len(set(r)) == 2 for r in after.values())
    assert set(plan) == {tp for tp, r in current.items() if 1 in r}

    plan = balance(current, [1, 2, 3, 4])
    after = {**current, **plan}
    held, first = _per_node(after, [1, 2, 3, 4])
    assert max(held.values()) - min(held.values()) <= 1, held
    assert max(first.values()) - min(first.values()) <= 1, first
    bounded = balance(current, [1, 2, 3, 4], max_moves=1)
    assert len([tp for tp, r in bounded.items() if set(r) != set(current[tp])]) == 1
    assert balance(after, [1, 2, 3, 4]) == {}


def test_unclean_election_only_for_a_leaderless_partition_and_only_a_live_replica():
    led = PartitionAssignment([1, 2], 1, 3, [1, 2], 0)
    with pytest.raises(ElectionNotNeededError):
        elect("t-0", led, UNCLEAN, everyone)
    offline = PartitionAssignment([1, 2], -1, 3, [1], 0)  # its last in-sync replica is down
    with pytest.raises(EligibleLeadersNotAvailableError):
        elect("t-0", offline, UNCLEAN, lambda n: False)
    elect("t-0", offline, UNCLEAN, lambda n: n == 2)
    assert (offline.leader, offline.isr, offline.leader_epoch) == (2, [2], 4)
