"""The gateway's fetch relay over the nodes' bulk listeners (bulk.md, "The gateway's fetch
relay") on real clusters: a consumer's fetch through the gateway goes there and answers what
the gRPC hop answers, and a Kafka client reads through it; a long poll waits on the node and
wakes on an append; a fetch given up ends the node's wait and keeps its connection; a node
that refuses the relay gets the fetch over gRPC; on a TLS cluster the node takes the relay's
grant from the gateway's certificate only, and the gateway relays no fetch spanning several
nodes. The node's own checks of the grant are in test_relay_grant_at_node.py."""

from __future__ import annotations

import socket
import threading
import time

import confluent_kafka
import grpc
import pytest

from seglog.errors import UnknownTopicOrPartitionError
from seglog.records import iter_records
from seglog.rpc import grants
from seglog.rpc.bulk_client import BulkConnection
from seglog.security.certs import node_identity
from seglog.security.tls import client_ssl_context
from seglog.v1 import common_pb2
from services.gateway.broker.caller import Caller
from services.gateway.routing.call_scope import CallEnd
from services.gateway.routing.data_plane import FetchPosition, FetchQuery
from services.storage_node import bulk_server
from tests.batches import make_batch
from tests.cluster import CLUSTER_SECRET, LocalCluster
from tests.rdkafka import assert_read_back_in_order, produce_round_robin, rdkafka_consume
from tests.relayed_fetch import answer_chunks, relayed_fetch

DEADLINE_S = 20.0


@pytest.fixture
def cluster(tmp_path):
    c = LocalCluster(tmp_path, nodes=2)
    yield c
    c.close()


class ServedFetches:
    """Counts the consumer fetches (not followers') each node served over its bulk listener
    and over its gRPC Fetch."""

    def __init__(self, cluster, monkeypatch) -> None:
        self.bulk: dict[int, int] = {n: 0 for n in cluster.nodes}
        self.grpc: dict[int, int] = {n: 0 for n in cluster.nodes}
        self._lock = threading.Lock()
        for node_id, node in cluster.nodes.items():
            self._count(
                monkeypatch,
                node.bulk,
                "_answer",
                lambda conn, request, *_: not request.fetch.HasField("replica_id"),
                self.bulk,
                node_id,
            )
            self._count(
                monkeypatch,
                node.service,
                "_fetch",
                lambda request, context, started, replica_id: replica_id < 0,
                self.grpc,
                node_id,
            )

    def _count(self, monkeypatch, target, name, consumers, counts, node_id) -> None:
        original = getattr(target, name)

        def counting(*args, **kwargs):
            if consumers(*args):
                with self._lock:
                    counts[node_id] += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(target, name, counting)


def fetch(cluster, partitions, *, max_wait_ms=0, min_bytes=1, timeout_s=DEADLINE_S):
    """The gateway's Fetch answer, each message parsed: `partitions` as (topic, partition,
    offset)."""
    request = common_pb2.FetchRequest(max_wait_ms=max_wait_ms, min_bytes=min_bytes)
    for topic, partition, offset in partitions:
        request.partitions.add(
            topic=topic, partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20
        )
    return list(cluster.stub.Fetch(request, timeout=timeout_s))


def answered(messages):
    """(topic, partition) -> (error name, high watermark, log start, values)."""
    out = {}
    for m in messages:
        values = [r.value for r in iter_records(m.records)] if m.records else []
        key = (m.topic, m.partition)
        _, _, _, before = out.get(key, (None, None, None, []))
        out[key] = (
            common_pb2.ErrorCode.Name(m.error),
            m.high_watermark,
            m.log_start_offset,
            before + values,
        )
    return out


