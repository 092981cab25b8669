"""Clients' grants against ACL changes (bulk.md, "Grants and ACL changes"): the metadata image
marks the offset of each ACL change that may narrow access (a deletion, a Deny) and not of
one that widens it; a registry carries it into its answers to nodes; a node refuses a
client's grant from before it, never a relay's or a follower's; the gateway's authorizer
holds each ACL change with its offset."""

from __future__ import annotations

import pytest

from seglog.errors import PermissionDeniedError
from seglog.rpc import grants
from seglog.security.acls import AclBinding
from services.gateway.authorization import Authorization
from services.gateway.cluster.controller import view_states
from services.gateway.cluster.metadata_image import MetadataImage
from services.gateway.cluster.metadata_records import acl_record
from services.gateway.cluster.registry import Registry
from services.storage_node.acl_narrowings import AclNarrowings

SECRET = b"a-cluster-secret-of-enough-length"


def binding(operation: str, permission: str = "allow") -> AclBinding:
    return AclBinding("User:alice", "*", "topic", "literal", "orders", operation, permission)


def test_deletions_and_denies_narrow_access_and_allows_do_not() -> None:
    image = MetadataImage()
    image.apply(1, [acl_record("add", binding("Write").to_json())])
    image.apply(2, [acl_record("add", binding("Read").to_json())])
    assert image.acls_narrowed_offset == 0
    image.apply(3, [acl_record("remove", binding("Write").to_json())])
    assert image.acls_narrowed_offset == 3
    image.apply(4, [acl_record("add", binding("Describe").to_json())])
    assert image.acls_narrowed_offset == 3
    image.apply(5, [acl_record("add", binding("Read", "deny").to_json())])
    assert image.acls_narrowed_offset == 5
    replayed = MetadataImage.from_batches(
        [(1, [acl_record("add", binding("Read", "deny").to_json())])]
    )
    assert replayed.acls_narrowed_offset == 1  # a Deny in a snapshot still counts


def test_every_answer_to_a_node_carries_the_latest_narrowing(tmp_path) -> None:
    registry = Registry(tmp_path)
    registry.add_acls([binding("Write")])
    assert view_states(registry, registry.node_view(1, 0)).acls_narrowed_offset == 0
    registry.delete_acls([binding("Write")])
    narrowed = registry.metadata_offset
    assert registry.acls_narrowed_offset == narrowed > 0
    assert view_states(registry, registry.node_view(1, narrowed)).acls_narrowed_offset == narrowed


def _verified(**made) -> grants.VerifiedGrant:
    grant, signature, _ = grants.issue(SECRET, 1, [("orders", 0, 0, 0)], **made)
    return grants.verify(SECRET, grant, signature, 1)


def test_a_node_refuses_a_clients_grant_from_before_the_latest_narrowing() -> None:
    narrowings = AclNarrowings()
    narrowings.check(_verified(acls_offset=0))  # no narrowing known yet
    narrowings.note(7)
    narrowings.note(3)  # an older gateway's answer does not lower it
    assert narrowings.offset == 7
    with pytest.raises(PermissionDeniedError, match="metadata offset 6.*offset 7"):
        narrowings.check(_verified(acls_offset=6))
    narrowings.check(_verified(acls_offset=7))
    narrowings.check(_verified(acls_offset=9))
    # Not a client's: a follower's, and the gateway's relays, whose calls it checked itself.
    narrowings.check(_verified(replica_id=2))
    for relay in ({"produce_relay": True}, {"fetch_relay": True}):
        grant, signature, _ = grants.issue(SECRET, 1, (), **relay)
        narrowings.check(grants.verify(SECRET, grant, signature, 1))
    produce_grant, signature, _ = grants.issue(SECRET, 1, (), produce_topics=["orders"])
    with pytest.raises(PermissionDeniedError):
        narrowings.check(grants.verify(SECRET, produce_grant, signature, 1))


def test_the_authorizer_takes_each_acl_change_with_its_offset(tmp_path) -> None:
    registry = Registry(tmp_path)
    authorization = Authorization([], enabled=True, acls_offset=registry.metadata_offset)
    registry.acl_listeners.append(authorization.update)
    registry.add_acls([binding("Write")])
    assert authorization.acls_offset == registry.metadata_offset > 0
    assert authorization.authorizer.authorize("User:alice", "h", "Write", "topic", "orders")
    registry.delete_acls([binding("Write")])
    assert authorization.acls_offset == registry.metadata_offset == registry.acls_narrowed_offset
    assert not authorization.authorizer.authorize("User:alice", "h", "Write", "topic", "orders")
