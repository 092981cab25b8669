"""A producer sending straight to its leaders' bulk listeners under produce grants
(Gateway.ProduceGrants, bulk.md version 3), on real clusters: its records go there, none
through the gateway's Produce, and read back as sent; what a grant does not cover (acks=0, a
topic the gateway refuses, a node whose listener is gone) goes through the gateway and
lands once; the gateway grants no internal, unknown or quota-metered topic, and no topic
without Write on it; a node takes a client's grant only for the topics it names."""

from __future__ import annotations

import dataclasses
import socket
import threading

import grpc
import pytest

from seglog.client.admin import Admin
from seglog.client.producer import Producer
from seglog.errors import PermissionDeniedError, ServerBusyError
from seglog.rpc import grants, wire
from seglog.security.acls import CLUSTER_NAME, AclBinding
from seglog.v1 import bulk_pb2, common_pb2, gateway_pb2_grpc
from services.gateway.routing import relayed_calls as produce_grants_module
from tests.batches import make_batch
from tests.bulk_produce import (
    RelayedProduces,
    closed_by_node,
    consumed_values,
    exchange,
    produce_header,
)
from tests.cluster import CLUSTER_SECRET, LocalCluster


class GatewayProduces:
    """Counts the Produce calls the gateway serves."""

    def __init__(self, cluster, monkeypatch) -> None:
        self.count = 0
        self._lock = threading.Lock()
        # Every gateway Produce goes through its routing's produce_all, one request each.
        producing = cluster.gateway.service.producing
        original = producing.produce_all

        def counting(raws, *args, **kwargs):
            with self._lock:
                self.count += len(raws)
            return original(raws, *args, **kwargs)

        monkeypatch.setattr(producing, "produce_all", counting)


def _direct(producer) -> float:
    """Requests the producer's leaders answered straight, not through the gateway."""
    return producer.metrics()["producer-metrics"]["direct-requests"]


def _grant_at(cluster, topic, node):
    """The gateway's produce grant for `topic` at `node`."""
    response = cluster.stub.ProduceGrants(bulk_pb2.ProduceGrantsRequest(topics=[topic]), timeout=10)
    [grant] = [g for g in response.grants if g.node_id == node.config.node_id]
    return grant


@pytest.fixture
def cluster(tmp_path):
    c = LocalCluster(tmp_path, nodes=3)
    yield c
    c.close()


def _send_all(producer, topic, values, partitions):
    futures = [producer.send(topic, v, partition=i % partitions) for i, v in enumerate(values)]
    producer.flush()
    return [f.get(timeout=30) for f in futures]


def test_a_producer_writes_to_its_leaders_not_through_the_gateway(cluster, monkeypatch):
    cluster.admin.create_topic("direct", 3, 3)
    leaders = {cluster.leader_of("direct", p).config.node_id for p in range(3)}
    assert len(leaders) == 3
    through_gateway = GatewayProduces(cluster, monkeypatch)
    at_nodes = {n: RelayedProduces(node, monkeypatch) for n, node in cluster.nodes.items()}
    values = [b"d%d" % i for i in range(300)]
    for acks in (1, -1):
        with Producer(cluster.address, acks=acks, linger_ms=1) as producer:
            sent = _send_all(producer, "direct", values[:150], 3)
            assert _direct(producer) > 0
            # A connection to each leader is idle now: the sender thread carries the next
            # requests itself (rpc/produce_selector.py), handing them to no thread.
            carried = producer._transport.selector.started
            sent += _send_all(producer, "direct", values[150:], 3)
            assert producer._transport.selector.started > carried
        assert all(m.offset >= 0 for m in sent)
    assert through_gateway.count == 0
    assert all(spy.count > 0 for spy in at_nodes.values())  # every leader took some
    assert sorted(consumed_values(cluster, "direct", range(3))) == sorted(values * 2)
    # acks=0 waits for no answer: it goes through the gateway's Produce, which answers at once.
    with Producer(cluster.address, acks=0, linger_ms=1) as producer:
        _send_all(producer, "direct", [b"zero"], 1)
        assert _direct(producer) == 0
    assert through_gateway.count == 1