def wait_until(condition, what):
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_fetch_goes_over_the_bulk_listener_and_answers_as_over_grpc(tmp_path, monkeypatch):
    seen = {}
    for enabled in (True, False):
        cluster = LocalCluster(tmp_path / str(enabled), nodes=2, bulk_fetch_relay_enable=enabled)
        try:
            cluster.admin.create_topic("relayed", 2, 1)
            assert cluster.leader_of("relayed", 0) is not cluster.leader_of("relayed", 1)
            for partition in (0, 1):
                for i in range(3):
                    batch = make_batch([b"p%d-%d" % (partition, i)])
                    assert cluster.client.produce("relayed", {partition: batch})[0].error == 0
            served = ServedFetches(cluster, monkeypatch)
            # Both leaders in one fetch (split by node), one of them from a later offset,
            # and a partition that does not exist.
            messages = fetch(cluster, [("relayed", 0, 0), ("relayed", 1, 1), ("relayed", 7, 0)])
            seen[enabled] = answered(messages)
            if enabled:
                assert sum(served.bulk.values()) == 2 and sum(served.grpc.values()) == 0
            else:
                assert sum(served.bulk.values()) == 0 and sum(served.grpc.values()) == 2
        finally:
            cluster.close()
    assert seen[True] == seen[False]
    assert seen[True][("relayed", 0)] == ("NONE", 3, 0, [b"p0-0", b"p0-1", b"p0-2"])
    assert seen[True][("relayed", 1)] == ("NONE", 3, 0, [b"p1-1", b"p1-2"])
    assert seen[True][("relayed", 7)][0] == "UNKNOWN_TOPIC_OR_PARTITION"


def test_librdkafka_reads_through_the_kafka_listener_over_the_relay(cluster, monkeypatch):
    cluster.admin.create_topic("kafka-read", 2, 2)
    # A batch per record, read a batch per partition per fetch: a hundred fetches or so.
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": cluster.kafka_address, "linger.ms": 0, "batch.num.messages": 1}
    )
    reported = produce_round_robin(producer, "kafka-read", 2, 200)
    # A cancelled poll keeps its connection when the node answers the cancel within the
    # grace: on a loaded machine 1 s can pass, and what is counted here is connections.
    monkeypatch.setattr(cluster.gateway.service.fetch_relay.deadlines, "grace_s", 30.0)
    served = ServedFetches(cluster, monkeypatch)
    opened = []
    open_connection = BulkConnection.open

    def counted_open(*args, **kwargs):
        opened.append(args[0])
        return open_connection(*args, **kwargs)

    monkeypatch.setattr(BulkConnection, "open", counted_open)
    messages = rdkafka_consume(
        cluster.kafka_address,
        "kafka-read",
        [0, 1],
        200,
        config={"max.partition.fetch.bytes": 1, "fetch.max.bytes": 1000, "message.max.bytes": 1000},
    )
    assert_read_back_in_order(messages, reported, 2, 200)
    # Every Kafka fetch reached the leaders over their bulk listeners, none over gRPC, on
    # kept connections: each fetch spans both leaders (one lane), the silent one's poll is
    # cancelled and the answer left at min_bytes read off, and neither costs a connection.
    fetches = sum(served.bulk.values())
    assert fetches >= 50 and sum(served.grpc.values()) == 0
    assert len(opened) <= 8, f"{len(opened)} connections opened for {fetches} fetches"


def test_the_cores_fetch_reads_the_relayed_records_in_the_buffers_they_came_in(cluster):
    """A Kafka fetch's records are the bytes the node's chunk was received into, handed on
    as views: not encoded to a FetchResponse and parsed back (two copies of each megabyte
    of a consumer's answer, and a third reading the parsed records)."""
    cluster.admin.create_topic("zero-copy", 2, 1)
    assert cluster.leader_of("zero-copy", 0) is not cluster.leader_of("zero-copy", 1)
    for partition in (0, 1):
        batch = make_batch([b"z%d-%d" % (partition, i) for i in range(3)])
        assert cluster.client.produce("zero-copy", {partition: batch})[0].error == 0
    query = FetchQuery(
        [FetchPosition("zero-copy", p, 0, 1 << 20) for p in (0, 1, 7)], max_bytes=1 << 20
    )
    scope = CallEnd()
    caller = Caller("User:ANONYMOUS", "127.0.0.1", listener="kafka")
    try:
        parts = list(cluster.gateway.data_plane.fetch(caller, query, scope))
    finally:
        scope.finish()
    by_partition = {part.partition: part for part in parts}
    for partition in (0, 1):
        part = by_partition[partition]
        assert part.error is None and part.high_watermark == 3
        assert isinstance(part.records, memoryview), type(part.records)
        values = [r.value for r in iter_records(bytes(part.records))]
        assert values == [b"z%d-%d" % (partition, i) for i in range(3)]
    # A partition the relay never reaches answers its error in the same form.
    assert isinstance(by_partition[7].error, UnknownTopicOrPartitionError)


