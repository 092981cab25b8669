"""ACLs over Kafka's protocol with real Kafka clients: confluent-kafka's AdminClient and
kafka-python's KafkaAdminClient create, describe and delete ACLs against the gateway's Kafka
listener (the authorizer off, then on), and ACLs made over either API, Kafka's or seglog's
gRPC, are enforced on the other."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka import KafkaAdminClient
from kafka import errors as kafka_errors
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ResourcePattern,
)
from kafka.admin import ResourceType as PythonResourceType
from kafka.protocol.admin import (
    DescribeClusterRequest,
    DescribeClusterResponse,
)

from seglog.client.gateway import GatewayClient
from seglog.errors import PermissionDeniedError
from seglog.security.acls import ANONYMOUS
from seglog.security.acls import AclBinding as SeglogAcl
from seglog.v1 import common_pb2
from tests.authorizer_modes import AUTHORIZER_MODES, cluster_in_mode
from tests.batches import make_batch
from tests.cluster import LocalCluster
from tests.kafka_admin_calls import ADMIN_GRANTS, error_code_of, result_of
from tests.kafka_wire import KafkaWire


@pytest.fixture(scope="module", params=AUTHORIZER_MODES)
def cluster(request, tmp_path_factory):
    """The module's tests with the authorizer off, then on (ADMIN_GRANTS)."""
    c = cluster_in_mode(tmp_path_factory.mktemp("kafka-acls"), request.param, ADMIN_GRANTS, nodes=1)
    yield c
    c.close()


@pytest.fixture(scope="module")
def admin(cluster):
    return AdminClient({"bootstrap.servers": cluster.kafka_address})


@pytest.fixture(scope="module")
def python_admin(cluster):
    client = KafkaAdminClient(bootstrap_servers=cluster.kafka_address, client_id="admin-tests")
    yield client
    client.close()


