"""Kafka's authorizer rules (security/acls.py): literal and prefixed patterns, wildcards,
deny over allow, implied Describe, super users, the no-ACL default, and a decision among
10,000 ACLs that looks only at the ones that can match."""

from __future__ import annotations

import pytest

from seglog.errors import InvalidRequestError
from seglog.security.acls import OPERATIONS, AclBinding, Authorizer


def acl(
    principal, operation, name, *, kind="topic", pattern="literal", permission="allow", host="*"
):
    return AclBinding(f"User:{principal}", host, kind, pattern, name, operation, permission)


def test_the_acl_matrix():
    authorizer = Authorizer(
        [
            acl("alice", "Write", "orders"),
            acl("bob", "Read", "ord", pattern="prefixed"),
            acl("bob", "Read", "ordersecret", permission="deny"),
            acl("*", "Describe", "public"),
            acl("carol", "All", "logs-", pattern="prefixed"),
            acl("dave", "Read", "billing", kind="group"),
            acl("erin", "Write", "orders", host="10.0.0.9"),
            acl("frank", "AlterConfigs", "orders"),
        ],
        super_users=["User:admin"],
    )
    allowed = authorizer.authorize
    assert allowed("User:alice", "1.2.3.4", "Write", "topic", "orders")
    assert not allowed("User:alice", "1.2.3.4", "Read", "topic", "orders")
    assert allowed("User:alice", "1.2.3.4", "Describe", "topic", "orders")  # implied by Write
    assert not allowed("User:alice", "1.2.3.4", "Write", "topic", "orders2")  # literal only
    assert allowed("User:bob", "h", "Read", "topic", "orders")  # prefixed
    assert not allowed("User:bob", "h", "Read", "topic", "ordersecret")  # deny wins
    assert not allowed("User:bob", "h", "Read", "topic", "payments")
    assert allowed("User:zoe", "h", "Describe", "topic", "public")  # User:*
    assert not allowed("User:zoe", "h", "Read", "topic", "public")
    for operation in OPERATIONS:
        assert allowed("User:carol", "h", operation, "topic", "logs-app")  # All
    assert allowed("User:dave", "h", "Read", "group", "billing")
    assert not allowed("User:dave", "h", "Read", "topic", "billing")  # another resource type
    assert allowed("User:erin", "10.0.0.9", "Write", "topic", "orders")
    assert not allowed("User:erin", "10.0.0.8", "Write", "topic", "orders")  # host bound
    assert allowed("User:frank", "h", "DescribeConfigs", "topic", "orders")  # implied
    assert allowed("User:admin", "h", "Delete", "cluster", "kafka-cluster")  # super user
    # No ACL names the resource: closed by default, open with the setting.
    assert not allowed("User:zoe", "h", "Read", "topic", "nothing-here")
    open_default = Authorizer([], allow_everyone_if_no_acl_found=True)
    assert open_default.authorize("User:zoe", "h", "Read", "topic", "nothing-here")


def test_bad_bindings_are_refused_with_what_is_wrong():
    with pytest.raises(InvalidRequestError, match="User:<name>"):
        acl("x", "Read", "t").__class__(
            "alice", "*", "topic", "literal", "t", "Read", "allow"
        ).check()
    with pytest.raises(InvalidRequestError, match="operation 'Fly'"):
        acl("alice", "Fly", "t").check()
    with pytest.raises(InvalidRequestError, match="kafka-cluster"):
        acl("alice", "Alter", "mine", kind="cluster").check()


def test_ten_thousand_acls_are_indexed():
    acls = [acl(f"user{i}", "Read", f"topic-{i}") for i in range(5000)]
    acls += [acl(f"user{i}", "Write", f"pre-{i}-", pattern="prefixed") for i in range(5000)]
    authorizer = Authorizer(acls)
    assert authorizer.authorize("User:user42", "h", "Read", "topic", "topic-42")
    assert authorizer.authorize("User:user7", "h", "Write", "topic", "pre-7-orders")
    assert not authorizer.authorize("User:user7", "h", "Write", "topic", "pre-8-orders")
    # Only the ACLs that can match are looked at: a literal name and the name's prefixes.
    assert len(authorizer._matching("topic", "pre-7-orders")) == 1
