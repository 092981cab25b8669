"""Eligible leader replicas (Kafka's KIP-966, services/gateway/cluster/partition_changes.py):
which replicas may lead without losing a committed record once the ISR has shrunk below
min ISR, and what a node back from an unclean shutdown is trusted with. The registry-level
tests replay the fault campaign's loss (seed 1795600865): a restarted gateway fenced two
replicas that missed their sessions, leaving the third alone in the ISR; that one lost its
page cache in a power cut, came back with an empty log, was elected, and the other two
truncated every acknowledged record away."""

from __future__ import annotations

import pytest

from services.gateway.cluster.metadata_file_store import FileMetadataStore
from services.gateway.cluster.metadata_records import MetadataRecordError, check_records
from services.gateway.cluster.partition_changes import (
    NO_LEADER,
    PartitionAssignment,
    alter_isr,
    elect_leaderless,
    fence,
    forget_unclean,
)
from services.gateway.cluster.reassignments import UNCLEAN, complete_if_ready, elect, start
from services.gateway.cluster.registry import Registry

TP = ("t", 0)


def eligible_nodes(*nodes: int):
    return lambda node: node in nodes


def min_isr_of(count: int):
    return lambda _topic: count


def registration(isr, leader, elr=(), replicas=(1, 2, 3)):
    return PartitionAssignment(list(replicas), leader, 5, list(isr), 7, elr=list(elr))


# -- the rules -------------------------------------------------------------------------------


def test_a_replica_leaving_the_isr_joins_the_elr_only_below_min_isr():
    p = registration([1, 2, 3], 1)
    fence([(TP, p)], 3, eligible_nodes(1, 2), min_isr_of(2))
    assert (p.isr, p.elr) == ([1, 2], [])  # still at min ISR: records committed later skip 3
    fence([(TP, p)], 2, eligible_nodes(1), min_isr_of(2))
    assert (p.isr, p.elr) == ([1], [2])  # the high watermark stops here: 2 holds all of it
    q = registration([1, 2, 3], 1)
    fence([(TP, q)], 2, eligible_nodes(1, 3), min_isr_of(1))
    fence([(TP, q)], 3, eligible_nodes(1), min_isr_of(1))
    assert (q.isr, q.elr) == ([1], [])  # min ISR 1: the ISR alone is ever vouched for


def test_min_isr_above_the_replica_count_counts_as_the_replica_count():
    p = registration([1, 2], 1, replicas=(1, 2))
    fence([(TP, p)], 2, eligible_nodes(1), min_isr_of(3))
    assert (p.isr, p.elr) == ([1], [2])


def test_a_leader_is_elected_from_the_elr_when_no_isr_member_is_eligible():
    p = registration([1], NO_LEADER, elr=[2])
    assert elect_leaderless([(TP, p)], eligible_nodes(3)) == set()
    assert elect_leaderless([(TP, p)], eligible_nodes(2, 3)) == {TP}
    # It becomes the ISR alone; the former member holds the committed records too.
    assert (p.leader, p.isr, p.elr, p.leader_epoch) == (2, [2], [1], 6)


def test_fencing_the_last_isr_member_hands_leadership_to_a_live_elr_member():
    p = registration([1], 1, elr=[3])
    assert fence([(TP, p)], 1, eligible_nodes(2, 3), min_isr_of(2)) == {TP}
    assert (p.leader, p.isr, p.elr) == (3, [3], [1])
    assert 2 not in p.isr + p.elr  # it left the ISR above min ISR: never vouched for


def test_an_unclean_last_isr_member_gives_way_to_the_elr():
    p = registration([3], NO_LEADER, elr=[2])
    assert forget_unclean([(TP, p)], 3, eligible_nodes(1, 2, 3)) == {TP}
    assert (p.leader, p.isr, p.elr) == (2, [2], [])


def test_an_unclean_last_isr_member_with_its_elr_down_waits_for_the_elr():
    p = registration([3], NO_LEADER, elr=[2])
    assert forget_unclean([(TP, p)], 3, eligible_nodes(1, 3)) == {TP}
    assert (p.leader, p.isr, p.elr) == (NO_LEADER, [2], [])
    assert elect_leaderless([(TP, p)], eligible_nodes(1, 3)) == set()  # not 3, not 1
    assert elect_leaderless([(TP, p)], eligible_nodes(1, 2, 3)) == {TP}
    assert p.leader == 2


