"""The bulk fetch path (proto/seglog/v1/bulk.md) on a real cluster: grants from the gateway,
bytes from the node's files with sendfile, equal to the gRPC path's; refusals of forged,
expired, misdirected and overreaching grants; a node lost mid-transfer; segments deleted
under a transfer; no user-space copy of record bytes on the node."""

from __future__ import annotations

import socket
import time

import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from seglog.client.bulk import BulkReader
from seglog.client.consumer import Consumer
from seglog.client.fetched import next_offset_after
from seglog.client.gateway import FetchPosition
from seglog.client.structs import TopicPartition
from seglog.records import CompressionType
from seglog.rpc import bulk_wire
from seglog.rpc.bulk_client import BulkFetchError
from seglog.storage.file_records import FileRecords
from seglog.v1 import bulk_pb2, common_pb2
from services.storage_node.bulk_answer import COPY_BELOW_BYTES, AnswerWriter, send_chunk
from tests.batches import make_batch
from tests.cluster import LocalCluster
from tests.waiting import wait_until


@pytest.fixture
def cluster(tmp_path):
    c = LocalCluster(tmp_path, nodes=2)
    yield c
    c.close()


def _legacy(values) -> bytes:
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=1, batch_size=1 << 20)
    now = time.time_ns() // 1_000_000
    for i, value in enumerate(values):
        builder.append(i, timestamp=now, key=None, value=value)
    return bytes(builder.build())


def _fill(cluster, topic):
    """Plain, compressed and legacy batches over several small segments."""
    cluster.admin.create_topic(topic, 1, 1, configs={"segment.bytes": "3000"})
    for i in range(30):
        values = [b"r%d-%d" % (i, j) * 20 for j in range(5)]
        if i % 3 == 0:
            records = make_batch(values)
        elif i % 3 == 1:
            records = make_batch(values, compression=CompressionType.LZ4)
        else:
            records = _legacy(values)
        assert cluster.client.produce(topic, {0: records})[0].error == 0
    assert len(cluster.log(topic, 0).segments) >= 3


def _reader(cluster) -> BulkReader:
    return BulkReader(cluster.stub, 10)


def _bulk_fetch(reader, tp, offset, max_bytes=1 << 20):
    by_grant, fallback = reader.route([(tp, offset)])
    assert not fallback
    [(grant, _)] = by_grant.values()
    request = common_pb2.FetchRequest(max_wait_ms=0, max_bytes=max_bytes)
    request.partitions.add(
        topic=tp.topic, partition=tp.partition, fetch_offset=offset, partition_max_bytes=max_bytes
    )
    return list(reader.send(grant, request).receive())


def _grpc_fetch(cluster, topic, offset, max_bytes=1 << 20):
    return list(
        cluster.client.fetch(
            [FetchPosition(topic, 0, offset, max_bytes)], max_wait_ms=0, max_bytes=max_bytes
        )
    )


def test_bulk_bytes_equal_the_grpc_path_across_segments_codecs_and_max_bytes(cluster):
    _fill(cluster, "same")
    tp = TopicPartition("same", 0)
    reader = _reader(cluster)
    end = cluster.log("same", 0).log_end_offset
    for max_bytes in (1 << 20, 700, 1):
        offset, bulk_bytes, grpc_bytes = 0, b"", b""
        while offset < end:
            bulk = _bulk_fetch(reader, tp, offset, max_bytes)
            grpc = _grpc_fetch(cluster, "same", offset, max_bytes)
            got = b"".join(bytes(m.records) for m in bulk)
            assert got == b"".join(m.records for m in grpc)
            assert [m.high_watermark for m in bulk] == [m.high_watermark for m in grpc]
            assert got, "at least one batch even past max bytes"
            bulk_bytes += got
            grpc_bytes += b"".join(m.records for m in grpc)
            offset = next_offset_after(got, offset)
        assert bulk_bytes == grpc_bytes
    reader.close()