def test_a_long_poll_waits_on_the_node_and_wakes_on_an_append(cluster, monkeypatch):
    cluster.admin.create_topic("polled", 1, 2)
    # Written to both replicas first: the partition's leadership has settled.
    assert cluster.client.produce("polled", {0: make_batch([b"first"])}, acks=-1)[0].error == 0
    served = ServedFetches(cluster, monkeypatch)
    result = {}

    def poll():
        result["messages"] = fetch(cluster, [("polled", 0, 1)], max_wait_ms=15_000)

    poller = threading.Thread(target=poll)
    poller.start()
    wait_until(
        lambda: sum(served.bulk.values()) == 1,
        f"the long poll never reached the leader: {result}",
    )
    assert "messages" not in result
    assert cluster.client.produce("polled", {0: make_batch([b"woke"])}, acks=-1)[0].error == 0
    poller.join(DEADLINE_S)
    assert not poller.is_alive()
    assert answered(result["messages"])[("polled", 0)][3] == [b"woke"]
    assert sum(served.grpc.values()) == 0


def test_a_fetch_given_up_ends_the_nodes_wait_and_keeps_its_connection(cluster, monkeypatch):
    cluster.admin.create_topic("left", 1, 1)
    leader = cluster.leader_of("left", 0).config.node_id
    relay = cluster.gateway.service.fetch_relay
    # The node answers the cancel at once; the grace only bounds how long that may take.
    monkeypatch.setattr(relay.deadlines, "grace_s", 30.0)
    request = common_pb2.FetchRequest(max_wait_ms=60_000, min_bytes=1)
    request.partitions.add(topic="left", partition=0, fetch_offset=0, partition_max_bytes=1024)
    served = ServedFetches(cluster, monkeypatch)
    call = cluster.stub.Fetch(request, timeout=120)
    waiting = threading.Thread(target=lambda: list(_until_cancelled(call)))
    waiting.start()
    wait_until(lambda: served.bulk[leader] == 1, "the long poll never reached the node")
    assert relay.pool.open_connections(leader) == (1, 0)
    call.cancel()
    waiting.join(DEADLINE_S)
    # The node answered at once, not after its 60 s wait, and the connection went back to
    # the pool with nothing of that answer left on it.
    wait_until(lambda: relay.pool.open_connections(leader) == (1, 1), "the node's wait did not end")
    assert cluster.client.produce("left", {0: make_batch([b"after"])})[0].error == 0
    for offset in (0, 1):  # read on that same connection, and again after the cancel's echo
        got = answered(fetch(cluster, [("left", 0, offset)]))[("left", 0)]
        assert got[3] == [b"after"][offset:] and got[1] == 1
    assert relay.pool.open_connections(leader) == (1, 1)


