"""A revoked ACL reaches clients that hold grants (bulk.md, "Grants and ACL changes"), on a
mutual-TLS cluster with the authorizer on and grants that live ten minutes, so no expiry can
be what stops them: once the node has heard of an ACL deleted (or a Deny added), a producer's
next request under its old grant is refused by the node and denied by the gateway, nothing
written, and a consumer's next read likewise; an ACL added that narrows nothing leaves the
grants held in use."""

from __future__ import annotations

import pytest

from seglog.client.consumer import Consumer
from seglog.client.producer import Producer
from seglog.client.structs import TopicPartition
from seglog.errors import PermissionDeniedError, SeglogError
from seglog.security.acls import CLUSTER_NAME, AclBinding
from tests.cluster import LocalCluster
from tests.waiting import wait_until

GRANT_TTL_MS = 600_000
DEADLINE_S = 20.0


def acl(principal, operation, name, *, kind="topic", permission="allow") -> AclBinding:
    return AclBinding(f"User:{principal}", "*", kind, "literal", name, operation, permission)


ALICE_MAY = [
    acl("alice", "Write", "orders"),
    acl("alice", "Read", "orders"),
    acl("alice", "Describe", "orders"),
    acl("alice", "IdempotentWrite", CLUSTER_NAME, kind="cluster"),
]


def _secured_cluster(tmp_path, **settings) -> LocalCluster:
    return LocalCluster(
        tmp_path,
        nodes=1,
        tls=True,
        authorizer=True,
        super_users=("User:admin",),
        fetch_grant_ttl_ms=GRANT_TTL_MS,
        **settings,
    )


@pytest.fixture
def cluster(tmp_path):
    c = _secured_cluster(tmp_path)
    with c.admin_as("admin") as admin:
        admin.create_topic("orders", 1, 1)
        admin.create_acls(ALICE_MAY)
    yield c
    c.close()


def _node_heard_of_the_acls(cluster) -> None:
    """Wait until the node has a registry answer from after the gateway's latest ACL change."""
    node = cluster.nodes[1]
    offset = cluster.gateway.registry.metadata_offset
    assert wait_until(lambda: node.applier.received_offset >= offset, DEADLINE_S)
    assert node.applier.acl_narrowings.offset == cluster.gateway.registry.acls_narrowed_offset


def _direct(producer) -> float:
    return producer.metrics()["producer-metrics"]["direct-requests"]


def test_a_deleted_write_acl_stops_a_producer_holding_a_grant(cluster):
    log = cluster.log("orders", 0)
    with Producer(cluster.address, linger_ms=1, **cluster.client_ssl_config("alice")) as producer:
        assert producer.send("orders", b"granted").get(timeout=30).offset == 0
        assert _direct(producer) == 1  # under a grant, straight to the leader
        # An ACL that narrows nothing: the grant held is still taken.
        with cluster.admin_as("admin") as admin:
            admin.create_acls([acl("bob", "Read", "orders")])
        _node_heard_of_the_acls(cluster)
        assert producer.send("orders", b"still").get(timeout=30).offset == 1
        assert _direct(producer) == 2
        with cluster.admin_as("admin") as admin:
            admin.delete_acls([acl("alice", "Write", "orders")])
        _node_heard_of_the_acls(cluster)
        assert cluster.nodes[1].applier.acl_narrowings.offset > 0
        with pytest.raises(PermissionDeniedError, match="User:alice may not Write"):
            producer.send("orders", b"revoked").get(timeout=30)
        assert _direct(producer) == 2
    assert log.log_end_offset == 2


def test_a_narrowing_for_someone_else_costs_a_producer_one_detour_not_its_grants(cluster):
    """Every client's grant from before an ACL change that may narrow access is refused, so
    alice's is when bob loses an ACL; she is still allowed: her request goes through the
    gateway, and her producer asks for a new grant and goes straight to the leader again."""
    with cluster.admin_as("admin") as admin:
        admin.create_acls([acl("bob", "Write", "orders")])
    with Producer(cluster.address, linger_ms=1, **cluster.client_ssl_config("alice")) as producer:
        assert producer.send("orders", b"granted").get(timeout=30).offset == 0
        assert _direct(producer) == 1
        with cluster.admin_as("admin") as admin:
            admin.delete_acls([acl("bob", "Write", "orders")])
        _node_heard_of_the_acls(cluster)
        assert producer.send("orders", b"through the gateway").get(timeout=30).offset == 1
        assert _direct(producer) == 1
        sent = [b"x"]

        def direct_again() -> bool:
            producer.send("orders", sent[-1]).get(timeout=30)
            sent.append(b"x")
            return _direct(producer) > 1

        assert wait_until(direct_again, DEADLINE_S)  # a new grant, a second later
    assert cluster.log("orders", 0).log_end_offset == 1 + len(sent)


