"""The gateway's produce relay over the nodes' bulk listeners (bulk.md, version 3) on real
clusters: produce goes there and lands as over gRPC; a node that refuses the relay or whose
listener went away gets the request over gRPC, once; the node refuses a relayed produce
under any grant but the gateway's relay grant, on a TLS cluster from any certificate but the
gateway's, and a malformed one without writing a byte."""

from __future__ import annotations

import socket

import pytest

from seglog.records import iter_records
from seglog.rpc import bulk_wire, grants, wire
from seglog.rpc.bulk_client import BulkConnection
from seglog.rpc.bulk_pool import BulkPool
from seglog.security.certs import node_identity
from seglog.security.tls import client_ssl_context
from seglog.v1 import bulk_pb2, common_pb2
from tests.batches import make_batch
from tests.bulk_produce import (
    RelayedProduces,
    closed_by_node,
    consumed_values,
    exchange,
    produce_header,
)
from tests.cluster import CLUSTER_SECRET, LocalCluster
from tests.waiting import wait_until


@pytest.fixture
def cluster(tmp_path):
    c = LocalCluster(tmp_path, nodes=2)
    yield c
    c.close()


def test_produce_goes_over_the_bulk_listener_and_reads_back_as_sent(cluster, monkeypatch):
    cluster.admin.create_topic("relayed", 2, 2)
    relayed = {n: RelayedProduces(node, monkeypatch) for n, node in cluster.nodes.items()}
    for i in range(5):
        for partition in (0, 1):
            for acks in (1, -1):
                [result] = cluster.client.produce(
                    "relayed", {partition: make_batch([b"v%d-%d" % (i, acks)])}, acks=acks
                )
                assert result.error == 0 and result.base_offset == 2 * i + (acks == -1)
    # Each request went to its leader's listener, none over the leader's gRPC.
    leaders = [cluster.leader_of("relayed", p).config.node_id for p in (0, 1)]
    for node_id, spy in relayed.items():
        assert spy.count == 10 * leaders.count(node_id)
    for partition in (0, 1):
        expected = [b"v%d-%d" % (i, acks) for i in range(5) for acks in (1, -1)]
        assert consumed_values(cluster, "relayed", [partition]) == expected
    # One request for both partitions, leaders on both nodes: split, relayed, merged in order.
    cluster.admin.create_topic("split", 2, 1)
    assert cluster.leader_of("split", 0) is not cluster.leader_of("split", 1)
    both = {p: make_batch([b"s%d" % p]) for p in (1, 0)}
    results = cluster.client.produce("split", both, acks=-1)
    assert [(r.partition, r.error, r.base_offset) for r in results] == [(1, 0, 0), (0, 0, 0)]


def test_a_node_refusing_the_relay_gets_each_request_over_grpc_once(cluster, monkeypatch):
    cluster.admin.create_topic("refused", 1, 2)
    leader = cluster.leader_of("refused", 0)
    relayed = RelayedProduces(leader, monkeypatch)
    # A node with a secret of its own refuses the gateway's grant (as would a node that
    # serves fetches only): the request goes over gRPC, and is written once.
    monkeypatch.setattr(leader.bulk.produce, "secret", b"another secret, not the cluster's")
    for i in range(3):
        [result] = cluster.client.produce("refused", {0: make_batch([b"r%d" % i])}, acks=-1)
        assert result.error == 0 and result.base_offset == i
    assert relayed.count == 1  # refused once, then left alone for a while
    log = cluster.log("refused", 0)
    assert [r.value for r in iter_records(bytes(log.read(0, 1 << 20)))] == [b"r0", b"r1", b"r2"]