def test_a_cancelled_poll_whose_node_cannot_answer_is_given_up(cluster, monkeypatch):
    cluster.admin.create_topic("paused", 1, 1)
    # Written first: the partition's leadership has settled, so the poll reaches a leader.
    assert cluster.client.produce("paused", {0: make_batch([b"first"])})[0].error == 0
    leader = cluster.leader_of("paused", 0)
    # The node does not see the cancel (as if paused): its poll would run its whole wait.
    monkeypatch.setattr(leader.bulk._peer_watch, "watch", lambda conn, on_readable: None)
    relay = cluster.gateway.service.fetch_relay
    node_id = leader.config.node_id
    request = common_pb2.FetchRequest(max_wait_ms=60_000, min_bytes=1)
    request.partitions.add(topic="paused", partition=0, fetch_offset=1, partition_max_bytes=1024)
    # Counting before the call: a gRPC call is sent as it is made, and may be served at once.
    served = ServedFetches(cluster, monkeypatch)
    call = cluster.stub.Fetch(request, timeout=120)
    waiting = threading.Thread(target=lambda: list(_until_cancelled(call)))
    waiting.start()
    wait_until(lambda: served.bulk[node_id] == 1, "the poll never reached the node")
    assert relay.pool.open_connections(node_id) == (1, 0)
    call.cancel()
    waiting.join(DEADLINE_S)
    # After CANCEL_GRACE_S the connection is shut down: the gateway's thread reading it is
    # free, not held for the 60 s the poll may wait.
    wait_until(
        lambda: relay.pool.open_connections(node_id) == (0, 0), "the unanswered poll held on"
    )


def _until_cancelled(call):
    try:
        yield from call
    except grpc.RpcError as exc:
        assert exc.code() == grpc.StatusCode.CANCELLED


def _two_partitions_on_one_leader(cluster, topic: str) -> tuple[int, int, int]:
    """A topic of 4 partitions RF1 on the cluster's 2 nodes, and a leader with two of them,
    each holding one record (b"<partition>"): (its node id, those two partitions)."""
    cluster.admin.create_topic(topic, 4, 1)
    leaders = {p: cluster.leader_of(topic, p).config.node_id for p in range(4)}
    first, second = [p for p in range(4) if leaders[p] == leaders[0]][:2]
    for p in (first, second):
        assert cluster.client.produce(topic, {p: make_batch([b"%d" % p])})[0].error == 0
    return leaders[0], first, second


def test_an_answer_cut_off_reads_as_the_nodes_loss_not_as_the_end(cluster, monkeypatch):
    node_id, first, second = _two_partitions_on_one_leader(cluster, "cut")
    send_chunk = bulk_server.send_chunk
    sent = []

    def failing_second(answer, chunk):
        sent.append(chunk)
        if len(sent) == 2:
            answer.flush()  # the first partition's chunk is on the wire, then the node is gone
            raise ConnectionResetError("the node went away mid-answer")
        return send_chunk(answer, chunk)

    monkeypatch.setattr(bulk_server, "send_chunk", failing_second)
    served = ServedFetches(cluster, monkeypatch)
    got = answered(fetch(cluster, [("cut", first, 0), ("cut", second, 0)]))
    # The first partition's records came; then both partitions read as the node's loss, as
    # a broken gRPC stream reads, and the fetch is not sent again over gRPC.
    assert got[("cut", first)][3] == [b"%d" % first]
    assert got[("cut", first)][0] == got[("cut", second)][0] == "LEADER_NOT_AVAILABLE"
    assert got[("cut", second)][3] == []
    assert served.bulk[node_id] == 1 and served.grpc[node_id] == 0
    relay = cluster.gateway.service.fetch_relay
    wait_until(
        lambda: relay.pool.open_connections(node_id) == (0, 0), "the broken connection stayed"
    )


def test_a_node_refusing_the_relay_is_fetched_over_grpc(cluster, monkeypatch):
    cluster.admin.create_topic("refused", 1, 1)
    cluster.client.produce("refused", {0: make_batch([b"r"])})
    node = cluster.leader_of("refused", 0)
    # A node from before the relay: it knows no relay grant, so it refuses the partitions.
    monkeypatch.setattr(grants, "verify", _without_fetch_relay(grants.verify))
    served = ServedFetches(cluster, monkeypatch)
    for _ in range(2):
        assert answered(fetch(cluster, [("refused", 0, 0)]))[("refused", 0)][3] == [b"r"]
    node_id = node.config.node_id
    # Refused once, then left to gRPC: both fetches answered over gRPC.
    assert served.bulk[node_id] == 1 and served.grpc[node_id] == 2