def test_produce_transport_grpc_and_a_gone_listener_go_through_the_gateway(cluster, monkeypatch):
    cluster.admin.create_topic("fallback", 1, 3)
    through_gateway = GatewayProduces(cluster, monkeypatch)
    with Producer(cluster.address, linger_ms=1, produce_transport="grpc") as producer:
        _send_all(producer, "fallback", [b"g0", b"g1"], 1)
        assert _direct(producer) == 0
    assert through_gateway.count >= 1
    # The leader's bulk listener stops: nothing was sent there, so the request goes through
    # the gateway, and is written once.
    cluster.leader_of("fallback", 0).bulk.stop()
    before = through_gateway.count
    with Producer(cluster.address, linger_ms=1) as producer:
        _send_all(producer, "fallback", [b"s0", b"s1", b"s2"], 1)
        assert _direct(producer) == 0
    assert through_gateway.count > before
    assert consumed_values(cluster, "fallback", [0]) == [b"g0", b"g1", b"s0", b"s1", b"s2"]


def test_the_gateway_grants_only_existing_topics_that_are_not_internal(cluster):
    cluster.admin.create_topic("granted", 2, 3)
    response = cluster.stub.ProduceGrants(
        bulk_pb2.ProduceGrantsRequest(topics=["granted", "missing", "__consumer_offsets"]),
        timeout=10,
    )
    refused = {e.topic: common_pb2.ErrorCode.Name(e.error) for e in response.errors}
    assert refused == {
        "missing": "UNKNOWN_TOPIC_OR_PARTITION",
        "__consumer_offsets": "INVALID_TOPIC",
    }
    # One grant per node, each naming only the topic granted, for that node alone.
    assert sorted(g.node_id for g in response.grants) == sorted(cluster.nodes)
    for g in response.grants:
        assert g.bulk_address == cluster.nodes[g.node_id].bulk.address
        verified = grants.verify(CLUSTER_SECRET, g.grant, g.signature, g.node_id)
        assert verified.produce_topics == {"granted"} and not verified.produce_relay
        assert not verified.partitions
        with pytest.raises(Exception, match="issued for node"):
            grants.verify(CLUSTER_SECRET, g.grant, g.signature, g.node_id % 3 + 1)


def test_a_gateway_without_a_cluster_secret_grants_nothing_and_produce_still_works(
    tmp_path, monkeypatch
):
    cluster = LocalCluster(tmp_path, nodes=1, cluster_secret=None)
    try:
        cluster.admin.create_topic("plain", 1, 1)
        response = cluster.stub.ProduceGrants(
            bulk_pb2.ProduceGrantsRequest(topics=["plain"]), timeout=10
        )
        assert not response.grants and "no cluster secret" in response.errors[0].error_message
        through_gateway = GatewayProduces(cluster, monkeypatch)
        with Producer(cluster.address, linger_ms=1) as producer:
            _send_all(producer, "plain", [b"p"], 1)
            assert _direct(producer) == 0
        assert through_gateway.count == 1
    finally:
        cluster.close()


def test_a_node_takes_a_client_grant_for_the_topics_it_names_only(cluster):
    cluster.admin.create_topic("mine", 1, 1)
    cluster.admin.create_topic("theirs", 3, 1)  # one partition on each node
    leader = cluster.leader_of("mine", 0)
    [same] = [p for p in range(3) if cluster.leader_of("theirs", p) is leader]
    grant = _grant_at(cluster, "mine", leader)
    host, port = leader.bulk.address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        theirs = wire.encode_produce_request("theirs", 1, 5000, [(same, -1, [make_batch([b"no"])])])
        answer = exchange(sock, produce_header(theirs, grant.grant, grant.signature), theirs)
        assert not answer.end
        assert common_pb2.ErrorCode.Name(answer.error) == "PERMISSION_DENIED"
        assert "not 'theirs'" in answer.error_message
        assert cluster.log("theirs", same).log_end_offset == 0
        # The connection stays, and the granted topic is written.
        mine = wire.encode_produce_request("mine", 1, 5000, [(0, -1, [make_batch([b"yes"])])])
        answer = exchange(sock, produce_header(mine, grant.grant, grant.signature), mine)
        assert answer.error == common_pb2.NONE
        [result] = common_pb2.ProduceResponse.FromString(answer.response).partitions
        assert result.error == 0 and result.base_offset == 0
    # A grant with its topics changed no longer verifies; a consumer's fetch grant is no
    # produce grant.
    forged = bulk_pb2.TransferGrant.FromString(grant.grant)
    forged.produce_topics.append("theirs")
    [fetch_grant] = cluster.stub.FetchGrants(
        bulk_pb2.FetchGrantsRequest(
            partitions=[common_pb2.FetchPartition(topic="theirs", partition=same)]
        ),
        timeout=10,
    ).grants
    for forged_grant, signature, reason in (
        (forged.SerializeToString(), grant.signature, "does not verify"),
        (fetch_grant.grant, fetch_grant.signature, "nor a produce grant"),
    ):
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            answer = exchange(sock, produce_header(theirs, forged_grant, signature), theirs)
            assert answer.end and reason in answer.error_message
            assert closed_by_node(sock)
    assert cluster.log("theirs", same).log_end_offset == 0
    assert cluster.log("mine", 0).log_end_offset == 1