def test_a_listener_gone_since_the_last_request_costs_no_request(cluster, monkeypatch):
    cluster.admin.create_topic("gone", 1, 1)
    leader = cluster.leader_of("gone", 0)
    relayed = RelayedProduces(leader, monkeypatch)
    assert cluster.client.produce("gone", {0: make_batch([b"a"])})[0].error == 0
    assert relayed.count == 1
    # The gateway's idle connection is closed under it: the next request notices before
    # sending, finds nothing listening, and goes over gRPC.
    leader.bulk.stop()
    for value in (b"b", b"c"):
        [result] = cluster.client.produce("gone", {0: make_batch([value])})
        assert result.error == 0
    assert relayed.count == 1
    assert cluster.log("gone", 0).log_end_offset == 3


def test_whole_request_refusals_read_the_same_over_the_relay_and_over_grpc(tmp_path):
    corrupt = bytearray(make_batch([b"x" * 100]))
    corrupt[-1] ^= 1  # the CRC no longer matches
    errors = {}
    for enabled in (True, False):
        cluster = LocalCluster(tmp_path / str(enabled), nodes=1, bulk_produce_relay_enable=enabled)
        try:
            cluster.admin.create_topic("bad", 1, 1)
            with pytest.raises(Exception) as refused:
                cluster.client.produce("bad", {0: bytes(corrupt)})
            errors[enabled] = (type(refused.value), getattr(refused.value, "reason", None))
            assert cluster.log("bad", 0).log_end_offset == 0
        finally:
            cluster.close()
    assert errors[True] == errors[False] and errors[True][1] == "CORRUPT_MESSAGE"


def test_the_node_takes_relayed_produce_under_the_gateways_relay_grant_only(cluster):
    cluster.admin.create_topic("guarded", 1, 1)
    leader = cluster.leader_of("guarded", 0)
    node_id = leader.config.node_id
    request = wire.encode_produce_request("guarded", 1, 5000, [(0, -1, [make_batch([b"ok"])])])
    relay_grant, relay_signature, _ = grants.issue(CLUSTER_SECRET, node_id, (), produce_relay=True)
    # A consumer's grant, as FetchGrants hands out: reads only.
    [fetch_grant] = cluster.stub.FetchGrants(
        bulk_pb2.FetchGrantsRequest(
            partitions=[common_pb2.FetchPartition(topic="guarded", partition=0)]
        ),
        timeout=10,
    ).grants
    host, port = leader.bulk.address.rsplit(":", 1)
    refusals = [
        (produce_header(request, fetch_grant.grant, fetch_grant.signature), request, "relay"),
        (produce_header(request, relay_grant, b"\0" * 32), request, "does not verify"),
        (
            bulk_pb2.BulkFetchRequest(
                version=bulk_wire.BULK_PRODUCE_VERSION,
                grant=relay_grant,
                signature=relay_signature,
                produce_length=0,
            ),
            b"",
            "must be 1 to",
        ),
    ]
    for header, body, reason in refusals:
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            answer = exchange(sock, header, body)
            assert answer.end and answer.error != common_pb2.NONE
            assert reason in answer.error_message and not answer.response
            assert closed_by_node(sock)
    assert leader.logs.get_log("guarded", 0).log_end_offset == 0
    # Under the relay grant: a malformed request is refused whole and nothing is written,
    # the connection stays, and a good one on it is appended and answered.
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        malformed = b"\x0a\x09guard"  # a topic of 9 bytes, 5 of them sent
        answer = exchange(sock, produce_header(malformed, relay_grant, relay_signature), malformed)
        assert not answer.end and common_pb2.ErrorCode.Name(answer.error) == "INVALID_REQUEST"
        assert leader.logs.get_log("guarded", 0).log_end_offset == 0
        answer = exchange(sock, produce_header(request, relay_grant, relay_signature), request)
        assert not answer.end and answer.error == common_pb2.NONE
        [result] = common_pb2.ProduceResponse.FromString(answer.response).partitions
        assert result.error == 0 and result.base_offset == 0
    log = leader.logs.get_log("guarded", 0)
    assert log.log_end_offset == 1
    assert [r.value for r in iter_records(bytes(log.read(0, 1 << 20)))] == [b"ok"]


