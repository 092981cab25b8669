"""A node's bulk listener taking the gateway's fetch relay grant, spoken to by hand over a
plain socket: for consumer reads at the leader epoch the request names, and never as another
kind of grant; a relayed poll whose cancel came off the wire with it is answered at once."""

from __future__ import annotations

import socket

import pytest

from seglog.rpc import bulk_wire, grants
from seglog.v1 import bulk_pb2, common_pb2
from tests.batches import make_batch
from tests.cluster import CLUSTER_SECRET, LocalCluster
from tests.relayed_fetch import answer_chunks, relayed_fetch

DEADLINE_S = 20.0


@pytest.fixture
def cluster(tmp_path):
    c = LocalCluster(tmp_path, nodes=2)
    yield c
    c.close()


def test_the_node_serves_the_relay_grant_as_a_consumer_at_the_named_epoch_only(cluster):
    cluster.admin.create_topic("guarded", 1, 1)
    cluster.client.produce("guarded", {0: make_batch([b"g"])})
    leader = cluster.leader_of("guarded", 0)
    node_id = leader.config.node_id
    epoch = cluster.gateway.registry.route("guarded", 0).leader_epoch
    grant, signature, _ = grants.issue(CLUSTER_SECRET, node_id, (), fetch_relay=True)
    produce_grant, produce_signature, _ = grants.issue(
        CLUSTER_SECRET, node_id, (), produce_relay=True
    )
    host, port = leader.bulk.address.rsplit(":", 1)
    refusals = [
        (relayed_fetch(grant, signature, [("guarded", 0, None)]), "names no leader epoch"),
        (
            relayed_fetch(grant, signature, [("guarded", 0, epoch)], replica_id=node_id),
            "not the granted one",
        ),
        (
            relayed_fetch(produce_grant, produce_signature, [("guarded", 0, epoch)]),
            "not granted",
        ),
    ]
    for request, reason in refusals:
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            [refusal] = answer_chunks(sock, request)
            assert refusal.error and reason in refusal.error_message
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        # A stale epoch is the partition's error, as over gRPC: the fetch is answered.
        stale = answer_chunks(sock, relayed_fetch(grant, signature, [("guarded", 0, epoch + 1)]))
        assert [common_pb2.ErrorCode.Name(c.error) for c in stale[:-1]] == [
            "NOT_LEADER_OR_FOLLOWER"
        ]
        assert stale[-1].end and not stale[-1].error
        [chunk, end] = answer_chunks(sock, relayed_fetch(grant, signature, [("guarded", 0, epoch)]))
        assert chunk.error == common_pb2.NONE and chunk.records_length > 0
        assert end.end and not end.error


def test_a_relayed_poll_whose_cancel_came_with_it_is_answered_at_once(cluster):
    # The node reads what the socket holds at once: the cancel may come off the wire with the
    # poll itself, before any watch of the connection begins, and must still end the poll.
    cluster.admin.create_topic("hasty", 1, 1)
    cluster.client.produce("hasty", {0: make_batch([b"h"])})
    leader = cluster.leader_of("hasty", 0)
    epoch = cluster.gateway.registry.route("hasty", 0).leader_epoch
    grant, signature, _ = grants.issue(CLUSTER_SECRET, leader.config.node_id, (), fetch_relay=True)
    poll = relayed_fetch(grant, signature, [("hasty", 0, epoch)])
    poll.fetch.partitions[0].fetch_offset = 1  # the log's end: nothing to answer yet
    poll.fetch.max_wait_ms = 300_000  # the most a fetch may wait
    poll.fetch.min_bytes = 1
    together = b"".join(
        bulk_wire.frame_message(poll)
        + bulk_wire.frame_message(bulk_pb2.BulkFetchRequest(cancel=True))
    )
    host, port = leader.bulk.address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=DEADLINE_S) as sock:
        sock.sendall(together)
        chunks = []
        while not chunks or not chunks[-1].end:  # a poll run whole would time this out
            chunk = bulk_wire.recv_message(sock, bulk_pb2.BulkFetchChunk)
            assert chunk is not None, "the node closed the connection"
            chunks.append(chunk)
        assert not any(c.records_length or c.error for c in chunks)
        # The cancel was taken as such, not as a request: the connection serves the next.
        [chunk, end] = answer_chunks(sock, relayed_fetch(grant, signature, [("hasty", 0, epoch)]))
        assert chunk.records_length > 0 and end.end and not end.error
