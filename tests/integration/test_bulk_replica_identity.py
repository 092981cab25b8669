"""On a TLS cluster the bulk port takes a replica fetch only from the node it names: every
node holds the cluster secret and can sign a grant naming any replica, so the connection's
certificate decides (before: node 2's certificate and the secret fetched from the leader as
replica 3, or as the other follower, and were served)."""

from __future__ import annotations

import pytest

from seglog.rpc import grants
from seglog.rpc.bulk_client import BulkConnection, BulkFetchError
from seglog.security.tls import client_ssl_context
from seglog.v1 import common_pb2
from tests.batches import make_batch
from tests.cluster import CLUSTER_SECRET, LocalCluster

TOPIC = "replicated"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("bulk-identity"), nodes=3, tls=True)
    yield c
    c.close()


def _replica_fetch(cluster, leader_id: int, identity: str | None, replica_id: int) -> list:
    """A replica fetch of TOPIC-0 from the leader's bulk port, over TLS with `identity`'s
    certificate (None: no certificate), under a grant signed with the cluster secret."""
    files = cluster.tls_files(identity) if identity else None
    context = client_ssl_context(files, cluster.root / "tls" / "ca.pem")
    grant, signature, _ = grants.issue(
        CLUSTER_SECRET, leader_id, [(TOPIC, 0, 0, -1)], replica_id=replica_id
    )
    request = common_pb2.FetchRequest(replica_id=replica_id, max_bytes=1 << 20, max_wait_ms=0)
    request.partitions.add(topic=TOPIC, partition=0, fetch_offset=0)
    connection = BulkConnection.open(
        cluster.nodes[leader_id].bulk_address, connect_timeout_s=5, ssl_context=context
    )
    try:
        connection.send(grant, signature, request, node_id=leader_id)
        return list(connection.receive())
    finally:
        connection.close()


def test_a_nodes_material_cannot_fetch_as_another_replica(cluster):
    cluster.admin.create_topic(TOPIC, 1, 3)
    [result] = cluster.client.produce(TOPIC, {0: make_batch([b"v"])}, acks=-1)
    assert not result.error
    leader = cluster.leader_of(TOPIC, 0).config.node_id
    attacker, impersonated = [n for n in (1, 2, 3) if n != leader]
    prefix = cluster.node_identity_prefix
    forged = [
        (f"{prefix}{attacker}", impersonated),  # another follower of the partition
        (f"{prefix}{attacker}", 7),  # a node that does not exist
        ("client", impersonated),  # a client certificate
        (None, impersonated),  # no certificate
    ]
    accepted = 0
    for identity, replica_id in forged:
        try:
            _replica_fetch(cluster, leader, identity, replica_id)
            accepted += 1
        except BulkFetchError as exc:
            assert f"as node {replica_id} needs that node's certificate" in str(exc)
    assert accepted == 0, f"{accepted} of {len(forged)} forged replica fetches were served"
    # The node itself, with its own certificate, is served.
    assert _replica_fetch(cluster, leader, f"{prefix}{attacker}", attacker)
