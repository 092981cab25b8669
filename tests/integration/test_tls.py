"""TLS and mutual TLS with certificates made per test run by the cluster's own CA: a TLS
cluster that replicates, produces and consumes (the bulk path included); plaintext, foreign,
certificate-less and expired callers refused; a node id claimed only with its certificate;
the storage-node API closed to everyone but the gateway and nodes; certificates rotated
under running producers."""

from __future__ import annotations

import datetime
import socket
import threading

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from seglog.client.consumer import Consumer
from seglog.client.producer import Producer
from seglog.client.structs import TopicPartition
from seglog.errors import PermissionDeniedError
from seglog.rpc.status import error_from_rpc
from seglog.security.certs import CertificateAuthority, write_issued
from seglog.security.tls import ClientSecurity, channel_credentials
from seglog.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc, storage_pb2, storage_pb2_grpc
from tests.batches import make_batch
from tests.cluster import LocalCluster
from tests.waiting import wait_until


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("tls"), nodes=2, tls=True)
    yield c
    c.close()


def _ssl_settings(security: ClientSecurity) -> dict[str, str]:
    return {
        "ssl_cafile": str(security.ca),
        "ssl_certfile": str(security.cert),
        "ssl_keyfile": str(security.key),
    }


def test_a_tls_cluster_replicates_produces_and_consumes(cluster):
    cluster.admin.create_topic("secret", 1, 2)
    settings = _ssl_settings(cluster.client_security("alice"))
    with Producer(cluster.address, linger_ms=0, **settings) as producer:
        for i in range(20):
            producer.send("secret", b"v%d" % i).get(timeout=10)
    assert wait_until(
        lambda: (
            {
                r.log_end_offset
                for r in cluster.admin.describe_topic("secret").partitions[0].replica_states
            }
            == {20}
        )
    )
    with Consumer(cluster.address, auto_offset_reset="earliest", **settings) as consumer:
        consumer.assign([TopicPartition("secret", 0)])
        values = []
        assert wait_until(
            lambda: (
                values.extend(r.value for r in consumer.poll_records(timeout_ms=50))
                or len(values) >= 20
            )
        )
    assert values == [b"v%d" % i for i in range(20)]


def _describe(address, credentials=None):
    channel = (
        grpc.insecure_channel(address)
        if credentials is None
        else grpc.secure_channel(address, credentials)
    )
    with channel:
        return gateway_pb2_grpc.GatewayStub(channel).DescribeCluster(
            gateway_pb2.DescribeClusterRequest(), timeout=5
        )


def test_plaintext_foreign_certificateless_and_expired_callers_are_refused(cluster, tmp_path):
    with pytest.raises(grpc.RpcError) as plaintext:
        _describe(cluster.address)
    assert plaintext.value.code() == grpc.StatusCode.UNAVAILABLE
    ca_file = cluster.root / "tls" / "ca.pem"
    # Verifies the gateway but shows no certificate: mutual TLS says no.
    with pytest.raises(grpc.RpcError):
        _describe(cluster.address, grpc.ssl_channel_credentials(ca_file.read_bytes()))
    # A certificate from another CA.
    foreign = CertificateAuthority.create("someone else")
    issued = foreign.issue("mallory")
    with pytest.raises(grpc.RpcError):
        _describe(
            cluster.address,
            grpc.ssl_channel_credentials(ca_file.read_bytes(), issued.key_pem, issued.cert_pem),
        )
    # The cluster's CA, but expired.
    assert cluster.ca is not None
    old = cluster.ca.issue(
        "late",
        valid_days=1,
        not_before=datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=3),
    )
    with pytest.raises(grpc.RpcError):
        _describe(
            cluster.address,
            grpc.ssl_channel_credentials(ca_file.read_bytes(), old.key_pem, old.cert_pem),
        )
    # And the cluster's own client certificate works.
    good = cluster.tls_files("bob")
    assert _describe(cluster.address, channel_credentials(good)).nodes