def test_acls_are_created_described_and_deleted(cluster, admin):
    bindings = [
        AclBinding(
            ResourceType.TOPIC,
            "ck-acl",
            ResourcePatternType.LITERAL,
            "User:alice",
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        ),
        AclBinding(
            ResourceType.GROUP,
            "ck-",
            ResourcePatternType.PREFIXED,
            "User:bob",
            "*",
            AclOperation.ALL,
            AclPermissionType.DENY,
        ),
    ]
    for future in admin.create_acls(bindings).values():
        assert result_of(future) is None
    stored = {(a.principal, a.resource_name, a.operation) for a in cluster.gateway.registry.acls}
    assert stored >= {("User:alice", "ck-acl", "Read"), ("User:bob", "ck-", "All")}
    everything = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    assert set(result_of(admin.describe_acls(everything))) >= set(bindings)
    # MATCH: every ACL that applies to the group "ck-payments", here bob's prefixed one.
    matching = AclBindingFilter(
        ResourceType.GROUP,
        "ck-payments",
        ResourcePatternType.MATCH,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    # (With the authorizer on, the fixture's wildcard grants to ANONYMOUS match too.)
    found = [b for b in result_of(admin.describe_acls(matching)) if b.principal != ANONYMOUS]
    assert found == [bindings[1]]
    alice = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        "User:alice",
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    (deleted,) = admin.delete_acls([alice]).values()
    assert result_of(deleted) == [bindings[0]]
    assert result_of(admin.describe_acls(alice)) == []
    # Transactional ids are ACL resources too (the transaction coordinator checks them).
    transactional = AclBinding(
        ResourceType.TRANSACTIONAL_ID,
        "tx-1",
        ResourcePatternType.LITERAL,
        "User:carol",
        "*",
        AclOperation.WRITE,
        AclPermissionType.ALLOW,
    )
    (created,) = admin.create_acls([transactional]).values()
    assert result_of(created) is None
    carol = AclBindingFilter(
        ResourceType.TRANSACTIONAL_ID,
        None,
        ResourcePatternType.ANY,
        "User:carol",
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    assert result_of(admin.describe_acls(carol)) == [transactional]
    (deleted,) = admin.delete_acls([carol]).values()
    assert result_of(deleted) == [transactional]


def test_kafka_python_manages_acls(cluster, python_admin):
    pattern = ResourcePattern(PythonResourceType.TOPIC, "kp-acl", ACLResourcePatternType.LITERAL)
    acl = ACL("User:dave", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW, pattern)
    created = python_admin.create_acls([acl])
    assert created["failed"] == [] and len(created["succeeded"]) == 1
    dave = ACLFilter("User:dave", None, ACLOperation.ANY, ACLPermissionType.ANY, pattern)
    found, error = python_admin.describe_acls(dave)
    assert error is kafka_errors.NoError and found == [acl]
    deleted = python_admin.delete_acls([dave])
    ((_, matched, error),) = deleted
    assert error is kafka_errors.NoError and matched == [acl]
    assert SeglogAcl("User:dave", "*", "topic", "literal", "kp-acl", "Write", "allow") not in (
        cluster.gateway.registry.acls
    )


# -- ACLs across the two APIs ---------------------------------------------------------------


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """An authorizer on: the gRPC side's principals are certificates (admin is a super
    user); the Kafka listener's clients, without SASL, are User:ANONYMOUS."""
    c = LocalCluster(
        tmp_path_factory.mktemp("kafka-admin-secured"),
        nodes=1,
        tls=True,
        authorizer=True,
        super_users=("User:admin", "User:client"),
        kafka_listen="PLAINTEXT://127.0.0.1:0",
    )
    yield c
    c.close()


def _cluster_operations(cluster) -> set[int]:
    with KafkaWire(cluster.kafka_address) as wire:
        described = wire.request(
            DescribeClusterRequest(include_cluster_authorized_operations=True),
            1,
            DescribeClusterResponse,
        )
    assert described.error_code == 0 and len(described.brokers) == 1
    return set(described.authorized_operations)


def _grant(principal, operation, kind, name, pattern="literal"):
    return SeglogAcl(principal, "*", kind, pattern, name, operation, "allow")


def test_acls_made_over_either_api_are_enforced_on_the_other(secured):
    anonymous = AdminClient({"bootstrap.servers": secured.kafka_address})
    made_over_kafka = AclBinding(
        ResourceType.TOPIC,
        "kafka-made",
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.WRITE,
        AclPermissionType.ALLOW,
    )
    (refused,) = anonymous.create_acls([made_over_kafka]).values()
    assert error_code_of(refused) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    created = anonymous.create_topics([NewTopic("kafka-made", 1, 1)])
    assert error_code_of(created["kafka-made"]) == KafkaError.TOPIC_AUTHORIZATION_FAILED

    assert _cluster_operations(secured) == set()  # described to anyone, but nothing allowed

    # Granted over gRPC, enforced on the Kafka listener.
    with secured.admin_as("admin") as grpc_admin:
        grpc_admin.create_acls(
            [
                _grant("User:ANONYMOUS", "Alter", "cluster", "kafka-cluster"),
                _grant("User:ANONYMOUS", "Create", "topic", "kafka-", "prefixed"),
            ]
        )
    assert result_of(anonymous.create_topics([NewTopic("kafka-made", 1, 1)])["kafka-made"]) is None
    assert _cluster_operations(secured) == {ACLOperation.ALTER, ACLOperation.DESCRIBE}

    # Granted over Kafka, enforced on the gRPC path.
    with GatewayClient(secured.address, security=secured.client_security("alice")) as alice:
        with pytest.raises(PermissionDeniedError, match="Write topic 'kafka-made'"):
            alice.produce("kafka-made", {0: make_batch([b"no"])})
        (granted,) = anonymous.create_acls([made_over_kafka]).values()
        assert result_of(granted) is None
        (written,) = alice.produce("kafka-made", {0: make_batch([b"yes"])})
        assert written.error == common_pb2.NONE
        (deleted,) = anonymous.delete_acls(
            [
                AclBindingFilter(
                    ResourceType.TOPIC,
                    "kafka-made",
                    ResourcePatternType.LITERAL,
                    "User:alice",
                    None,
                    AclOperation.ANY,
                    AclPermissionType.ANY,
                )
            ]
        ).values()
        assert result_of(deleted) == [made_over_kafka]
        with pytest.raises(PermissionDeniedError):
            alice.produce("kafka-made", {0: make_batch([b"no again"])})