def test_consumers_read_through_the_bulk_path_and_fall_back_when_it_is_gone(cluster):
    _fill(cluster, "read")
    expected = [r.value for m in _grpc_fetch(cluster, "read", 0) for r in _decode(m.records)]
    node = cluster.leader_of("read", 0)
    served = []
    real = node.bulk._answer
    node.bulk._answer = lambda conn, request, *peer: served.append(1) or real(conn, request, *peer)
    with Consumer(cluster.address, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("read", 0)])
        got = []
        assert wait_until(
            lambda: (
                got.extend(r.value for r in consumer.poll_records(timeout_ms=50)) or len(got) >= 30
            )
        )
    assert served, "the consumer read from the bulk listener"
    # The same with the bulk listener gone: the gateway's gRPC path serves it.
    node.bulk.stop()
    with Consumer(cluster.address, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("read", 0)])
        values = []
        assert wait_until(
            lambda: (
                values.extend(r.value for r in consumer.poll_records(timeout_ms=50))
                or len(values) >= len(expected)
            )
        )
    assert values == expected
    # Forcing the gRPC path never touches a bulk listener.
    with Consumer(cluster.address, auto_offset_reset="earliest", fetch_transport="grpc") as c:
        c.assign([TopicPartition("read", 0)])
        assert c.poll_records(timeout_ms=5000)


def _decode(records):
    from seglog.records import iter_records

    return list(iter_records(bytes(records)))


def _raw_request(
    grant_bytes, signature, topic, offset, partition=0, version=bulk_wire.BULK_VERSION
):
    request = bulk_pb2.BulkFetchRequest(version=version, grant=grant_bytes, signature=signature)
    request.fetch.max_bytes = 1 << 20
    request.fetch.partitions.add(
        topic=topic, partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20
    )
    return request


def _ask(address, request):
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        bulk_wire.send_message(sock, request)
        answer = bulk_wire.recv_message(sock, bulk_pb2.BulkFetchChunk)
        closed = bulk_wire.recv_message(sock, bulk_pb2.BulkFetchChunk) is None
    return answer, closed


def test_forged_expired_misdirected_and_overreaching_grants_are_refused(cluster):
    cluster.admin.create_topic("guarded", 2, 1)
    for p in (0, 1):
        cluster.client.produce("guarded", {p: make_batch([b"secret"])})
    response = cluster.stub.FetchGrants(
        bulk_pb2.FetchGrantsRequest(
            partitions=[common_pb2.FetchPartition(topic="guarded", partition=0, fetch_offset=0)]
        ),
        timeout=10,
    )
    [grant] = response.grants
    node = next(n for n in cluster.nodes.values() if n.config.node_id == grant.node_id)
    other = next(n for n in cluster.nodes.values() if n.config.node_id != grant.node_id)
    good, closed = _ask(
        grant.bulk_address, _raw_request(grant.grant, grant.signature, "guarded", 0)
    )
    assert good.error == 0 and good.records_length > 0 and not closed
    forged = bytearray(grant.grant)
    forged[-1] ^= 1  # e.g. another min offset, or a longer expiry
    cases = [
        (_raw_request(bytes(forged), grant.signature, "guarded", 0), node, "does not verify"),
        (_raw_request(grant.grant, grant.signature, "guarded", 0), other, "issued for node"),
        (
            _raw_request(grant.grant, grant.signature, "guarded", 0, partition=1),
            node,
            "not granted",
        ),
        (_raw_request(grant.grant, grant.signature, "other", 0), node, "not granted"),
        (
            _raw_request(
                grant.grant,
                grant.signature,
                "guarded",
                0,
                version=bulk_wire.BULK_PRODUCE_VERSION + 1,
            ),
            node,
            "version",
        ),
    ]
    for request, target, reason in cases:
        answer, closed = _ask(target.bulk_address, request)
        assert answer.end and common_pb2.ErrorCode.Name(answer.error) == "INVALID_REQUEST"
        assert reason in answer.error_message and closed
    # Below the granted offset: produce more, ask for a grant from 1, read from 0.
    cluster.client.produce("guarded", {0: make_batch([b"more"])})
    later = cluster.stub.FetchGrants(
        bulk_pb2.FetchGrantsRequest(
            partitions=[common_pb2.FetchPartition(topic="guarded", partition=0, fetch_offset=1)]
        ),
        timeout=10,
    ).grants[0]
    answer, closed = _ask(
        later.bulk_address, _raw_request(later.grant, later.signature, "guarded", 0)
    )
    assert "below the granted 1" in answer.error_message and closed


