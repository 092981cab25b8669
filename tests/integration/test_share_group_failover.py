"""A share group's coordinator SIGKILLed (real etcd, two gateway processes, three nodes): the
gateway that takes the group's __consumer_offsets partition over reads the group back from
its records (share/share_group_log.py) at the same group epoch, assignment epoch, member
epochs and assignments, and its members go on heartbeating at their epochs without joining
again (Kafka's coordinator failover of a share group)."""

from __future__ import annotations

import pytest
from kafka.protocol.metadata.find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)

from services.gateway.kafka.share_messages import (
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from tests.kafka_wire import KafkaWire
from tests.multi_gateway import SESSION_TIMEOUT_MS, EtcdBackedCluster
from tests.waiting import wait_until

# About 75 s (two gateways on etcd, three nodes): in make test-long, to keep make test within
# its 10 minutes; make test keeps the share state takeover tests of test_share_state_epochs.
pytestmark = [pytest.mark.long, pytest.mark.timeout(300)]

TOPIC, GROUP = "queue", "sg-failover"
TAKEOVER_S = 3 * SESSION_TIMEOUT_MS / 1000 + 30
RETRIABLE = (14, 15, 16)  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR


def coordinator_index(cluster: EtcdBackedCluster, via: int) -> int | None:
    """The index of the gateway coordinating GROUP, as gateway `via` answers FindCoordinator
    (None: it names none yet)."""
    with KafkaWire(cluster.kafka_addresses[via]) as wire:
        found = wire.request(
            FindCoordinatorRequest[3](key=GROUP, key_type=0), 3, FindCoordinatorResponse
        )
    if found.error_code != 0:
        return None
    # A gateway's Kafka listener and its nodes' lanes are a run of ports from its own.
    (index,) = [
        i
        for i, address in enumerate(cluster.kafka_addresses)
        if 0 <= found.port - int(address.rsplit(":", 1)[1]) < 8
    ]
    return index


def heartbeat(wire: KafkaWire, member: str, epoch: int) -> object:
    request = ShareGroupHeartbeatRequest[1](
        group_id=GROUP,
        member_id=member,
        member_epoch=epoch,
        rack_id=None,
        subscribed_topic_names=[TOPIC] if epoch == 0 else None,
    )
    return wire.request(request, 1, ShareGroupHeartbeatResponse)


def described(wire: KafkaWire) -> tuple[int, int, dict[str, tuple[int, list[int]]]]:
    """(group epoch, assignment epoch, member -> (member epoch, assigned partitions))."""
    request = ShareGroupDescribeRequest[1](group_ids=[GROUP], include_authorized_operations=False)
    (group,) = wire.request(request, 1, ShareGroupDescribeResponse).groups
    assert group.error_code == 0, group
    members = {
        m.member_id: (
            m.member_epoch,
            sorted(p for t in m.assignment.topic_partitions for p in t.partitions),
        )
        for m in group.members
    }
    return group.group_epoch, group.assignment_epoch, members


def test_a_share_group_keeps_its_epochs_and_assignments_when_its_coordinator_is_killed(tmp_path):
    cluster = EtcdBackedCluster(tmp_path)
    try:
        cluster.admin(0).create_topic(TOPIC, 2, 3)
        assert wait_until(lambda: coordinator_index(cluster, 0) is not None, 30)
        first = coordinator_index(cluster, 0)
        assert first is not None
        epochs: dict[str, int] = {}
        with KafkaWire(cluster.kafka_addresses[first]) as wire:
            # The other gateway is not the group's coordinator: it says so.
            with KafkaWire(cluster.kafka_addresses[1 - first]) as other:
                assert heartbeat(other, "member-a", 0).error_code == 16
            for member in ("member-a", "member-b"):
                answer = heartbeat(wire, member, 0)
                assert answer.error_code == 0, answer
                epochs[member] = answer.member_epoch
                for m in epochs:  # each at the group's epoch before the next joins
                    again = heartbeat(wire, m, epochs[m])
                    assert again.error_code == 0, again
                    epochs[m] = again.member_epoch
            before = described(wire)
        assert sorted(p for _, parts in before[2].values() for p in parts) == [0, 1]
        assert {m: e for m, (e, _) in before[2].items()} == epochs

        cluster.gateways[first].kill()
        survivor = 1 - first
        assert wait_until(lambda: coordinator_index(cluster, survivor) == survivor, TAKEOVER_S)
        with KafkaWire(cluster.kafka_addresses[survivor]) as wire:
            answers = {}

            def carried_on() -> bool:
                for member, epoch in epochs.items():
                    answer = heartbeat(wire, member, epoch)
                    assert answer.error_code in (0, *RETRIABLE), answer
                    if answer.error_code != 0:
                        return False
                    answers[member] = answer
                return True

            assert wait_until(carried_on, TAKEOVER_S)
            # Same epochs, and no new assignment to take: the members were not made to join.
            for member, answer in answers.items():
                assert (answer.member_epoch, answer.assignment) == (epochs[member], None), answer
            assert described(wire) == before
    finally:
        cluster.close()
