"""seglog's own Consumer and CLI with Kafka's isolation levels, on a real gateway and node:
transactional batches and COMMIT/ABORT control batches written through the node's ordinary
append, read back through the gateway's Fetch; the consumer's decode skips an aborted
producer's batches given the answer's aborted list, never hands out a control record, and
its fetches reach the node with their isolation level, on the bulk path and through the
gateway alike."""

from __future__ import annotations

import grpc
import pytest

from seglog.client.consumer import Consumer
from seglog.client.fetched import CompletedFetch, decode, next_offset_after
from seglog.client.structs import TopicPartition
from seglog.records import RecordBatchBuilder
from seglog.v1 import common_pb2
from tests.cluster import LocalCluster, cli_in_process, drain
from tests.txn_batches import ABORT, COMMIT, transactional_batch, write_marker

TOPIC = "read-committed"
TP = TopicPartition(TOPIC, 0)
COMMITTER, ABORTER = 9001, 9002
READ_COMMITTED = 1


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("read-committed"), nodes=1)
    c.admin.create_topic(TOPIC, 1, 1)
    # Offsets: a1 0, b1 1, plain 2, ABORT(b) 3, COMMIT(a) 4.
    for records in (
        transactional_batch(COMMITTER, [b"a1"]),
        transactional_batch(ABORTER, [b"b1"]),
        plain_batch(b"plain"),
    ):
        append(c, records)
    route = c.gateway.registry.route(TOPIC, 0)
    stub = c.gateway.connections.get(route.leader, route.address).stub
    write_marker(stub, TOPIC, 0, ABORTER, ABORT)
    write_marker(stub, TOPIC, 0, COMMITTER, COMMIT)
    yield c
    c.close()


def plain_batch(value: bytes) -> bytes:
    builder = RecordBatchBuilder()
    builder.append(None, value, None)
    return builder.build()


def append(cluster, records: bytes) -> None:
    gateway = cluster.gateway
    route = gateway.registry.route(TOPIC, 0)
    stub = gateway.connections.get(route.leader, route.address).stub
    request = common_pb2.ProduceRequest(topic=TOPIC, acks=-1, timeout_ms=5000)
    request.partitions.add(partition=0, records=records)
    (result,) = stub.Append(request, timeout=10).partitions
    assert result.error == 0, result.error_message


def fetched_bytes(cluster) -> bytes:
    request = common_pb2.FetchRequest(
        min_bytes=1, max_wait_ms=0, max_bytes=1 << 20, isolation_level=READ_COMMITTED
    )
    request.partitions.add(topic=TOPIC, partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
    return b"".join(m.records for m in cluster.stub.Fetch(request, timeout=10))


def test_read_committed_decode_skips_the_aborted_producers_batches(cluster):
    records = fetched_bytes(cluster)
    assert next_offset_after(records, 0) == 5  # the markers came back from the node
    # The answer's aborted list, as the node gives it for this range: producer ABORTER's
    # transaction from offset 1.
    fetch = CompletedFetch(TP, 0, records, 5, ((ABORTER, 1),))
    pending = decode(fetch, 0, check_crcs=True)
    assert [(r.offset, r.value) for r in pending.records] == [(0, b"a1"), (2, b"plain")]


@pytest.mark.parametrize("transport", ["bulk", "grpc"])
def test_a_consumer_asks_the_node_at_its_isolation_level_and_gets_no_control_records(
    cluster, monkeypatch, transport
):
    """A spy on the node's two fetch entries (the gRPC Fetch, the bulk listener) records the
    isolation level each consumer fetch of the topic arrives with."""
    node = cluster.nodes[1]
    levels: list[int] = []

    def record(fetch):
        if any(p.topic == TOPIC for p in fetch.partitions) and not fetch.HasField("replica_id"):
            levels.append(fetch.isolation_level)

    grpc_fetch, bulk_answer = node.service._fetch, node.bulk._send_answer

    def spied_fetch(request, *args, **kwargs):
        record(request)
        return grpc_fetch(request, *args, **kwargs)

    def spied_answer(receiver, fetch, *args, **kwargs):
        record(fetch)
        return bulk_answer(receiver, fetch, *args, **kwargs)

    monkeypatch.setattr(node.service, "_fetch", spied_fetch)
    monkeypatch.setattr(node.bulk, "_send_answer", spied_answer)
    # The aborted b1 goes at read_committed, now the node lists the aborted transaction.
    expected = {0: [b"a1", b"b1", b"plain"], 1: [b"a1", b"plain"]}
    for level, number in (("read_uncommitted", 0), ("read_committed", 1)):
        levels.clear()
        with Consumer(
            cluster.address, isolation_level=level, fetch_transport=transport
        ) as consumer:
            consumer.assign([TP])
            consumer.seek_to_beginning(TP)
            got = drain(consumer, len(expected[number]), timeout_s=10)
        # No control record at either level.
        assert [r.value for r in got] == expected[number]
        if number == 0:
            assert levels and set(levels) == {0}, (level, levels)
        else:
            # The read_uncommitted consumer's last long poll, relayed by the gateway, may reach
            # the node after that consumer closed: only level 1 is this consumer's.
            assert 1 in levels and set(levels) <= {0, 1}, (level, levels)


def test_the_cli_reads_at_the_isolation_level_given(cluster, capsys, monkeypatch):
    code, out, err = cli_in_process(
        cluster,
        capsys,
        monkeypatch,
        "consume",
        TOPIC,
        "--isolation-level",
        "read_committed",
        "--from-beginning",
        "-e",
        "--format",
        "%o %s\n",
    )
    assert code == 0, err
    assert out.split("\n")[0] == "0 a1"
    assert "2 plain" in out
    with pytest.raises(SystemExit) as refused:
        cli_in_process(
            cluster, capsys, monkeypatch, "consume", TOPIC, "--isolation-level", "serializable"
        )
    assert refused.value.code == 2
    assert "read_committed" in capsys.readouterr().err


def test_an_unknown_isolation_level_is_refused_whole(cluster):
    request = common_pb2.FetchRequest(min_bytes=1, max_wait_ms=0, max_bytes=1 << 20)
    request.isolation_level = 2
    request.partitions.add(topic=TOPIC, partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
    with pytest.raises(grpc.RpcError) as refused:
        list(cluster.stub.Fetch(request, timeout=10))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "isolation_level 2" in refused.value.details()