def test_a_node_id_is_claimed_only_with_that_nodes_certificate(cluster):
    registry_before = cluster.gateway.registry.nodes[1].address
    impostor = cluster.tls_files("node-2")  # a real node's certificate, claiming id 1
    internal = cluster.gateway.internal_address
    with grpc.secure_channel(internal, channel_credentials(impostor)) as channel:
        stub = gateway_pb2_grpc.RegistryStub(channel)
        for call in (stub.RegisterNode, stub.Heartbeat):
            with pytest.raises(grpc.RpcError) as denied:
                call(gateway_pb2.NodeHeartbeat(node_id=1, address="127.0.0.1:1"), timeout=5)
            error = error_from_rpc(denied.value)
            assert isinstance(error, PermissionDeniedError) and "node-1" in str(error)
        with pytest.raises(grpc.RpcError) as altered:
            stub.AlterPartition(
                gateway_pb2.AlterPartitionRequest(node_id=1, topic="x", partition=0), timeout=5
            )
        assert isinstance(error_from_rpc(altered.value), PermissionDeniedError)
    assert cluster.gateway.registry.nodes[1].address == registry_before


def test_the_storage_node_api_serves_only_the_gateway_and_nodes(cluster):
    node = cluster.nodes[1]
    ask = storage_pb2.DescribePartitionsRequest()
    client = cluster.tls_files("carol")
    with (
        grpc.secure_channel(node.address, channel_credentials(client)) as channel,
        pytest.raises(grpc.RpcError) as denied,
    ):
        storage_pb2_grpc.StorageNodeStub(channel).DescribePartitions(ask, timeout=5)
    assert isinstance(error_from_rpc(denied.value), PermissionDeniedError)
    assert "carol" in str(error_from_rpc(denied.value))
    gateway = cluster.tls_files("gateway")
    with grpc.secure_channel(node.address, channel_credentials(gateway)) as channel:
        storage_pb2_grpc.StorageNodeStub(channel).DescribePartitions(ask, timeout=5)
    with grpc.insecure_channel(node.address) as channel, pytest.raises(grpc.RpcError):
        storage_pb2_grpc.StorageNodeStub(channel).DescribePartitions(ask, timeout=5)


def test_a_node_certificate_acts_only_as_that_node(cluster):
    """Node 2's valid certificate, calling node 1: control calls are the gateway's alone, and a
    fetch claiming to be replica 1 (which would count as node 1's progress toward the high
    watermark) is refused; node 2 fetching as itself and describing partitions pass."""
    target = cluster.nodes[1]
    impostor = cluster.tls_files(f"{cluster.node_identity_prefix}2")
    with grpc.secure_channel(target.address, channel_credentials(impostor)) as channel:
        stub = storage_pb2_grpc.StorageNodeStub(channel)
        refused = [
            lambda: stub.DeletePartition(
                storage_pb2.DeletePartitionRequest(topic="orders", partition=0), timeout=5
            ),
            lambda: stub.Append(common_pb2.ProduceRequest(), timeout=5),
            lambda: stub.UpdatePartitions(gateway_pb2.NodeAssignment(), timeout=5),
            lambda: list(stub.Fetch(common_pb2.FetchRequest(replica_id=1), timeout=5)),
            lambda: list(stub.Fetch(common_pb2.FetchRequest(), timeout=5)),  # as a consumer
        ]
        for call in refused:
            with pytest.raises(grpc.RpcError) as denied:
                call()
            assert isinstance(error_from_rpc(denied.value), PermissionDeniedError)
            assert "node-2" in str(error_from_rpc(denied.value))
        list(stub.Fetch(common_pb2.FetchRequest(replica_id=2, max_wait_ms=0), timeout=5))
        stub.DescribePartitions(storage_pb2.DescribePartitionsRequest(), timeout=5)


