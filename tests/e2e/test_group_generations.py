"""A group's generations continue across a SIGKILLed gateway: the restarted coordinator
loads the group's last GroupMetadata record, so the next rebalance is the stored generation
+ 1 and a member of the old generation cannot commit offsets back."""

import grpc
import pytest

from seglog.rpc.status import error_from_code
from seglog.v1 import groups_pb2, groups_pb2_grpc
from tests.e2e.test_processes import ProcessCluster
from tests.group_calls import (
    GROUP,
    NO_DELAY,
    STALE_ERRORS,
    TOPIC,
    commit,
    committed,
    join,
    rejoin_as_a_new_member,
    stored_generation,
)
from tests.waiting import wait_until


@pytest.mark.slow
def test_generations_continue_after_the_gateway_is_sigkilled(tmp_path):
    cluster = ProcessCluster(tmp_path, gateway_args=NO_DELAY)
    try:
        cluster.admin.create_topic(TOPIC, 1)
        with grpc.insecure_channel(cluster.gateway.address) as channel:
            stub = groups_pb2_grpc.GroupCoordinatorStub(channel)
            old_member, first = join(stub)
            old_member, stored = rejoin_as_a_new_member(stub, old_member)  # generation N > 1
            assert stored > first
            assert commit(stub, old_member, stored, 10) is None
        # The record is written after the rebalance, off the coordinator's lock.
        assert wait_until(lambda: stored_generation(cluster.client) == stored)
        cluster.gateway.kill()
        cluster.restart_gateway()
        with grpc.insecure_channel(cluster.gateway.address) as channel:
            stub = groups_pb2_grpc.GroupCoordinatorStub(channel)
            assert wait_until(lambda: committed(stub) == 10, timeout_s=30)
            # A heartbeat from the old generation's member is refused: it must rejoin.
            beat = stub.Heartbeat(
                groups_pb2.GroupHeartbeatRequest(
                    group_id=GROUP, member_id=old_member, generation_id=stored
                ),
                timeout=10,
            )
            assert isinstance(error_from_code(beat.error, beat.error_message), STALE_ERRORS)
            new_member, generation = join(stub)
            assert generation == stored + 1
            assert commit(stub, new_member, generation, 20) is None
            assert isinstance(commit(stub, old_member, stored, 5), STALE_ERRORS)
            assert committed(stub) == 20
    finally:
        cluster.close()