def test_an_unclean_node_leaves_the_elr_and_the_isr_where_others_remain():
    in_elr = registration([1], 1, elr=[2, 3])
    in_isr = registration([1, 2], 1)
    assert forget_unclean([(("a", 0), in_elr), (("b", 0), in_isr)], 2, eligible_nodes(1, 2)) == {
        ("a", 0),
        ("b", 0),
    }
    assert (in_elr.isr, in_elr.elr, in_elr.leader_epoch) == ([1], [3], 5)
    assert (in_isr.isr, in_isr.elr, in_isr.leader) == ([1], [], 1)


def test_an_unclean_last_isr_member_without_an_elr_stays_the_best_there_is():
    p = registration([3], NO_LEADER)
    assert forget_unclean([(TP, p)], 3, eligible_nodes(1, 2, 3)) == set()
    assert elect_leaderless([(TP, p)], eligible_nodes(1, 2, 3)) == {TP}
    assert p.leader == 3


def alter(p, new_isr, min_isr):
    alter_isr(
        p, "t-0", p.leader, p.leader_epoch, p.partition_epoch, new_isr, lambda _n: True, min_isr
    )


def test_isr_changes_move_replicas_between_the_isr_and_the_elr():
    p = registration([1, 2, 3], 1)
    alter(p, [1, 2], 2)
    assert p.elr == []  # at min ISR
    alter(p, [1], 2)
    assert p.elr == [2]  # shrunk below: the replica removed is vouched for
    alter(p, [1, 3], 2)
    assert p.elr == []  # at min ISR again: the ISR alone holds what is committed from now
    p = registration([1], 1, elr=[2, 3])
    alter(p, [1, 3], 3)
    assert (p.isr, p.elr) == ([1, 3], [2])  # a member rejoining leaves the ELR


def test_a_reassignment_keeps_the_elr_within_the_replicas_and_unclean_election_clears_it():
    p = registration([1], 1, elr=[2])
    assert start(p, [1], 0, lambda _n: True)
    assert (p.removing, p.elr) == ([2, 3], [2])  # still a replica until the move completes
    assert complete_if_ready(p, lambda _n: True) == [2, 3]
    assert (p.replicas, p.elr) == ([1], [])
    offline = registration([1], NO_LEADER, elr=[2])
    elect("t-0", offline, UNCLEAN, eligible_nodes(2))
    assert (offline.leader, offline.isr, offline.elr) == (2, [2], [1])  # from the ELR: clean
    lost = registration([1], NO_LEADER, elr=[2])
    elect("t-0", lost, UNCLEAN, eligible_nodes(3))
    assert (lost.leader, lost.isr, lost.elr) == (3, [3], [])


def test_the_elr_is_a_checked_optional_field_of_a_partition_record():
    record = {"type": "partition", "topic": "t", "partition": 0, "replicas": [1, 2, 3]}
    record |= {"leader": 1, "leader_epoch": 0, "isr": [1], "partition_epoch": 0}
    check_records([record])  # absent: none
    check_records([record | {"eligible_leader_replicas": [2]}])
    with pytest.raises(MetadataRecordError):
        check_records([record | {"eligible_leader_replicas": [4]}])
    with pytest.raises(MetadataRecordError):
        check_records([record | {"eligible_leader_replicas": "2"}])


# -- the registry: the campaign's loss, step by step ---------------------------------------


def _registry(path):
    return Registry(path, store=FileMetadataStore(path / "metadata"), session_timeout_ms=60_000)


def _cluster(tmp_path):
    registry = _registry(tmp_path)
    for n in (1, 2, 3):
        registry.register_node(n, f"127.0.0.1:{n}", unclean_shutdown=True)  # new disks
    registry.create_topic("t", 1, 3, {"min.insync.replicas": "2"})
    return registry


def _lapse(registry, *nodes):
    for n in nodes:
        registry.nodes[n].last_heartbeat = 0.0  # its session lapsed long ago
        registry.nodes[n].grace_until = 0.0
    registry.check_sessions()


def _partition(registry):
    p = registry.topic("t").partitions[0]
    return p.leader, p.isr, p.elr


def test_a_restarted_gateway_admits_a_live_node_it_did_not_know_without_fencing_it(tmp_path):
    registry = _cluster(tmp_path)
    before = registry.topic("t").partitions[0].copy()
    again = _registry(tmp_path)  # the gateway restarted
    again.nodes[2].address = "elsewhere"  # so its heartbeat meets no session here
    assert not again.heartbeat(2, "127.0.0.1:2")
    again.register_node(2, "127.0.0.1:2", new_process=False)
    assert again.topic("t").partitions[0] == before
    again.register_node(2, "127.0.0.1:2", new_process=True)  # a new process is fenced
    assert 2 not in again.topic("t").partitions[0].isr