def test_on_a_tls_cluster_only_the_gateways_certificate_may_relay(tmp_path, monkeypatch):
    cluster = LocalCluster(tmp_path, nodes=1, tls=True)
    try:
        cluster.admin.create_topic("tls", 1, 1)
        leader = cluster.leader_of("tls", 0)
        relayed = RelayedProduces(leader, monkeypatch)
        for i in range(3):
            [result] = cluster.client.produce("tls", {0: make_batch([b"t%d" % i])}, acks=-1)
            assert result.error == 0 and result.base_offset == i
        assert relayed.count == 3
        # A node's certificate, a grant that verifies: still not the gateway.
        node_id = leader.config.node_id
        grant, signature, _ = grants.issue(CLUSTER_SECRET, node_id, (), produce_relay=True)
        request = wire.encode_produce_request("tls", 1, 5000, [(0, -1, [make_batch([b"no"])])])
        context = client_ssl_context(cluster.tls_files(node_identity(node_id)))
        host, port = leader.bulk.address.rsplit(":", 1)
        plain = socket.create_connection((host, int(port)), timeout=10)
        with context.wrap_socket(plain, server_hostname=host) as sock:
            answer = exchange(sock, produce_header(request, grant, signature), request)
            assert answer.end and "gateway's certificate" in answer.error_message
        assert leader.logs.get_log("tls", 0).log_end_offset == 3
    finally:
        cluster.close()


def test_the_relay_sends_one_grant_until_it_nears_its_expiry(cluster, monkeypatch):
    cluster.admin.create_topic("renewed", 1, 1)
    leader = cluster.leader_of("renewed", 0)
    seen = []
    check = leader.bulk.produce.check

    def recording(request, peer_name):
        seen.append(request.grant)
        return check(request, peer_name)

    monkeypatch.setattr(leader.bulk.produce, "check", recording)
    for value in (b"a", b"b"):
        assert cluster.client.produce("renewed", {0: make_batch([value])})[0].error == 0
    assert len(seen) == 2 and seen[0] == seen[1]  # signed once, verified once
    # Once less than the margin is left, the next request carries a new grant.
    relay = cluster.gateway.service.appends.relay
    reused = relay.grants.by_node[leader.config.node_id]
    monkeypatch.setattr(reused, "renew_margin_ms", reused.ttl_ms + 1)
    assert cluster.client.produce("renewed", {0: make_batch([b"c"])})[0].error == 0
    assert len(seen) == 3 and seen[2] != seen[1]


def test_bulk_connections_per_node_are_bounded_and_reused(cluster, monkeypatch):
    cluster.admin.create_topic("bounded", 1, 1)
    leader = cluster.leader_of("bounded", 0)
    node_id, address = leader.config.node_id, leader.bulk.address
    pool = BulkPool(max_connections_per_node=2)
    try:
        first = pool.take(node_id, address)
        second = pool.take(node_id, address)
        assert first is not None and second is not None
        # Two in use: a third request would go over gRPC rather than open another.
        assert pool.take(node_id, address) is None
        pool.give_back(first[0], first[1])
        again = pool.take(node_id, address)
        assert again is not None and again[1] is first[1]  # the idle one, kept
        # A connection the node closed is counted out when next taken, and replaced.
        leader.bulk.stop()
        # The node's FIN reaches the socket when the kernel gets to it (on a busy machine,
        # after `stop` returned).
        assert wait_until(again[1].peer_closed, 20), "the node's close never arrived"
        pool.give_back(again[0], again[1])
        assert pool.take(node_id, address) is None  # nothing listens now
        # Left alone for a while: no request waits on a connect that just failed.
        opened = []
        monkeypatch.setattr(BulkConnection, "open", lambda *a, **k: opened.append(a))
        assert pool.take(node_id, address) is None and opened == []
        assert pool.open_connections(node_id) == (1, 0)  # only `second` is left
    finally:
        pool.close()
