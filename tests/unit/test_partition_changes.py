"""The controller's partition rules (services/gateway/cluster/partition_changes.py), as
Kafka's PartitionChangeBuilderTest pins its own: a registration and a set of eligible nodes
in, the changed registration (or a refusal that changed nothing) out."""

from __future__ import annotations

import pytest

from seglog.errors import (
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidRequestError,
    InvalidUpdateVersionError,
)
from services.gateway.cluster.partition_changes import (
    NO_LEADER,
    PartitionAssignment,
    alter_isr,
    choose_leader,
    elect_leaderless,
    fence,
    hand_over,
    place,
    restore_preferred,
)

TP = ("t", 0)


def eligible_nodes(*nodes: int):
    return lambda node: node in nodes


def MIN_ISR_1(topic: str) -> int:  # Kafka's default: no ELR ever
    return 1


def registration(replicas, leader, isr=None, leader_epoch=5, partition_epoch=7):
    return PartitionAssignment(
        list(replicas), leader, leader_epoch, list(isr or replicas), partition_epoch
    )


# -- elections ---------------------------------------------------------------------------


def test_an_empty_isr_means_every_replica_is_in_sync():
    assert PartitionAssignment([1, 2, 3], 1).isr == [1, 2, 3]


def test_clean_election_takes_the_first_eligible_isr_member_in_assignment_order():
    p = registration([3, 1, 2], NO_LEADER, isr=[1, 2, 3])
    assert choose_leader(p, eligible_nodes(1, 2)) == 1  # 3 comes first but is not eligible
    assert choose_leader(p, eligible_nodes(1, 2, 3)) == 3


def test_unclean_election_is_off_an_eligible_replica_outside_the_isr_never_leads():
    p = registration([1, 2, 3], NO_LEADER, isr=[1])
    assert choose_leader(p, eligible_nodes(2, 3)) == NO_LEADER


def test_the_excluded_node_is_not_elected_even_when_it_is_eligible():
    p = registration([1, 2], 1)
    assert choose_leader(p, eligible_nodes(1, 2), exclude=1) == 2


def test_a_leader_change_bumps_both_epochs_and_no_election_bumps_nothing():
    p = registration([1, 2], NO_LEADER, isr=[1, 2])
    assert elect_leaderless([(TP, p)], eligible_nodes(2)) == {TP}
    assert (p.leader, p.leader_epoch, p.partition_epoch) == (2, 6, 8)
    # A partition that has a leader is left alone, even if a better one is eligible.
    assert elect_leaderless([(TP, p)], eligible_nodes(1, 2)) == set()
    assert (p.leader, p.leader_epoch, p.partition_epoch) == (2, 6, 8)


def test_a_leaderless_partition_without_an_eligible_isr_member_stays_offline_unchanged():
    p = registration([1, 2], NO_LEADER, isr=[1])
    assert elect_leaderless([(TP, p)], eligible_nodes(2)) == set()
    assert (p.leader, p.leader_epoch, p.partition_epoch) == (NO_LEADER, 5, 7)


# -- fencing a node (session expired, controlled shutdown, re-registration) ---------------


def test_fencing_the_leader_elects_another_isr_member_and_drops_it_from_the_isr():
    p = registration([1, 2, 3], 1)
    assert fence([(TP, p)], 1, eligible_nodes(2, 3), MIN_ISR_1) == {TP}
    assert p.leader == 2
    assert p.isr == [2, 3]
    assert (p.leader_epoch, p.partition_epoch) == (6, 8)


def test_fencing_a_follower_shrinks_the_isr_without_a_new_leader_epoch():
    p = registration([1, 2, 3], 1)
    assert fence([(TP, p)], 3, eligible_nodes(1, 2), MIN_ISR_1) == {TP}
    assert (p.leader, p.isr) == (1, [1, 2])
    assert (p.leader_epoch, p.partition_epoch) == (5, 8)


