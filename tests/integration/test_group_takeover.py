"""A group's coordinating gateway SIGKILLed with the registry in etcd: the gateway that takes
the group over loads its last GroupMetadata record and continues its generations, so the old
generation's member cannot commit offsets back. In production's configuration (mutual TLS, the
authorizer on), the member a principal granted only its group and topic: the takeover's
paths do not depend on the authorizer, whose off paths the in-process group tests run."""

from __future__ import annotations

import grpc
import pytest

from seglog.errors import SeglogError
from seglog.v1 import groups_pb2, groups_pb2_grpc
from tests.authorizer_modes import Grant
from tests.group_calls import (
    GROUP,
    STALE_ERRORS,
    TOPIC,
    commit,
    committed,
    join,
    rejoin_as_a_new_member,
    stored_generation,
)
from tests.multi_gateway import SESSION_TIMEOUT_MS, EtcdBackedCluster
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(180)

TAKEOVER_S = 3 * SESSION_TIMEOUT_MS / 1000 + 10  # a lease TTL, with room for a slow machine


MEMBER = "member"  # the member's certificate: a principal with no more than its ACLs


def coordinator_at(cluster: EtcdBackedCluster, address: str) -> str:
    with cluster.channel(address, MEMBER) as channel:
        stub = groups_pb2_grpc.GroupCoordinatorStub(channel)
        try:
            found = stub.FindCoordinator(
                groups_pb2.FindCoordinatorRequest(group_id=GROUP), timeout=5
            )
        except grpc.RpcError:
            return ""
        return "" if found.error else str(found.address)


@pytest.mark.slow
def test_the_gateway_taking_a_group_over_continues_its_generations(tmp_path):
    cluster = EtcdBackedCluster(tmp_path, secured=True)
    try:
        with cluster.admin(0) as admin:
            admin.create_topic(TOPIC, 1, 3)
            admin.create_acls(
                [
                    *Grant("group", ("Read",), GROUP).bindings(f"User:{MEMBER}"),
                    *Grant("topic", ("Read",), TOPIC).bindings(f"User:{MEMBER}"),
                ]
            )
        assert wait_until(lambda: coordinator_at(cluster, cluster.gateway_addresses[0]) != "", 30)
        coordinator = coordinator_at(cluster, cluster.gateway_addresses[0])
        index = cluster.gateway_addresses.index(coordinator)
        other = cluster.gateway_addresses[1 - index]
        with cluster.channel(coordinator, MEMBER) as channel:
            stub = groups_pb2_grpc.GroupCoordinatorStub(channel)
            old_member, first = join(stub)
            old_member, stored = rejoin_as_a_new_member(stub, old_member)  # generation N > 1
            assert stored > first
            assert commit(stub, old_member, stored, 10) is None
        with cluster.client(1 - index) as client:
            assert wait_until(lambda: stored_generation(client) == stored)
        cluster.gateways[index].kill()
        assert wait_until(lambda: coordinator_at(cluster, other) == other, TAKEOVER_S)
        with cluster.channel(other, MEMBER) as channel:
            stub = groups_pb2_grpc.GroupCoordinatorStub(channel)
            joined: list[tuple[str, int]] = []

            def joins() -> bool:
                try:
                    joined.append(join(stub))
                except (grpc.RpcError, AssertionError, SeglogError):
                    return False  # the takeover is still under way
                return True

            assert wait_until(joins, TAKEOVER_S)
            new_member, generation = joined[0]
            assert generation == stored + 1
            assert commit(stub, new_member, generation, 20) is None
            assert isinstance(commit(stub, old_member, stored, 5), STALE_ERRORS)
            assert committed(stub) == 20
    finally:
        cluster.close()
