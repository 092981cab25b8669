"""Kafka-style authorization at the gateway, on a mutual-TLS cluster whose principals are the
callers' certificates: every call checked per resource before any work, PERMISSION_DENIED
naming principal, operation and resource with nothing written, ACLs managed through the
Admin client and kept across a gateway restart."""

from __future__ import annotations

import time

import grpc
import pytest

from seglog.client.admin import Admin
from seglog.client.consumer import Consumer
from seglog.client.gateway import FetchPosition, GatewayClient
from seglog.client.structs import TopicPartition
from seglog.errors import PermissionDeniedError
from seglog.rpc.status import error_from_rpc
from seglog.security.acls import AclBinding
from seglog.v1 import groups_pb2
from tests.batches import make_batch
from tests.cluster import LocalCluster
from tests.waiting import wait_until


@pytest.fixture
def cluster(tmp_path):
    c = LocalCluster(
        tmp_path, nodes=1, tls=True, authorizer=True, super_users=("User:admin", "User:client")
    )
    yield c
    c.close()


def _as(cluster, name) -> GatewayClient:
    return GatewayClient(cluster.address, security=cluster.client_security(name))


def _admin(cluster, name="admin") -> Admin:
    return cluster.admin_as(name)


def acl(principal, operation, name, *, kind="topic", pattern="literal", permission="allow"):
    return AclBinding(f"User:{principal}", "*", kind, pattern, name, operation, permission)


def test_calls_are_checked_per_resource_and_denials_write_nothing(cluster):
    with _admin(cluster) as admin:
        admin.create_topic("orders", 1, 1)
        admin.create_topic("payments", 1, 1)
    log = cluster.log("orders", 0)
    with _as(cluster, "alice") as alice:
        with pytest.raises(PermissionDeniedError, match="User:alice may not Write topic 'orders'"):
            alice.produce("orders", {0: make_batch([b"no"])})
        assert log.log_end_offset == 0
        assert cluster.gateway.authorization.denied >= 1
        with _admin(cluster) as admin:
            admin.create_acls(
                [acl("alice", "Write", "orders"), acl("alice", "Read", "pay", pattern="prefixed")]
            )
        assert alice.produce("orders", {0: make_batch([b"yes"])})[0].error == 0
        assert [t.name for t in alice.list_topics()] == ["orders", "payments"]  # Describe implied
        assert list(alice.fetch([FetchPosition("payments", 0, 0)], max_wait_ms=0))
        with pytest.raises(PermissionDeniedError, match="Read topic 'orders'"):
            list(alice.fetch([FetchPosition("orders", 0, 0)], max_wait_ms=0))
        with _admin(cluster, "alice") as alice_admin:
            with pytest.raises(PermissionDeniedError, match="Create topic 'new'"):
                alice_admin.create_topic("new", 1, 1)
            with pytest.raises(PermissionDeniedError, match="Delete topic 'orders'"):
                alice_admin.delete_topic("orders")
            with pytest.raises(PermissionDeniedError, match="Delete topic 'orders'"):
                alice_admin.delete_records({TopicPartition("orders", 0): -1})
            assert log.log_start_offset == 0
        # Deny wins over allow.
        with _admin(cluster) as admin:
            admin.create_acls([acl("alice", "Write", "ord", pattern="prefixed", permission="deny")])
        with pytest.raises(PermissionDeniedError):
            alice.produce("orders", {0: make_batch([b"denied"])})
    assert log.log_end_offset == 1
    with _as(cluster, "bob") as bob:
        assert bob.list_topics() == []  # sees only what it may describe
    with (
        _admin(cluster, "bob") as bob_admin,
        pytest.raises(PermissionDeniedError, match="Alter cluster"),
    ):
        bob_admin.create_acls([])


def test_acls_are_managed_through_the_admin_client_and_survive_a_restart(cluster):
    bindings = [
        acl("carol", "Read", "billing", kind="group"),
        acl("carol", "Read", "logs-", pattern="prefixed"),
    ]
    with _admin(cluster) as admin:
        admin.create_acls(bindings)
        assert set(admin.describe_acls(principal="User:carol")) == set(bindings)
    cluster.restart_gateway()
    assert wait_until(lambda: cluster.gateway.registry.live_nodes() == [1])
    with _admin(cluster) as admin:
        assert set(admin.describe_acls(principal="User:carol")) == set(bindings)
        assert admin.delete_acls(bindings[:1]) == 1
        assert admin.describe_acls(principal="User:carol") == bindings[1:]