def test_write_is_checked_when_the_grant_is_asked_for(tmp_path):
    cluster = LocalCluster(
        tmp_path, nodes=1, tls=True, authorizer=True, super_users=("User:admin",)
    )
    try:
        with cluster.admin_as("admin") as admin:
            admin.create_topic("orders", 1, 1)
            admin.create_acls(
                [
                    AclBinding("User:alice", "*", "topic", "literal", "orders", "Write", "allow"),
                    AclBinding(
                        "User:alice",
                        "*",
                        "cluster",
                        "literal",
                        CLUSTER_NAME,
                        "IdempotentWrite",
                        "allow",
                    ),
                    AclBinding("User:bob", "*", "topic", "literal", "orders", "Describe", "allow"),
                ]
            )
        security = cluster.client_security("bob")
        channel = grpc.secure_channel(cluster.address, security.channel_credentials())
        with channel:
            bob = gateway_pb2_grpc.GatewayStub(channel)
            with pytest.raises(grpc.RpcError) as denied:
                bob.ProduceGrants(bulk_pb2.ProduceGrantsRequest(topics=["orders"]), timeout=10)
            assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
        # bob's producer gets no grant, goes through Produce, and is told why.
        with (
            Producer(
                cluster.address,
                linger_ms=1,
                retries=0,
                enable_idempotence=False,
                **cluster.client_ssl_config("bob"),
            ) as producer,
            pytest.raises(PermissionDeniedError, match="User:bob may not Write"),
        ):
            producer.send("orders", b"no").get(timeout=30)
        # alice's is granted and writes to the leader over TLS, with her certificate.
        with Producer(
            cluster.address, linger_ms=1, **cluster.client_ssl_config("alice")
        ) as producer:
            assert producer.send("orders", b"yes").get(timeout=30).offset == 0
            assert _direct(producer) == 1
        assert cluster.log("orders", 0).log_end_offset == 1
    finally:
        cluster.close()


def test_a_caller_with_a_producer_quota_gets_no_grant(cluster, monkeypatch):
    cluster.admin.create_topic("metered", 1, 3)
    with Admin(cluster.address) as admin:
        admin.alter_client_quotas({"client-id": "metered-app"}, {"producer_byte_rate": 1e9})
    through_gateway = GatewayProduces(cluster, monkeypatch)
    with Producer(cluster.address, client_id="metered-app", linger_ms=1) as producer:
        _send_all(producer, "metered", [b"m"], 1)
        assert _direct(producer) == 0
    assert through_gateway.count == 1
    with Producer(cluster.address, client_id="free-app", linger_ms=1) as producer:
        _send_all(producer, "metered", [b"f"], 1)
        assert _direct(producer) == 1
    assert through_gateway.count == 1


