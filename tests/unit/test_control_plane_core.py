"""The control plane's typed core, called as both adapters call it: a Caller and typed
requests, no gRPC context and no Kafka request object. A real registry (the file backend in
a temporary directory) and a real authorizer: each call authorizes its caller itself, a
denied or malformed call changes nothing, and the rules are Kafka's."""

from __future__ import annotations

import pytest

from seglog.errors import InvalidRequestError, PermissionDeniedError
from seglog.security.acls import AclBinding
from services.gateway.authorization import Authorization
from services.gateway.broker.caller import Caller
from services.gateway.cluster.acl_admin import AclAdmin
from services.gateway.cluster.client_quotas import (
    PRODUCER_BYTE_RATE,
    ClientQuotaAdmin,
    EntityPart,
    QuotaAlteration,
    QuotaOp,
)
from services.gateway.cluster.producer_ids import ProducerIds
from services.gateway.cluster.registry import Registry

ADMIN = Caller("User:admin", "127.0.0.1", None, "kafka")
ALICE = Caller("User:alice", "127.0.0.1", "alice-app", "grpc")


def grant(principal: str, operation: str, kind: str = "cluster", name: str = "kafka-cluster"):
    return AclBinding(principal, "*", kind, "literal", name, operation, "allow")


@pytest.fixture
def parts(tmp_path):
    registry = Registry(tmp_path)
    authorization = Authorization(
        [], enabled=True, super_users=["User:admin"], acls_offset=registry.metadata_offset
    )
    registry.acl_listeners.append(authorization.update)
    return registry, authorization


def test_acls_are_administered_by_whoever_may_alter_the_cluster(parts) -> None:
    registry, authorization = parts
    acls = AclAdmin(registry, authorization)
    with pytest.raises(PermissionDeniedError, match="User:alice may not Alter cluster"):
        acls.create(ALICE, [grant("User:alice", "Write", "topic", "orders")])
    assert registry.acls == [] and authorization.denied == 1
    acls.create(ADMIN, [grant("User:alice", "Alter"), grant("User:bob", "Read", "topic", "x")])
    # Alter on the cluster implies Describe on it, as Kafka's authorizer has it.
    listed = acls.describe(ALICE, lambda acl: acl.principal == "User:bob")
    assert [acl.operation for acl in listed] == ["Read"]
    (matched,) = acls.delete(ALICE, [lambda acl: acl.principal == "User:bob"])
    assert [acl.principal for acl in matched] == ["User:bob"]
    assert [acl.principal for acl in registry.acls] == ["User:alice"]


def test_client_quotas_need_alter_configs_and_a_bad_alteration_changes_nothing(parts) -> None:
    registry, authorization = parts
    quotas = ClientQuotaAdmin(registry, authorization)
    alice = (EntityPart("user", "alice"),)
    good = QuotaAlteration(alice, (QuotaOp(PRODUCER_BYTE_RATE, 1024.0),))
    with pytest.raises(PermissionDeniedError, match="AlterConfigs cluster"):
        quotas.alter(ALICE, [good], validate_only=False)
    bad = QuotaAlteration((EntityPart("user", ""),), (QuotaOp(PRODUCER_BYTE_RATE, 1.0),))
    with pytest.raises(InvalidRequestError, match="needs a name"):
        quotas.alter(ADMIN, [good, bad], validate_only=False)
    assert registry.client_quotas == {}
    quotas.alter(ADMIN, [good], validate_only=True)
    assert registry.client_quotas == {}
    quotas.alter(ADMIN, [good], validate_only=False)
    (entry,) = quotas.describe(ADMIN)
    assert (entry.entity, dict(entry.values)) == (alice, {PRODUCER_BYTE_RATE: 1024.0})
    default_client = (EntityPart("client-id", None),)
    assert quotas.describe(ADMIN, default_client) == []
    with pytest.raises(PermissionDeniedError, match="DescribeConfigs cluster"):
        quotas.describe(ALICE)


def test_producer_ids_need_idempotent_write_and_refuse_a_transactional_id(parts) -> None:
    registry, authorization = parts
    ids = ProducerIds(registry, authorization)
    with pytest.raises(PermissionDeniedError, match="IdempotentWrite cluster"):
        ids.init_producer_id(ALICE, None)
    first, second = ids.init_producer_id(ADMIN, None), ids.init_producer_id(ADMIN, None)
    assert second.producer_id == first.producer_id + 1 and first.epoch == second.epoch == 0
    with pytest.raises(InvalidRequestError, match="transactions are not supported"):
        ids.init_producer_id(ADMIN, "orders-tx")
    # A second gateway's ids (a new ProducerIds on the same registry) never repeat these.
    assert ProducerIds(registry, authorization).init_producer_id(ADMIN, None).producer_id > (
        second.producer_id
    )