def test_the_acls_command_adds_lists_and_removes(cluster, capsys, monkeypatch):
    from tests.cluster import cli_in_process

    security = cluster.client_security("admin")
    monkeypatch.setenv("SEGLOG_TLS_CA", str(security.ca))
    monkeypatch.setenv("SEGLOG_TLS_CERT", str(security.cert))
    monkeypatch.setenv("SEGLOG_TLS_KEY", str(security.key))
    base = ("acls",)
    code, out, err = cli_in_process(
        cluster,
        capsys,
        monkeypatch,
        *base,
        "add",
        "--allow-principal",
        "User:dan",
        "--operation",
        "Read",
        "--operation",
        "Describe",
        "--topic",
        "audit",
        "--resource-pattern-type",
        "prefixed",
    )
    assert code == 0 and "Added 2 ACLs" in out, err
    code, out, _ = cli_in_process(
        cluster, capsys, monkeypatch, *base, "list", "--principal", "User:dan"
    )
    assert code == 0 and out.count("ALLOW\tUser:dan") == 2 and "topic:prefixed:audit" in out
    code, out, _ = cli_in_process(
        cluster,
        capsys,
        monkeypatch,
        *base,
        "remove",
        "--allow-principal",
        "User:dan",
        "--operation",
        "Read",
        "--topic",
        "audit",
        "--resource-pattern-type",
        "prefixed",
    )
    assert code == 0 and "Removed 1 ACLs" in out
    code, _, err = cli_in_process(
        cluster,
        capsys,
        monkeypatch,
        *base,
        "add",
        "--allow-principal",
        "dan",
        "--operation",
        "Read",
        "--topic",
        "x",
    )
    assert code == 1 and "User:<name>" in err


def test_principal_mapping_rules_name_certificate_holders(tmp_path):
    cluster = LocalCluster(
        tmp_path,
        nodes=1,
        tls=True,
        authorizer=True,
        super_users=("User:admin", "User:client"),
        ssl_principal_mapping_rules=r"RULE:^CN=admin$/admin/,RULE:^CN=client$/client/,"
        r"RULE:^CN=(.*)$/team-$1/L",
    )
    try:
        with _admin(cluster) as admin:
            admin.create_topic("mapped", 1, 1)
            admin.create_acls([acl("team-erin", "Write", "mapped")])
        with _as(cluster, "Erin") as erin:
            assert erin.produce("mapped", {0: make_batch([b"ok"])})[0].error == 0
        with (
            _as(cluster, "frank") as frank,
            pytest.raises(PermissionDeniedError, match="team-frank"),
        ):
            frank.produce("mapped", {0: make_batch([b"no"])})
    finally:
        cluster.close()


def test_a_group_commits_under_the_authorizer_and_joins_only_topics_it_may_describe(cluster):
    """A member with Read on its group and topic commits and reads its commits back, and a
    JoinGroup naming a topic the member may not Describe is refused before the coordinator
    could assign that topic's partitions."""
    with _admin(cluster) as admin:
        admin.create_topic("orders", 1, 1)
        admin.create_topic("secret", 1, 1)
        admin.create_acls(
            [acl("carol", "Read", "orders"), acl("carol", "Read", "audit", kind="group")]
        )
    with _as(cluster, "client") as producer:
        assert producer.produce("orders", {0: make_batch([b"a", b"b"])})[0].error == 0
    consumer = Consumer(
        cluster.address,
        group_id="audit",
        auto_offset_reset="earliest",
        **cluster.client_ssl_config("carol"),
    )
    try:
        consumer.subscribe(["orders"])
        read: list[bytes] = []
        assert wait_until(
            lambda: (
                read.extend(r.value for r in consumer.poll_records(timeout_ms=200))
                or len(read) == 2
            ),
            timeout_s=30,
        ), f"carol read {read} as a group member"
        consumer.commit()
        orders = TopicPartition("orders", 0)
        committed = consumer.committed(orders)[orders]
        assert committed is not None and committed.offset == 2
    finally:
        consumer.close()
    with _as(cluster, "carol") as carol:
        join = groups_pb2.JoinGroupRequest(
            group_id="audit",
            client_id="carol",
            topics=["secret"],
            session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
            assignment_strategies=["range"],
        )
        with pytest.raises(grpc.RpcError) as refused:
            carol.group_coordinators.call("audit", "JoinGroup", join, timeout=10)
        denial = error_from_rpc(refused.value)
        assert isinstance(denial, PermissionDeniedError)
        assert "Describe topic 'secret'" in str(denial)