def test_a_gateway_that_cannot_renew_the_grants_stops_no_produce_they_cover(cluster, monkeypatch):
    cluster.admin.create_topic("renewing", 1, 3)
    asked = []

    class BusyGateway:
        """In place of the gateway's quotas, whose check ProduceGrants makes first: the call
        is answered SERVER_BUSY (retriable, as a restarting gateway's UNAVAILABLE is)."""

        def metered_of(self, key, user, client_id):
            asked.append(key)
            raise ServerBusyError("the gateway is busy")

    service = cluster.gateway.service
    with Producer(cluster.address, linger_ms=1) as producer:
        _send_all(producer, "renewing", [b"before"], 1)
        assert _direct(producer) == 1
        transport = producer._transport
        held = transport._grants["renewing"]
        # Renewal is due, and the gateway cannot answer: the grant held still serves.
        with monkeypatch.context() as patched:
            patched.setattr(service, "quotas", BusyGateway())
            transport._grants["renewing"] = dataclasses.replace(held, ask_again_at_ms=0)
            _send_all(producer, "renewing", [b"during"], 1)
        assert asked == ["producer_byte_rate"] and _direct(producer) == 2
        # Refused outright (no Write any more, say): no grant, through the gateway.
        with monkeypatch.context() as patched:
            patched.setattr(
                produce_grants_module,
                "produce_grants",
                lambda *a: bulk_pb2.ProduceGrantsResponse(
                    errors=[bulk_pb2.GrantError(topic="renewing", partition=-1, error=1)]
                ),
            )
            transport._grants["renewing"] = dataclasses.replace(held, ask_again_at_ms=0)
            _send_all(producer, "renewing", [b"after"], 1)
        assert _direct(producer) == 2
    assert sorted(consumed_values(cluster, "renewing", [0])) == [b"after", b"before", b"during"]


def test_a_node_out_of_request_memory_refuses_unread_and_the_records_go_through_the_gateway(
    cluster, monkeypatch
):
    cluster.admin.create_topic("full", 1, 3)
    leader = cluster.leader_of("full", 0)
    memory = leader.bulk.produce.request_memory
    monkeypatch.setattr(memory, "limit_bytes", 1000)
    monkeypatch.setattr(memory, "wait_s", 0.05)
    memory.acquire(1000)  # other requests' bytes, in flight
    through_gateway = GatewayProduces(cluster, monkeypatch)
    try:
        grant = _grant_at(cluster, "full", leader)
        host, port = leader.bulk.address.rsplit(":", 1)
        request = wire.encode_produce_request("full", 1, 5000, [(0, -1, [make_batch([b"no"])])])
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            answer = exchange(sock, produce_header(request, grant.grant, grant.signature), request)
            assert answer.end and "queued.max.request.bytes" in answer.error_message
            assert closed_by_node(sock)
        assert cluster.log("full", 0).log_end_offset == 0
        # A producer's request meets the same refusal, unread, and goes through the gateway
        # (whose relay the node refuses too: it goes over gRPC), written once.
        with Producer(cluster.address, linger_ms=1) as producer:
            _send_all(producer, "full", [b"m0"], 1)
            assert _direct(producer) == 0
        assert through_gateway.count == 1
    finally:
        memory.release(1000)
    assert memory.used_bytes == 0
    with Producer(cluster.address, linger_ms=1) as producer:
        _send_all(producer, "full", [b"m1"], 1)
        assert _direct(producer) == 1
    assert memory.used_bytes == 0  # given back once answered
    assert consumed_values(cluster, "full", [0]) == [b"m0", b"m1"]


def test_a_refusal_met_over_a_kept_connection_sends_the_records_through_the_gateway(
    cluster, monkeypatch
):
    """The same refusal when the request rides a connection kept from an earlier one, which
    the sender thread carries itself (rpc/produce_selector.py): nothing written by the
    refusal, the records through the gateway, written once."""
    cluster.admin.create_topic("refused-later", 1, 3)
    memory = cluster.leader_of("refused-later", 0).bulk.produce.request_memory
    through_gateway = GatewayProduces(cluster, monkeypatch)
    with Producer(cluster.address, linger_ms=1) as producer:
        _send_all(producer, "refused-later", [b"r0"], 1)
        assert _direct(producer) == 1 and through_gateway.count == 0
        carried = producer._transport.selector.started
        monkeypatch.setattr(memory, "limit_bytes", 1000)
        monkeypatch.setattr(memory, "wait_s", 0.05)
        memory.acquire(1000)  # other requests' bytes, in flight
        try:
            _send_all(producer, "refused-later", [b"r1"], 1)
        finally:
            memory.release(1000)
        assert producer._transport.selector.started == carried + 1  # over the kept connection
        assert _direct(producer) == 1 and through_gateway.count == 1
    assert consumed_values(cluster, "refused-later", [0]) == [b"r0", b"r1"]
