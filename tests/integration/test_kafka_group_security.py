"""Kafka groups under security, as in production: the group APIs authorized per group and per
topic as Kafka's, and a librdkafka group (dynamic or static members) continuing across a
gateway restart with mutual TLS and the authorizer on."""

from __future__ import annotations

import uuid
from collections import Counter

from kafka.protocol.admin.groups import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.consumer.group import (
    JoinGroupRequest,
    JoinGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from kafka.protocol.metadata.find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)

from seglog.security.acls import AclBinding
from services.gateway.kafka.consumer_group_apis import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
)
from tests.authorizer_modes import Grant
from tests.cluster import LocalCluster
from tests.kafka_group_clients import (
    GROUP_AUTHORIZATION_FAILED,
    PARTITIONS,
    TIMEOUT_S,
    TOPIC_AUTHORIZATION_FAILED,
    Reader,
    poll_until,
    produce,
    rdkafka_consumer,
)
from tests.kafka_wire import KafkaWire
from tests.kip848_clients import heartbeat
from tests.secured import librdkafka_tls


def test_group_apis_are_authorized_per_group_and_per_topic_as_kafkas(tmp_path):
    cluster = LocalCluster(tmp_path, nodes=1, authorizer=True)
    try:
        anonymous = [
            AclBinding("User:ANONYMOUS", "*", "topic", "literal", "*", "Create", "allow"),
            AclBinding("User:ANONYMOUS", "*", "topic", "literal", "readable", "Read", "allow"),
            AclBinding("User:ANONYMOUS", "*", "group", "literal", "allowed", "Read", "allow"),
        ]
        cluster.gateway.registry.add_acls(anonymous)  # the server's own setup, not a client
        cluster.admin.create_topic("readable", 1, 1)
        cluster.admin.create_topic("hidden", 1, 1)

        def commit_request(group):
            return OffsetCommitRequest[5](
                group_id=group,
                generation_id_or_member_epoch=-1,  # a simple commit, outside membership
                member_id="",
                topics=[
                    OffsetCommitRequest.OffsetCommitRequestTopic(
                        name=topic,
                        partitions=[
                            OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                                partition_index=0, committed_offset=3, committed_metadata=""
                            )
                        ],
                    )
                    for topic in ("readable", "hidden")
                ],
            )

        with KafkaWire(cluster.kafka_address) as wire:
            denied = wire.request(
                FindCoordinatorRequest[2](key="denied", key_type=0), 2, FindCoordinatorResponse
            )
            assert denied.error_code == GROUP_AUTHORIZATION_FAILED
            assert "__consumer_offsets" not in cluster.gateway.registry.topics  # not when refused
            found = wire.request(
                FindCoordinatorRequest[2](key="allowed", key_type=0), 2, FindCoordinatorResponse
            )
            # Kafka's broker makes the offsets topic on a group's first FindCoordinator (clients
            # such as franz-go's regex consumer wait to see it in Metadata).
            assert found.error_code == 0
            assert "__consumer_offsets" in cluster.gateway.registry.topics
            joined = wire.request(
                JoinGroupRequest[5](
                    group_id="denied",
                    session_timeout_ms=10_000,
                    rebalance_timeout_ms=10_000,
                    member_id="",
                    group_instance_id=None,
                    protocol_type="consumer",
                    protocols=[
                        JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")
                    ],
                ),
                5,
                JoinGroupResponse,
            )
            assert joined.error_code == GROUP_AUTHORIZATION_FAILED
            committed = wire.request(commit_request("allowed"), 5, OffsetCommitResponse)
            assert {t.name: t.partitions[0].error_code for t in committed.topics} == {
                "readable": 0,
                "hidden": TOPIC_AUTHORIZATION_FAILED,
            }
            refused = wire.request(commit_request("denied"), 5, OffsetCommitResponse)
            assert {t.partitions[0].error_code for t in refused.topics} == {
                GROUP_AUTHORIZATION_FAILED,
                TOPIC_AUTHORIZATION_FAILED,
            }
            fetched = wire.request(
                OffsetFetchRequest[5](group_id="allowed", topics=None), 5, OffsetFetchResponse
            )
            assert fetched.error_code == 0
            assert [(t.name, t.partitions[0].committed_offset) for t in fetched.topics] == [
                ("readable", 3)
            ]
            described = wire.request(
                DescribeGroupsRequest[5](groups=["allowed", "denied"]), 5, DescribeGroupsResponse
            )
            assert [g.error_code for g in described.groups] == [0, GROUP_AUTHORIZATION_FAILED]
            listed = wire.request(ListGroupsRequest[4](states_filter=[]), 4, ListGroupsResponse)
            assert [g.group_id for g in listed.groups] == ["allowed"]
        assert cluster.gateway.offsets.committed("denied") == {}
    finally:
        cluster.close()


# -- a coordinator restart ---------------------------------------------------------------------
# In the production configuration only (the group's behaviour across a restart does not depend
# on the authorizer; its authorizer-off paths are the shared-cluster tests' first run): mutual
# TLS on gRPC and on the Kafka listener, the authorizer on, and the tests' principal — the
# certificate `client`, no super user — granted exactly what the test does.