def test_an_expired_grant_is_refused(tmp_path):
    cluster = LocalCluster(tmp_path, nodes=1, fetch_grant_ttl_ms=1)
    try:
        cluster.admin.create_topic("brief", 1, 1)
        cluster.client.produce("brief", {0: make_batch([b"x"])})
        [grant] = cluster.stub.FetchGrants(
            bulk_pb2.FetchGrantsRequest(
                partitions=[common_pb2.FetchPartition(topic="brief", partition=0)]
            ),
            timeout=10,
        ).grants
        assert wait_until(lambda: time.time_ns() // 1_000_000 > grant.expires_at_ms)
        answer, closed = _ask(
            grant.bulk_address, _raw_request(grant.grant, grant.signature, "brief", 0)
        )
        assert "expired" in answer.error_message and closed
    finally:
        cluster.close()


def test_a_node_lost_mid_transfer_delivers_no_partial_batch(cluster):
    cluster.admin.create_topic("cut", 1, 1)
    for _ in range(60):  # ~48 MB: more than the loopback socket buffers hold
        cluster.client.produce("cut", {0: make_batch([b"y" * 200_000] * 4)})
    node = cluster.leader_of("cut", 0)
    reader = _reader(cluster)
    tp = TopicPartition("cut", 0)
    by_grant, _ = reader.route([(tp, 0)])
    [(grant, _)] = by_grant.values()
    request = common_pb2.FetchRequest(max_wait_ms=0, max_bytes=64 << 20)
    request.partitions.add(topic="cut", partition=0, fetch_offset=0, partition_max_bytes=64 << 20)
    answer = reader.send(grant, request).receive()
    first = next(answer)  # one whole chunk arrived
    node.bulk.stop()  # the node's listener goes away mid-answer
    received = [first]
    with pytest.raises(BulkFetchError):
        for message in answer:
            received.append(message)
    for message in received:  # every chunk handed out is whole batches
        assert bytes(message.records) and _decode(message.records)
    reader.close()
    # A consumer meeting the same gets every record once, from the gateway.
    with Consumer(cluster.address, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        offsets = []
        assert wait_until(
            lambda: (
                offsets.extend(r.offset for r in consumer.poll_records(timeout_ms=50))
                or len(offsets) >= 240
            )
        )
    assert offsets == list(range(240))


@pytest.mark.parametrize(
    "record_bytes",
    [30_000, 1_000],  # slices past COPY_BELOW_BYTES go by sendfile, smaller ones are copied
)
def test_a_segment_deleted_during_a_transfer_is_still_sent_whole(
    cluster, record_bytes, monkeypatch
):
    topic = f"retained-{record_bytes}"
    cluster.admin.create_topic(topic, 1, 1, configs={"segment.bytes": "100000"})
    per_batch = max(1, (COPY_BELOW_BYTES // 2) // record_bytes)
    for _ in range(10):
        cluster.client.produce(topic, {0: make_batch([b"z" * record_bytes] * per_batch)})
    node = cluster.leader_of(topic, 0)
    log = node.logs.get_log(topic, 0)
    first_segment = log.segments[0]
    expected = first_segment.log.read(0, first_segment.size)
    max_bytes = (COPY_BELOW_BYTES - 1) if record_bytes < COPY_BELOW_BYTES else 1 << 20
    [state] = node.replicas.fetch_states([(topic, 0, 0, max_bytes, -1, -1)])
    chunk = next(iter(node.replicas.read_chunks([state], max_bytes)))  # the first segment
    log.delete_segments([first_segment])  # retention takes it out of the log meanwhile
    assert not first_segment.log.path.name.endswith(".log")
    by_sendfile = []
    real_write_to = FileRecords.write_to
    monkeypatch.setattr(
        FileRecords,
        "write_to",
        lambda self, *args: by_sendfile.append(args) or real_write_to(self, *args),
    )
    sender, receiver = socket.socketpair()
    with sender, receiver:
        answer = AnswerWriter(sender)
        send_chunk(answer, chunk)
        answer.flush()
        header = bulk_wire.recv_message(receiver, bulk_pb2.BulkFetchChunk)
        data = bytearray(header.records_length)
        bulk_wire.recv_exactly_into(receiver, memoryview(data))
    assert bytes(data) == expected[: header.records_length] and header.records_length > 0
    assert bool(by_sendfile) == (header.records_length >= COPY_BELOW_BYTES)


def test_the_node_copies_no_record_bytes_in_user_space(cluster, monkeypatch):
    cluster.admin.create_topic("zero-copy", 1, 1)
    for _ in range(16):
        cluster.client.produce("zero-copy", {0: make_batch([b"q" * 60_000] * 4)})
    read_bytes = []
    real_read = FileRecords.read
    monkeypatch.setattr(
        FileRecords,
        "read",
        lambda self, position, size: read_bytes.append(size) or real_read(self, position, size),
    )
    reader = _reader(cluster)
    served = _bulk_fetch(reader, TopicPartition("zero-copy", 0), 0, 8 << 20)
    total = sum(len(m.records) for m in served)
    assert total > 3_000_000
    # Only batch headers are read (to find where the bytes end); the records go by sendfile.
    assert sum(read_bytes) < total // 100
    reader.close()


def _closed_by_peer(conn: socket.socket) -> bool:
    try:
        return conn.recv(1) == b""
    except ConnectionResetError:
        return True


def test_idle_strangers_neither_keep_nor_take_the_bulk_slots(cluster):
    """300 connections from one address that never send a request: the node holds at most
    16 of them, and a consumer from another address reads through the bulk path meanwhile; a
    stranger's connection is closed at its first-request deadline. (Before: all 256 slots
    taken for as long as the strangers liked, legitimate bulk fetches reset, a thread per
    connection.)"""
    _fill(cluster, "guarded")
    node = cluster.leader_of("guarded", 0)
    host, port = node.bulk.address.rsplit(":", 1)

    def stranger(source: str) -> socket.socket:
        return socket.create_connection((host, int(port)), timeout=30, source_address=(source, 0))

    strangers = [stranger("127.0.0.2") for _ in range(300)]
    try:
        assert wait_until(lambda: node.bulk.refused_connections == 300 - 16)
        assert node.bulk._unverified == {"127.0.0.2": 16}
        served = []
        real = node.bulk._answer
        node.bulk._answer = lambda conn, request, *peer: (
            served.append(1) or real(conn, request, *peer)
        )
        with Consumer(cluster.address, auto_offset_reset="earliest") as consumer:
            consumer.assign([TopicPartition("guarded", 0)])
            got = []
            assert wait_until(
                lambda: (
                    got.extend(r.value for r in consumer.poll_records(timeout_ms=50))
                    or len(got) >= 150
                )
            )
        assert served, "the consumer read from the bulk listener"
        refused = strangers[16:]  # accepted in order: the first 16 are held
        assert all(_closed_by_peer(conn) for conn in refused)
        # The deadline (--bulk-first-request-timeout-ms), on a connection from a third address.
        node.bulk.first_request_timeout_s = 0.5
        late = stranger("127.0.0.3")
        strangers.append(late)
        assert _closed_by_peer(late)
        assert wait_until(lambda: "127.0.0.3" not in node.bulk._unverified)
    finally:
        for conn in strangers:
            conn.close()


def test_records_of_a_busy_partition_do_not_wait_for_an_idle_nodes_long_poll(cluster):
    """Each node's answer is taken as it comes (Kafka's fetcher): a consumer reading a
    partition on each node, one of them idle, gets the other's records at once. A round that
    waited for every node's answer held them behind the idle node's long poll, here 30 s."""
    cluster.admin.create_topic("uneven", 2, 1)
    leaders = {cluster.gateway.registry.route("uneven", p).leader for p in (0, 1)}
    assert len(leaders) == 2  # one partition on each node
    with Consumer(cluster.address, fetch_transport="bulk", fetch_max_wait_ms=30_000) as consumer:
        consumer.assign([TopicPartition("uneven", 0), TopicPartition("uneven", 1)])
        consumer.seek_to_end()
        got: list[bytes] = []
        for i in range(5):
            assert cluster.client.produce("uneven", {0: make_batch([b"v%d" % i])})[0].error == 0
            assert wait_until(
                lambda i=i: (
                    got.extend(r.value for r in consumer.poll_records(timeout_ms=50))
                    or len(got) > i
                ),
                timeout_s=10,
            ), f"record {i} did not arrive within 10 s (idle partition's long poll: 30 s)"
        assert got == [b"v%d" % i for i in range(5)]