def test_moving_partitions_needs_alter_on_the_cluster_and_listing_describe(cluster):
    with _admin(cluster) as admin:
        admin.create_topic("moved", 1, 1)
    tp = TopicPartition("moved", 0)
    with cluster.admin_as("alice") as alice:
        with pytest.raises(PermissionDeniedError, match="Alter cluster"):
            alice.alter_partition_reassignments({tp: [1]})
        with pytest.raises(PermissionDeniedError, match="Alter cluster"):
            alice.elect_leaders("preferred", [tp])
        with pytest.raises(PermissionDeniedError, match="Describe cluster"):
            alice.list_partition_reassignments()
        with pytest.raises(PermissionDeniedError, match="Describe cluster"):
            alice.describe_log_dirs()
        with _admin(cluster) as admin:
            admin.create_acls(
                [
                    acl("alice", "Alter", "kafka-cluster", kind="cluster"),
                    acl("alice", "Describe", "kafka-cluster", kind="cluster"),
                ]
            )
        assert wait_until(lambda: _may_list(alice))
        alice.alter_partition_reassignments({tp: [1]})  # already so: nothing to move
        assert [*alice.describe_log_dirs()] == [1]


def _may_list(admin) -> bool:
    try:
        return admin.list_partition_reassignments() == {}
    except PermissionDeniedError:
        return False


def test_client_quotas_need_alter_configs_on_the_cluster_and_describing_describe_configs(
    cluster,
):
    with cluster.admin_as("alice") as alice:
        with pytest.raises(PermissionDeniedError, match="AlterConfigs cluster"):
            alice.alter_client_quotas({"user": "alice"}, {"producer_byte_rate": 1e9})
        with pytest.raises(PermissionDeniedError, match="DescribeConfigs cluster"):
            alice.describe_client_quotas()
        with _admin(cluster) as admin:
            assert admin.describe_client_quotas() == []  # nothing of the refusal
            admin.create_acls([acl("alice", "AlterConfigs", "kafka-cluster", kind="cluster")])
        # AlterConfigs implies DescribeConfigs, as in Kafka.
        assert wait_until(lambda: _may_describe_quotas(alice))
        alice.alter_client_quotas({"user": "bob"}, {"consumer_byte_rate": 1e6})
        assert alice.describe_client_quotas() == [({"user": "bob"}, {"consumer_byte_rate": 1e6})]


def _may_describe_quotas(admin) -> bool:
    try:
        admin.describe_client_quotas()
        return True
    except PermissionDeniedError:
        return False


def test_a_consumer_without_read_is_told_so_by_its_poll(cluster):
    """Kafka's consumer raises TopicAuthorizationException from poll; it does not wait the
    denial out as an outage."""
    with _admin(cluster) as admin:
        admin.create_topic("guarded", 1, 1)
        admin.create_acls([acl("bob", "Describe", "guarded")])  # its offsets, not its records
    consumer = Consumer(
        cluster.address, auto_offset_reset="earliest", **cluster.client_ssl_config("bob")
    )
    try:
        consumer.assign([TopicPartition("guarded", 0)])
        deadline = time.monotonic() + 20
        with pytest.raises(PermissionDeniedError, match="User:bob may not Read"):
            while time.monotonic() < deadline:
                assert consumer.poll_records(timeout_ms=200) == []
    finally:
        consumer.close()
