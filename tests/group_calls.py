"""Group calls the generation tests share: raw JoinGroup, CommitOffsets and FetchOffsets
against one gateway, and the generation of a group's last GroupMetadata record as stored in
`__consumer_offsets`."""

from seglog.errors import IllegalGenerationError, UnknownMemberIdError
from seglog.rpc.status import error_from_code
from seglog.v1 import groups_pb2
from services.gateway.groups.offsets_formats import (
    decode_group_key,
    decode_group_value,
    key_type,
    partition_for_group,
)
from services.gateway.groups.offsets_store import OFFSETS_TOPIC
from tests.e2e.test_processes import read_partition

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


def rejoin_as_a_new_member(stub, member_id):
    """Leave and join anew: a second generation (a stable member's rejoin with the same
    subscription starts none)."""
    stub.LeaveGroup(groups_pb2.LeaveGroupRequest(group_id=GROUP, member_id=member_id), timeout=10)
    return join(stub)


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
    (offsets_topic,) = client.describe_topics([OFFSETS_TOPIC])
    partitions = len(offsets_topic.partitions)
    generation = None
    for record in read_partition(client, OFFSETS_TOPIC, partition_for_group(GROUP, partitions)):
        if key_type(record.key) == 2 and decode_group_key(record.key) == GROUP:
            generation = decode_group_value(record.value).generation if record.value else None
    return generation