def test_fencing_the_last_isr_member_keeps_it_in_the_isr_and_leaves_the_partition_offline():
    p = registration([1, 2], 1, isr=[1])
    assert fence([(TP, p)], 1, eligible_nodes(2), MIN_ISR_1) == {TP}
    assert p.leader == NO_LEADER
    assert p.isr == [1]  # so that it, and only it, is elected when it returns
    assert elect_leaderless([(TP, p)], eligible_nodes(2)) == set()
    assert elect_leaderless([(TP, p)], eligible_nodes(1, 2)) == {TP}
    assert p.leader == 1


def test_controlled_shutdown_moves_leadership_away_from_the_node_that_is_stopping():
    # A node shutting down is not eligible; the registry fences it while it is still live.
    led, followed = registration([1, 2], 1), registration([2, 1], 2)
    changed = fence([(("t", 0), led), (("t", 1), followed)], 1, eligible_nodes(2), MIN_ISR_1)
    assert changed == {("t", 0), ("t", 1)}
    assert (led.leader, led.isr) == (2, [2])
    assert (followed.leader, followed.isr) == (2, [2])


def test_fencing_a_node_that_holds_no_replica_or_is_already_out_changes_nothing():
    elsewhere = registration([2, 3], 2)
    out_of_sync = registration([1, 2], 2, isr=[2])
    assert (
        fence([(("a", 0), elsewhere), (("b", 0), out_of_sync)], 1, eligible_nodes(2, 3), MIN_ISR_1)
        == set()
    )
    assert (elsewhere.partition_epoch, out_of_sync.partition_epoch) == (7, 7)


# -- preferred leader ----------------------------------------------------------------------


def test_preferred_leader_election_gives_the_first_replica_back_its_leadership():
    p = registration([1, 2, 3], 2)
    assert restore_preferred([(TP, p)], eligible_nodes(1, 2, 3)) == {TP}
    assert (p.leader, p.leader_epoch) == (1, 6)


def test_preferred_leader_election_skips_a_first_replica_outside_the_isr_or_not_eligible():
    out_of_isr = registration([1, 2], 2, isr=[2])
    not_eligible = registration([1, 2], 2)
    registrations = [(("a", 0), out_of_isr), (("b", 0), not_eligible)]
    assert restore_preferred(registrations, eligible_nodes(2)) == set()
    assert restore_preferred([(("a", 0), out_of_isr)], eligible_nodes(1, 2)) == set()
    assert out_of_isr.leader == not_eligible.leader == 2


# -- AlterPartition ------------------------------------------------------------------------


def alter(
    p,
    *,
    node=1,
    leader_epoch=5,
    partition_epoch=7,
    new_isr=(1, 2),
    eligible=(1, 2, 3),
    min_isr=1,
):
    alter_isr(
        p,
        "t-0",
        node,
        leader_epoch,
        partition_epoch,
        list(new_isr),
        eligible_nodes(*eligible),
        min_isr,
    )


def test_an_isr_change_from_the_current_leader_is_stored_in_assignment_order():
    p = registration([1, 2, 3], 1, isr=[1])
    alter(p, new_isr=[3, 1])
    assert p.isr == [1, 3]
    assert (p.leader_epoch, p.partition_epoch) == (5, 8)  # same leader, new partition epoch


def test_an_isr_change_from_an_older_leader_epoch_is_fenced():
    p = registration([1, 2], 1, isr=[1])
    with pytest.raises(FencedLeaderEpochError):
        alter(p, leader_epoch=4)
    assert (p.isr, p.partition_epoch) == ([1], 7)


def test_an_isr_change_from_a_node_that_does_not_lead_is_refused():
    p = registration([1, 2], 1, isr=[1])
    with pytest.raises(InvalidRequestError):
        alter(p, node=2, new_isr=[1, 2])
    with pytest.raises(InvalidRequestError):
        alter(p, leader_epoch=6)  # an epoch the controller never gave out
    assert p.isr == [1]


