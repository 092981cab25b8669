"""Kafka's ACL enums and filters over seglog's ACL model (services/gateway/kafka/acl_apis.py):
requests built with kafka-python's codec, as a client sends them."""

from __future__ import annotations

import pytest
from kafka.protocol.admin import (
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ACLResourceType,
    CreateAclsRequest,
    DescribeAclsRequest,
)

from seglog.errors import InvalidRequestError
from seglog.security.acls import AclBinding
from services.gateway.kafka.acl_apis import AclFilter, binding_of

ALICE_READS_ORDERS = AclBinding("User:alice", "*", "topic", "literal", "orders", "Read", "allow")
BOB_DENIED_PAY = AclBinding("User:bob", "*", "topic", "prefixed", "pay", "All", "deny")
EVERYONE_WRITES_ANY = AclBinding("User:*", "*", "topic", "literal", "*", "Write", "allow")
GROUP_ACL = AclBinding("User:alice", "10.0.0.1", "group", "literal", "orders", "Read", "allow")
ACLS = [ALICE_READS_ORDERS, BOB_DENIED_PAY, EVERYONE_WRITES_ANY, GROUP_ACL]


def _filter(**fields) -> AclFilter:
    wanted = {
        "resource_type_filter": ACLResourceType.ANY,
        "resource_name_filter": None,
        "pattern_type_filter": ACLResourcePatternType.ANY,
        "principal_filter": None,
        "host_filter": None,
        "operation": ACLOperation.ANY,
        "permission_type": ACLPermissionType.ANY,
        **fields,
    }
    request = DescribeAclsRequest[3](**wanted)
    return AclFilter(DescribeAclsRequest.decode(request.encode(version=3), version=3))


def _matching(**fields) -> list[AclBinding]:
    wanted = _filter(**fields)
    return [acl for acl in ACLS if wanted.matches(acl)]


def test_any_matches_everything_and_each_field_narrows():
    assert _matching() == ACLS
    assert _matching(resource_type_filter=ACLResourceType.GROUP) == [GROUP_ACL]
    assert _matching(principal_filter="User:bob") == [BOB_DENIED_PAY]
    assert _matching(host_filter="10.0.0.1") == [GROUP_ACL]
    assert _matching(operation=ACLOperation.WRITE) == [EVERYONE_WRITES_ANY]
    assert _matching(permission_type=ACLPermissionType.DENY) == [BOB_DENIED_PAY]
    assert _matching(pattern_type_filter=ACLResourcePatternType.PREFIXED) == [BOB_DENIED_PAY]


def test_a_literal_name_matches_only_that_name_and_match_finds_what_applies():
    assert _matching(
        resource_type_filter=ACLResourceType.TOPIC,
        resource_name_filter="orders",
        pattern_type_filter=ACLResourcePatternType.LITERAL,
    ) == [ALICE_READS_ORDERS]
    # MATCH: the literal name, the literal wildcard, and every prefix of the name.
    assert _matching(
        resource_type_filter=ACLResourceType.TOPIC,
        resource_name_filter="payments",
        pattern_type_filter=ACLResourcePatternType.MATCH,
    ) == [BOB_DENIED_PAY, EVERYONE_WRITES_ANY]


def test_kafka_values_seglog_keeps_no_acl_with_match_nothing_and_unknown_ones_are_refused():
    assert _matching(resource_type_filter=ACLResourceType.DELEGATION_TOKEN) == []
    assert _matching(operation=ACLOperation.CREATE_TOKENS) == []
    with pytest.raises(InvalidRequestError):
        _filter(operation=ACLOperation.UNKNOWN)
    with pytest.raises(InvalidRequestError):
        _filter(resource_type_filter=42)


def _creation(**fields):
    wanted = {
        "resource_type": ACLResourceType.TOPIC,
        "resource_name": "orders",
        "resource_pattern_type": ACLResourcePatternType.LITERAL,
        "principal": "User:alice",
        "host": "*",
        "operation": ACLOperation.READ,
        "permission_type": ACLPermissionType.ALLOW,
        **fields,
    }
    return CreateAclsRequest.AclCreation(**wanted)


def test_creations_map_onto_seglog_bindings_and_refuse_what_seglog_cannot_hold():
    assert binding_of(_creation()) == ALICE_READS_ORDERS
    assert (
        binding_of(
            _creation(
                resource_pattern_type=ACLResourcePatternType.PREFIXED,
                resource_name="pay",
                principal="User:bob",
                operation=ACLOperation.ALL,
                permission_type=ACLPermissionType.DENY,
            )
        )
        == BOB_DENIED_PAY
    )
    for refused in (
        {"resource_type": ACLResourceType.DELEGATION_TOKEN},
        {"resource_pattern_type": ACLResourcePatternType.MATCH},
        {"operation": ACLOperation.ANY},
        {"permission_type": ACLPermissionType.ANY},
        {"principal": "alice"},
        {"resource_type": ACLResourceType.CLUSTER, "resource_name": "other"},
    ):
        with pytest.raises(InvalidRequestError):
            binding_of(_creation(**refused))
