"""A group's generations continue across a SIGKILLed gateway: the restarted coordinator
loads the group's last GroupMetadata record, so the next rebalance is the stored generation
+ 1 and a member of the old generation cannot commit offsets back."""

import grpc

from seglog.errors import IllegalGenerationError, UnknownMemberIdError
from seglog.rpc.status import error_from_code
from seglog.v1 import groups_pb2, groups_pb2_grpc
from services.gateway.offsets_formats import (
    decode_group_key,
    decode_group_value,
    key_type,
    partition_for_group,
)
from services.gateway.offsets_store import OFFSETS_TOPIC
from tests.cluster import wait_until
from tests.e2e.test_processes import ProcessCluster, read_partition

GROUP = "generations"
TOPIC = "tracked"
NO_DELAY = ["--group-initial-rebalance-delay-ms", "0"]
STALE_ERRORS = (IllegalGenerationError, UnknownMemberIdError)


def join(stub, member_id=""):
    response = stub.JoinGroup(
        groups_pb2.JoinGroupRequest(
            group_id=GROUP,
            member_id=member_id,
            client_id="tester",
            topics=[TOPIC],
            session_timeout_ms=30_000,
            rebalance_timeout_ms=10_000,
            assignment_strategies=["range"],
        ),
        timeout=30,
    )
    assert response.error == 0, response.error_message
    return response.member_id, response.generation_id


def commit(stub, member_id, generation, offset):
    request = groups_pb2.CommitOffsetsRequest(
        group_id=GROUP, member_id=member_id, generation_id=generation
    )
    request.offsets.add(topic=TOPIC, partition=0, offset=offset, leader_epoch=-1)
    response = stub.CommitOffsets(request, timeout=10)
    return error_from_code(response.error, response.error_message) if response.error else None


def committed(stub):
    response = stub.FetchOffsets(groups_pb2.FetchOffsetsRequest(group_id=GROUP), timeout=10)
    assert response.error == 0, response.error_message
    return {(o.topic, o.partition): o.offset for o in response.offsets}.get((TOPIC, 0), -1)


def stored_generation(client):
    """The generation of the group's last GroupMetadata record in `__consumer_offsets`."""
    partitions = len(client.describe_topic(OFFSETS_TOPIC).partitions)
    generation = None
    for record in read_partition(client, OFFSETS_TOPIC, partition_for_group(GROUP, partitions)):
        if key_type(record.key) == 2 and decode_group_key(record.key) == GROUP:
            generation = decode_group_value(record.value).generation if record.value else None
    return generation


def test_generations_continue_after_the_gateway_is_sigkilled(tmp_path):
    cluster = ProcessCluster(tmp_path, gateway_args=NO_DELAY)
    try:
        cluster.client.create_topic(TOPIC, 1)
        with grpc.insecure_channel(cluster.gateway.address) as channel:
            stub = groups_pb2_grpc.GroupCoordinatorStub(channel)
            old_member, first = join(stub)
            old_member, stored = join(stub, old_member)  # a second round: generation N > 1
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