def test_an_isr_change_from_a_stale_partition_epoch_is_refused():
    p = registration([1, 2], 1, isr=[1])
    with pytest.raises(InvalidUpdateVersionError):
        alter(p, partition_epoch=6)
    assert p.isr == [1]


@pytest.mark.parametrize(
    "new_isr",
    [[1, 1, 2], [1, 4], [2]],
    ids=["duplicate", "not-a-replica", "leader-missing"],
)
def test_an_isr_must_be_distinct_replicas_that_include_the_leader(new_isr):
    p = registration([1, 2, 3], 1, isr=[1])
    with pytest.raises(InvalidRequestError):
        alter(p, new_isr=new_isr)
    assert (p.isr, p.partition_epoch) == ([1], 7)


def test_a_replica_whose_node_is_not_eligible_cannot_join_the_isr():
    p = registration([1, 2, 3], 1, isr=[1])
    with pytest.raises(IneligibleReplicaError):
        alter(p, new_isr=[1, 2], eligible=(1, 3))
    assert (p.isr, p.partition_epoch) == ([1], 7)


def test_an_ineligible_member_already_in_the_isr_may_stay_while_the_isr_changes():
    # Only additions are checked: a leader shrinking its ISR is never refused for the
    # members it keeps.
    p = registration([1, 2, 3], 1)
    alter(p, new_isr=[1, 2], eligible=(1,))
    assert p.isr == [1, 2]


# -- placement -----------------------------------------------------------------------------


def test_placement_puts_every_partitions_replicas_on_distinct_nodes():
    for p in place(6, 3, [1, 2, 3, 4], {}, {}):
        assert len(set(p.replicas)) == 3
        assert p.leader == p.replicas[0]
        assert p.isr == p.replicas
        assert (p.leader_epoch, p.partition_epoch) == (0, 0)


def test_placement_spreads_leaders_evenly_and_prefers_nodes_that_lead_least():
    placed = place(3, 1, [1, 2, 3], {1: 2, 2: 0, 3: 1}, {})
    # Node 2 leads least; then 2 and 3 lead one each and 3 holds fewer replicas.
    assert [p.leader for p in placed] == [2, 3, 2]
    even = place(6, 2, [1, 2, 3], {}, {})
    assert sorted(p.leader for p in even) == [1, 1, 2, 2, 3, 3]


def test_placement_puts_followers_where_fewest_replicas_are_held_then_round_the_ring():
    # Equal loads: the follower is the next id after the leader, wrapping round.
    assert place(1, 2, [1, 2, 3], {1: 1, 2: 1}, {1: 1, 2: 1, 3: 1})[0].replicas == [3, 1]
    # Node 2 already holds more replicas: node 3 follows instead of the next id.
    assert place(1, 2, [1, 2, 3], {2: 1, 3: 1}, {2: 5})[0].replicas == [1, 3]


def test_elections_prefer_a_node_that_is_not_decommissioned_but_take_it_as_the_last_resort():
    p = registration([3, 1, 2], NO_LEADER, isr=[3, 1, 2])
    assert choose_leader(p, eligible_nodes(1, 2, 3), avoid={3}) == 1
    alone = registration([3, 1], NO_LEADER, isr=[3])
    assert choose_leader(alone, eligible_nodes(1, 3), avoid={3}) == 3  # else offline
    led = registration([3, 1, 2], 1, isr=[3, 1, 2])
    assert restore_preferred([(TP, led)], eligible_nodes(1, 2, 3), avoid={3}) == set()
    assert led.leader == 1


def test_a_decommissioned_leader_hands_over_to_an_in_sync_replica_and_stays_in_the_isr():
    p = registration([3, 1, 2], 3, isr=[3, 2])
    assert hand_over([(TP, p)], 3, eligible_nodes(1, 2, 3), {3}) == {TP}
    assert (p.leader, p.isr, p.leader_epoch) == (2, [3, 2], 6)
    alone = registration([3, 1], 3, isr=[3])
    assert hand_over([(TP, alone)], 3, eligible_nodes(1, 3), {3}) == set()
    assert alone.leader == 3