@pytest.mark.parametrize("elr_back_first", [True, False], ids=["elr-back-first", "unclean-first"])
def test_the_last_replica_standing_back_from_a_power_cut_is_not_elected(tmp_path, elr_back_first):
    registry = _cluster(tmp_path)
    replicas = registry.topic("t").partitions[0].replicas
    survivor, vouched, first_out = replicas[2], replicas[1], replicas[0]
    _lapse(registry, first_out)  # the ISR at min ISR: the first one out is not vouched for
    _lapse(registry, vouched)
    assert _partition(registry) == (survivor, [survivor], [vouched])
    _lapse(registry, survivor)  # SIGKILL and a power cut: its unflushed records are gone
    assert _partition(registry) == (NO_LEADER, [survivor], [vouched])
    if elr_back_first:
        registry.register_node(vouched, f"127.0.0.1:{vouched}", new_process=False)
        assert _partition(registry) == (vouched, [vouched], [survivor])
    registry.register_node(survivor, f"127.0.0.1:{survivor}", unclean_shutdown=True)
    leader, isr, elr = _partition(registry)
    assert leader != survivor and survivor not in isr + elr
    if not elr_back_first:
        assert (leader, isr) == (NO_LEADER, [vouched])  # offline until the data is back
        registry.register_node(vouched, f"127.0.0.1:{vouched}", new_process=False)
    assert _partition(registry) == (vouched, [vouched], [])
    # Never the first one out either, though it was live all along.
    registry.register_node(first_out, f"127.0.0.1:{first_out}", new_process=False)
    assert _partition(registry)[0] == vouched
    # The ELR survives a restart of the gateway (a record field, kept in snapshots too).
    _lapse(registry, vouched)
    assert _registry(tmp_path).topic("t").partitions[0] == registry.topic("t").partitions[0]


def test_a_clean_restart_of_the_last_replica_standing_is_elected_again(tmp_path):
    registry = _cluster(tmp_path)
    replicas = registry.topic("t").partitions[0].replicas
    survivor, vouched, first_out = replicas[2], replicas[1], replicas[0]
    _lapse(registry, first_out)
    _lapse(registry, vouched)
    _lapse(registry, survivor)
    registry.register_node(survivor, f"127.0.0.1:{survivor}", unclean_shutdown=False)
    assert _partition(registry) == (survivor, [survivor], [vouched])


def test_changing_a_topics_min_isr_clears_its_elr(tmp_path):
    registry = _cluster(tmp_path)
    replicas = registry.topic("t").partitions[0].replicas
    _lapse(registry, replicas[0])
    _lapse(registry, replicas[1])
    assert _partition(registry)[2] == [replicas[1]]
    registry.alter_topic_configs("t", {"retention.ms": "1000"}, [])
    assert _partition(registry)[2] == [replicas[1]]  # another setting: the ELR holds
    epoch = registry.topic("t").partitions[0].partition_epoch
    registry.alter_topic_configs("t", {"min.insync.replicas": "1"}, [])
    # Under min ISR 1 the high watermark may pass the ELR member: it is vouched for no more.
    assert _partition(registry)[2] == []
    assert registry.topic("t").partitions[0].partition_epoch == epoch + 1


def test_a_restarted_gateway_knows_the_nodes_min_isr_before_any_heartbeat(tmp_path):
    """The campaign's second loss: min ISR 2 was the nodes' default (--config), which a
    restarted gateway learnt only from registrations; before any, it counted min ISR 1, put
    no one in the ELR, and the last replica standing was elected after its power cut."""
    registry = _registry(tmp_path)
    for n in (1, 2, 3):
        registry.register_node(
            n, f"127.0.0.1:{n}", log_config_defaults={"min.insync.replicas": "2"}
        )
    registry.create_topic("t", 1, 3, {})
    replicas = registry.topic("t").partitions[0].replicas
    again = _registry(tmp_path)  # restarted: no node has heartbeated or registered yet
    _lapse(again, replicas[0])
    _lapse(again, replicas[1])
    assert _partition(again) == (replicas[2], [replicas[2]], [replicas[1]])
    again.register_node(
        replicas[2],
        "127.0.0.1:9",
        log_config_defaults={"min.insync.replicas": "2"},
        unclean_shutdown=True,
    )
    assert _partition(again)[0] != replicas[2]
    # A snapshot keeps the nodes' defaults too.
    records = again.image.records()
    check_records(records)
    assert {r["min_insync_replicas"] for r in records if r["type"] == "node"} == {2}