def _served_certificate(address: str, security: ClientSecurity) -> bytes:
    host, port = address.rsplit(":", 1)
    context = security.ssl_context()
    context.set_alpn_protocols(["h2"])
    with (
        socket.create_connection((host, int(port)), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        certificate = tls.getpeercert(binary_form=True)
    assert certificate is not None
    return certificate


def test_certificates_rotate_without_a_restart_or_a_failed_write(cluster):
    cluster.admin.create_topic("rotating", 1, 2)
    security = cluster.client_security("dave")
    assert security is not None
    before = _served_certificate(cluster.address, security)
    failures: list[BaseException] = []
    acked = []
    stop = threading.Event()

    def produce() -> None:
        with Producer(cluster.address, linger_ms=0, **_ssl_settings(security)) as producer:
            while not stop.is_set():
                try:
                    acked.append(producer.send("rotating", b"x").get(timeout=10))
                except Exception as exc:  # collected for the assertion
                    failures.append(exc)

    writer = threading.Thread(target=produce)
    writer.start()
    try:
        assert wait_until(lambda: len(acked) > 20)
        assert cluster.ca is not None
        for identity in ("gateway", "node-1", "node-2"):  # as cert-manager renews them
            write_issued(cluster.ca.issue(identity), cluster.root / "tls", identity)
        count = len(acked)
        assert wait_until(lambda: len(acked) > count + 20)
        assert wait_until(lambda: _served_certificate(cluster.address, security) != before)
    finally:
        stop.set()
        writer.join(timeout=30)
    assert not failures
    # New clients still connect and work against the renewed certificates.
    with cluster.admin_as("dave") as admin:
        assert admin.describe_topic("rotating").partitions[0].high_watermark >= len(acked)


def test_node_certificates_named_after_statefulset_pods(tmp_path):
    """Kubernetes' per-pod issuers name a node's certificate after its pod
    (`seglog-node-<ordinal>`): with that prefix the cluster replicates over mutual TLS, the
    node id is still claimed only with its own certificate, and the old form proves nothing."""
    cluster = LocalCluster(tmp_path, nodes=2, tls=True, node_identity_prefix="seglog-node-")
    try:
        cluster.admin.create_topic("pods", 1, 2)
        [result] = cluster.client.produce("pods", {0: make_batch([b"v"])}, acks=-1)
        assert not result.error  # both replicas, over the nodes' mutual TLS
        for identity in ("seglog-node-2", "node-1"):
            creds = channel_credentials(cluster.tls_files(identity))
            with grpc.secure_channel(cluster.gateway.internal_address, creds) as channel:
                stub = gateway_pb2_grpc.RegistryStub(channel)
                with pytest.raises(grpc.RpcError) as denied:
                    stub.Heartbeat(gateway_pb2.NodeHeartbeat(node_id=1, address="x:1"), timeout=5)
                assert "seglog-node-1" in str(error_from_rpc(denied.value))
        # The storage-node API takes the pod-named certificate of a peer, not the old form.
        ask = storage_pb2.DescribePartitionsRequest()
        for identity, allowed in (("seglog-node-2", True), ("node-2", False)):
            creds = channel_credentials(cluster.tls_files(identity))
            with grpc.secure_channel(cluster.nodes[1].address, creds) as channel:
                stub = storage_pb2_grpc.StorageNodeStub(channel)
                if allowed:
                    stub.DescribePartitions(ask, timeout=5)
                else:
                    with pytest.raises(grpc.RpcError):
                        stub.DescribePartitions(ask, timeout=5)
    finally:
        cluster.close()


def test_probes_reach_health_on_a_plaintext_port_and_nothing_else(tmp_path):
    """Kubernetes' gRPC probes speak no TLS: --health-listen serves the health service alone,
    in plaintext, answering what the service's own health says."""
    cluster = LocalCluster(tmp_path, nodes=1, tls=True, health_listen="127.0.0.1:0")
    try:
        port = cluster.gateway.health_port
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            answer = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
            with pytest.raises(grpc.RpcError) as refused:  # no other service there
                gateway_pb2_grpc.GatewayStub(channel).DescribeCluster(
                    gateway_pb2.DescribeClusterRequest(), timeout=5
                )
            assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED
    finally:
        cluster.close()