def secured_cluster(root, topic: str, group: str) -> LocalCluster:
    """One node, mutual TLS, the authorizer on; `User:client` may create and use `topic` and
    join and commit as `group` (the ACLs an operator would have put in place first)."""
    cluster = LocalCluster(
        root, nodes=1, tls=True, authorizer=True, kafka_listen="SSL://127.0.0.1:0"
    )
    grants = (
        Grant("topic", ("Create", "Write", "Read"), topic),
        Grant("group", ("Read",), group),
    )
    assert cluster.gateway is not None
    cluster.gateway.registry.add_acls([b for g in grants for b in g.bindings("User:client")])
    return cluster


def client_tls(cluster) -> dict[str, str]:
    """librdkafka's settings for the SSL listener with the `client` certificate."""
    return librdkafka_tls(cluster.tls_files("client"))


def test_kip848_group_apis_are_authorized_per_group_and_per_topic_as_kafkas(tmp_path):
    """ConsumerGroupHeartbeat needs Read on the group, then Describe on each topic it names;
    ConsumerGroupDescribe needs Describe on the group (which Read implies), as Kafka's
    KafkaApis authorizes them."""
    cluster = LocalCluster(tmp_path, nodes=1, authorizer=True)
    try:
        cluster.gateway.registry.add_acls(
            [
                AclBinding("User:ANONYMOUS", "*", "topic", "literal", "*", "Create", "allow"),
                AclBinding("User:ANONYMOUS", "*", "topic", "literal", "seen", "Read", "allow"),
                AclBinding("User:ANONYMOUS", "*", "group", "literal", "allowed", "Read", "allow"),
            ]
        )  # the server's own setup, not a client
        cluster.admin.create_topic("seen", 1, 1)
        cluster.admin.create_topic("unseen", 1, 1)
        with KafkaWire(cluster.kafka_address) as wire:

            def join(group, topics):
                return heartbeat(wire, group, str(uuid.uuid4()), 0, topics=topics).error_code

            assert join("denied", ["seen"]) == GROUP_AUTHORIZATION_FAILED
            assert join("allowed", ["unseen"]) == TOPIC_AUTHORIZATION_FAILED
            assert join("allowed", ["seen"]) == 0
            described = wire.request(
                ConsumerGroupDescribeRequest[1](
                    group_ids=["allowed", "denied"], include_authorized_operations=False
                ),
                1,
                ConsumerGroupDescribeResponse,
            )
            assert [g.error_code for g in described.groups] == [0, GROUP_AUTHORIZATION_FAILED]
            assert described.groups[0].members[0].assignment.topic_partitions[0].topic_name == (
                "seen"
            )
    finally:
        cluster.close()


def test_a_librdkafka_group_continues_across_a_gateway_restart(tmp_path):
    # Membership is the gateway's memory: the member meets UNKNOWN_MEMBER_ID and joins again,
    # in the generation after the stored one, and resumes from its committed offsets.
    cluster = secured_cluster(tmp_path, "restarted", "restarted-readers")
    tls = client_tls(cluster)
    try:
        cluster.admin.create_topic("restarted", PARTITIONS, 1)
        produce(cluster, "restarted", range(100), **tls)
        seen: Counter[int] = Counter()
        uncommitted: set[int] = set()
        reader = Reader(rdkafka_consumer(cluster, "restarted-readers", **tls), seen, uncommitted)
        reader.consumer.subscribe(["restarted"])
        try:
            assert poll_until([reader], lambda: len(seen) == 100)
            before = cluster.gateway.coordinator.snapshot("restarted-readers").generation
            cluster.restart_gateway()  # same gRPC and Kafka ports, same data
            produce(cluster, "restarted", range(100, 200), **tls)
            assert poll_until([reader], lambda: len(seen) == 200), len(seen)
            after = cluster.gateway.coordinator.snapshot("restarted-readers")
        finally:
            reader.consumer.close()
        assert (after.state, after.generation) == ("Stable", before + 1)
        assert set(seen) == set(range(200))
        assert {value for value, count in seen.items() if count > 1} <= uncommitted
    finally:
        cluster.close()


def test_a_static_librdkafka_member_keeps_its_place_across_a_gateway_restart(tmp_path):
    # Kafka's coordinator loads a group with its members: a static member goes on in its
    # generation, no rebalance.
    cluster = secured_cluster(tmp_path, "kept", "kept-readers")
    tls = client_tls(cluster)
    try:
        cluster.admin.create_topic("kept", PARTITIONS, 1)
        produce(cluster, "kept", range(40), **tls)
        seen: Counter[int] = Counter()
        uncommitted: set[int] = set()
        config = {"group.instance.id": "kept-a", **tls}
        reader = Reader(rdkafka_consumer(cluster, "kept-readers", **config), seen, uncommitted)
        reader.consumer.subscribe(["kept"])
        try:
            assert poll_until([reader], lambda: len(seen) == 40)
            before = cluster.gateway.coordinator.snapshot("kept-readers")
            assert cluster.gateway.coordinator.wait_persisted(TIMEOUT_S)
            cluster.restart_gateway()
            produce(cluster, "kept", range(40, 80), **tls)
            assert poll_until([reader], lambda: len(seen) == 80), len(seen)
            after = cluster.gateway.coordinator.snapshot("kept-readers")
        finally:
            reader.consumer.close()
        assert (after.state, after.generation) == ("Stable", before.generation)
        assert [m.group_instance_id for m in after.members.values()] == ["kept-a"]
        assert set(seen) == set(range(80))
        assert {value for value, count in seen.items() if count > 1} <= uncommitted
    finally:
        cluster.close()