def test_a_deny_added_stops_a_producer_holding_a_grant(cluster):
    with Producer(cluster.address, linger_ms=1, **cluster.client_ssl_config("alice")) as producer:
        assert producer.send("orders", b"granted").get(timeout=30).offset == 0
        with cluster.admin_as("admin") as admin:
            admin.create_acls([acl("alice", "Write", "orders", permission="deny")])
        _node_heard_of_the_acls(cluster)
        with pytest.raises(PermissionDeniedError, match="User:alice may not Write"):
            producer.send("orders", b"denied").get(timeout=30)
    assert cluster.log("orders", 0).log_end_offset == 1


def test_a_deleted_read_acl_stops_a_consumer_holding_a_grant(cluster, monkeypatch):
    clients_grants = _clients_grants_checked(cluster, monkeypatch)
    with Producer(cluster.address, linger_ms=1, **cluster.client_ssl_config("alice")) as producer:
        producer.send("orders", b"first").get(timeout=30)
        consumer = Consumer(
            cluster.address, auto_offset_reset="earliest", **cluster.client_ssl_config("alice")
        )
        try:
            consumer.assign([TopicPartition("orders", 0)])
            first = _read(consumer, 1)
            assert [r.value for r in first] == [b"first"]
            # Read under a fetch grant of its own (beside the producer's grant).
            assert any(grant.partitions for grant in clients_grants)
            with cluster.admin_as("admin") as admin:
                admin.delete_acls([acl("alice", "Read", "orders")])
            _node_heard_of_the_acls(cluster)
            # Written by the admin. A long poll the node took before it heard of the change
            # may still answer with it (as a fetch Kafka's broker authorized and holds in
            # purgatory does); the consumer's next fetch is refused.
            with Producer(
                cluster.address, linger_ms=1, **cluster.client_ssl_config("admin")
            ) as admin_producer:
                for value in (b"second", b"third"):
                    admin_producer.send("orders", value).get(timeout=30)
            read_after = []

            def denied() -> bool:
                try:
                    read_after.extend(r.value for r in consumer.poll_records(timeout_ms=200))
                except SeglogError as exc:
                    assert "User:alice may not Read" in str(exc), exc
                    return True
                return False

            assert wait_until(denied, DEADLINE_S), read_after
            assert read_after in ([], [b"second"], [b"second", b"third"])
        finally:
            consumer.close()


def _clients_grants_checked(cluster, monkeypatch) -> list:
    """The clients' grants the node checks from now on."""
    narrowings = cluster.nodes[1].applier.acl_narrowings
    check = narrowings.check
    checked = []

    def noting(grant):
        if grant.for_client:
            checked.append(grant)
        return check(grant)

    monkeypatch.setattr(narrowings, "check", noting)
    return checked


def _read(consumer, count: int):
    got = []

    def enough() -> bool:
        got.extend(consumer.poll_records(timeout_ms=200))
        return len(got) >= count

    assert wait_until(enough, DEADLINE_S)
    return got


def test_a_narrowing_is_pushed_to_the_nodes_not_left_for_their_heartbeats(tmp_path, monkeypatch):
    """The node's heartbeats stop once it is registered (its session lasts half an hour):
    only the controller's push can tell it."""
    cluster = _secured_cluster(tmp_path, session_timeout_ms=1_800_000)
    try:
        node = cluster.nodes[1]
        assert node.session.registered.wait(DEADLINE_S)
        monkeypatch.setattr(node.session, "_beat", lambda: None)
        with cluster.admin_as("admin") as admin:
            admin.create_topic("orders", 1, 1)
            admin.create_acls(ALICE_MAY)
            assert node.applier.acl_narrowings.offset == 0
            admin.delete_acls([acl("alice", "Write", "orders")])
        narrowed = cluster.gateway.registry.acls_narrowed_offset
        assert wait_until(lambda: node.applier.acl_narrowings.offset == narrowed, DEADLINE_S)
        with (
            Producer(
                cluster.address, linger_ms=1, **cluster.client_ssl_config("alice")
            ) as producer,
            pytest.raises(PermissionDeniedError, match="User:alice may not Write"),
        ):
            producer.send("orders", b"revoked").get(timeout=30)
        assert cluster.log("orders", 0).log_end_offset == 0
    finally:
        monkeypatch.undo()  # heartbeats again: the node's controlled shutdown needs them
        cluster.close()