def _without_fetch_relay(verify):
    def verify_as_before(*args, **kwargs):
        verified = verify(*args, **kwargs)
        return grants.VerifiedGrant(
            verified.node_id,
            verified.expires_at_ms,
            verified.partitions,
            verified.replica_id,
            verified.produce_relay,
            verified.produce_topics,
        )

    return verify_as_before


def test_on_a_tls_cluster_only_the_gateways_certificate_may_relay_fetches(tmp_path, monkeypatch):
    cluster = LocalCluster(tmp_path, nodes=2, tls=True)
    try:
        cluster.admin.create_topic("tls", 2, 1)
        leaders = [cluster.leader_of("tls", p).config.node_id for p in (0, 1)]
        assert leaders[0] != leaders[1]
        for p in (0, 1):
            cluster.client.produce("tls", {p: make_batch([b"t%d" % p])})
        served = ServedFetches(cluster, monkeypatch)
        assert answered(fetch(cluster, [("tls", 0, 0)]))[("tls", 0)][3] == [b"t0"]
        assert served.bulk[leaders[0]] == 1 and served.grpc[leaders[0]] == 0
        # Spanning both nodes: over gRPC, as a given-up TLS poll would cost its connection.
        both = answered(fetch(cluster, [("tls", 0, 0), ("tls", 1, 0)]))
        assert [both[("tls", p)][3] for p in (0, 1)] == [[b"t0"], [b"t1"]]
        assert served.bulk == {leaders[0]: 1, leaders[1]: 0}
        assert served.grpc == {leaders[0]: 1, leaders[1]: 1}
        # A node's certificate, a grant that verifies: still not the gateway.
        leader = cluster.nodes[leaders[0]]
        epoch = cluster.gateway.registry.route("tls", 0).leader_epoch
        grant, signature, _ = grants.issue(CLUSTER_SECRET, leaders[0], (), fetch_relay=True)
        context = client_ssl_context(cluster.tls_files(node_identity(leaders[0])))
        host, port = leader.bulk.address.rsplit(":", 1)
        plain = socket.create_connection((host, int(port)), timeout=10)
        with context.wrap_socket(plain, server_hostname=host) as sock:
            [refusal] = answer_chunks(sock, relayed_fetch(grant, signature, [("tls", 0, epoch)]))
            assert refusal.end and "gateway's certificate" in refusal.error_message
    finally:
        cluster.close()


def test_a_reader_leaving_a_stalled_answer_is_not_held_for_the_polls_timeout(cluster, monkeypatch):
    node_id, first, second = _two_partitions_on_one_leader(cluster, "stalled")
    node = cluster.nodes[node_id]
    send_chunk = bulk_server.send_chunk
    resume = threading.Event()
    sent = []

    def stalling_second(answer, chunk):
        sent.append(chunk)
        if len(sent) == 2:  # the node stalls mid-answer (paused, overloaded)
            answer.flush()  # after the first partition's chunk went out
            resume.wait(DEADLINE_S)
        return send_chunk(answer, chunk)

    monkeypatch.setattr(bulk_server, "send_chunk", stalling_second)
    relay = cluster.gateway.service.fetch_relay
    request = common_pb2.FetchRequest(max_wait_ms=0)
    for p in (first, second):
        request.partitions.add(
            topic="stalled",
            partition=p,
            fetch_offset=0,
            partition_max_bytes=1 << 20,
            current_leader_epoch=cluster.gateway.registry.route("stalled", p).leader_epoch,
        )
    relayed = relay.take(node_id, node.bulk.address, spans_nodes=False)
    assert relayed is not None
    answers = relayed.answers(request, timeout_s=600)
    assert next(answers).partition == first
    try:
        left = time.monotonic()
        answers.close()  # the reader leaves while the rest of the answer is stalled
        # Given up on after DRAIN_TIMEOUT_S without a byte, not the 600 s the poll allowed;
        # the connection, with an answer unread on it, is closed rather than kept.
        assert time.monotonic() - left < 60
        assert relay.pool.open_connections(node_id) == (0, 0)
    finally:
        resume.set()
