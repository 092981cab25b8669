"""Kafka's group APIs at the wire: the oldest served versions run a group end to end,
JoinGroup v4+ asks a new member to join again with its id, and bad requests get Kafka's
answers on a connection that serves on. The authorizer off, then on."""

from __future__ import annotations

import kafka
import pytest
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment,
)
from kafka.protocol.metadata.find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)

from tests.authorizer_modes import AUTHORIZER_MODES
from tests.kafka_group_clients import (
    UNKNOWN_MEMBER_ID,
    cluster_per_authorizer_mode,
    create_topic,
    join_request,
)
from tests.kafka_wire import KafkaWire


@pytest.fixture(scope="module", params=AUTHORIZER_MODES)
def cluster(request, tmp_path_factory):
    yield from cluster_per_authorizer_mode(request, tmp_path_factory)


def test_the_oldest_served_versions_run_a_group_end_to_end(cluster):
    create_topic(cluster, "wire-group")
    given = ConsumerProtocolAssignment(
        version=0,
        assigned_partitions=[
            ConsumerProtocolAssignment.TopicPartition(topic="wire-group", partitions=[0, 1])
        ],
    ).encode()
    with KafkaWire(cluster.kafka_address) as wire:
        found = wire.request(FindCoordinatorRequest[0](key="wire-v0"), 0, FindCoordinatorResponse)
        # The lowest live node, at its lane (kafka/brokers.py).
        lowest = min(cluster.nodes)
        assert (found.error_code, found.node_id) == (0, lowest)
        lane = cluster.gateway.kafka_listener.lane_addresses[lowest]
        assert f"{found.host}:{found.port}" == lane
        # v0 needs no known member id and has no rebalance timeout.
        joined = wire.request(join_request(0), 0, JoinGroupResponse)
        assert joined.error_code == 0 and joined.leader == joined.member_id
        assert [m.member_id for m in joined.members] == [joined.member_id]
        member, generation = joined.member_id, joined.generation_id
        synced = wire.request(
            SyncGroupRequest[0](
                group_id="wire-v0",
                generation_id=generation,
                member_id=member,
                assignments=[
                    SyncGroupRequest.SyncGroupRequestAssignment(member_id=member, assignment=given)
                ],
            ),
            0,
            SyncGroupResponse,
        )
        assert (synced.error_code, bytes(synced.assignment)) == (0, bytes(given))
        beat = HeartbeatRequest[0](group_id="wire-v0", generation_id=generation, member_id=member)
        assert wire.request(beat, 0, HeartbeatResponse).error_code == 0
        commit = OffsetCommitRequest[2](
            group_id="wire-v0",
            generation_id_or_member_epoch=generation,
            member_id=member,
            retention_time_ms=-1,
            topics=[
                OffsetCommitRequest.OffsetCommitRequestTopic(
                    name="wire-group",
                    partitions=[
                        OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                            partition_index=1, committed_offset=7, committed_metadata="m"
                        )
                    ],
                )
            ],
        )
        (topic,) = wire.request(commit, 2, OffsetCommitResponse).topics
        assert [p.error_code for p in topic.partitions] == [0]
        fetch = OffsetFetchRequest[1](
            group_id="wire-v0",
            topics=[
                OffsetFetchRequest.OffsetFetchRequestTopic(
                    name="wire-group", partition_indexes=[0, 1]
                )
            ],
        )
        (topic,) = wire.request(fetch, 1, OffsetFetchResponse).topics
        assert [(p.committed_offset, p.metadata, p.error_code) for p in topic.partitions] == [
            (-1, "", 0),
            (7, "m", 0),
        ]
        leave = LeaveGroupRequest[0](group_id="wire-v0", member_id=member)
        assert wire.request(leave, 0, LeaveGroupResponse).error_code == 0
        assert wire.request(leave, 0, LeaveGroupResponse).error_code == UNKNOWN_MEMBER_ID


def test_join_v7_asks_a_new_member_to_join_again_with_its_id(cluster):
    with KafkaWire(cluster.kafka_address) as wire:
        first = wire.request(join_request(7), 7, JoinGroupResponse)
        assert first.error_code == kafka.errors.MemberIdRequiredError.errno
        assert first.member_id
        joined = wire.request(join_request(7, first.member_id), 7, JoinGroupResponse)
        assert (joined.error_code, joined.member_id) == (0, first.member_id)
        assert (joined.protocol_type, joined.protocol_name) == ("consumer", "range")
        # LeaveGroup v3+: a batch, one answer per member.
        leave = LeaveGroupRequest[4](
            group_id="wire-v7",
            members=[
                LeaveGroupRequest.MemberIdentity(member_id="never-joined"),
                LeaveGroupRequest.MemberIdentity(member_id=joined.member_id),
            ],
        )
        answer = wire.request(leave, 4, LeaveGroupResponse)
        assert answer.error_code == 0
        assert [m.error_code for m in answer.members] == [UNKNOWN_MEMBER_ID, 0]


def test_bad_group_requests_get_kafkas_answers_on_a_connection_that_serves_on(cluster):
    def join(group_id, session_timeout_ms=10_000, protocols=True):
        return JoinGroupRequest[5](
            group_id=group_id,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=10_000,
            member_id="",
            group_instance_id=None,
            protocol_type="consumer",
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"\x00")]
            if protocols
            else [],
        )

    with KafkaWire(cluster.kafka_address) as wire:
        answers = [
            wire.request(join(""), 5, JoinGroupResponse).error_code,
            wire.request(join("bad-input", 10), 5, JoinGroupResponse).error_code,
            wire.request(join("bad-input", protocols=False), 5, JoinGroupResponse).error_code,
        ]
        assert answers == [
            kafka.errors.InvalidGroupIdError.errno,
            kafka.errors.InvalidSessionTimeoutError.errno,
            kafka.errors.InconsistentGroupProtocolError.errno,
        ]
        sync = SyncGroupRequest[3](
            group_id="never-joined", generation_id=1, member_id="nobody", assignments=[]
        )
        assert wire.request(sync, 3, SyncGroupResponse).error_code == UNKNOWN_MEMBER_ID
        # Metadata bytes that are not a consumer subscription are the client's business.
        required = wire.request(join("bad-input"), 5, JoinGroupResponse)
        request = join("bad-input")
        request.member_id = required.member_id
        joined = wire.request(request, 5, JoinGroupResponse)
        assert joined.error_code == 0
        assert (
            cluster.gateway.coordinator.snapshot("bad-input").members[joined.member_id].topics == ()
        )
        leave = LeaveGroupRequest[3](
            group_id="bad-input",
            members=[LeaveGroupRequest.MemberIdentity(member_id=joined.member_id)],
        )
        assert wire.request(leave, 3, LeaveGroupResponse).members[0].error_code == 0
