"""Transactions on the storage nodes, driven through the nodes' own RPCs (the coordinator that
calls WriteTxnMarkers is the gateway's, built beside this): transactional batches appended,
COMMIT/ABORT markers written, replicated and indexed in Kafka's formats; read_committed
fetches stop at the last stable offset and list the aborted transactions, on the node and
through the gateway's Kafka listener (librdkafka as the reader); followers hold the same LSO
and byte-identical `.txnindex`; a restarted node rebuilds a torn index; Kafka's own
kafka-dump-log reads the files."""

from __future__ import annotations

import time

import confluent_kafka
import grpc
import pytest
from kafka.protocol.admin import DescribeProducersRequest, DescribeProducersResponse

from devtools import apache_kafka
from seglog.records import RecordBatchBuilder
from seglog.records.control import ControlMarker, build_marker
from seglog.v1 import common_pb2, storage_pb2, storage_pb2_grpc
from tests.cluster import LocalCluster
from tests.kafka_wire import KafkaWire
from tests.waiting import wait_until

FAST = {"replica.fetch.wait.max.ms": "100", "replica.fetch.backoff.ms": "100"}
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("txn-node"), nodes=2, node_configs=FAST)
    yield c
    c.close()


class Node:
    """One node's storage RPCs over a channel of its own."""

    def __init__(self, node) -> None:
        self.channel = grpc.insecure_channel(node.address)
        self.stub = storage_pb2_grpc.StorageNodeStub(self.channel)

    def __enter__(self) -> Node:
        return self

    def __exit__(self, *exc) -> None:
        self.channel.close()

    def append(self, topic: str, batch: bytes) -> common_pb2.PartitionResult:
        request = common_pb2.ProduceRequest(
            topic=topic,
            partitions=[common_pb2.PartitionRecords(partition=0, records=batch)],
            acks=-1,
            timeout_ms=10_000,
        )
        return self.stub.Append(request, timeout=10).partitions[0]

    def fetch(self, topic: str, offset: int, isolation: int) -> list[common_pb2.FetchResponse]:
        request = common_pb2.FetchRequest(
            partitions=[
                common_pb2.FetchPartition(
                    topic=topic, partition=0, fetch_offset=offset, partition_max_bytes=1 << 20
                )
            ],
            max_bytes=1 << 20,
            isolation_level=isolation,
        )
        return list(self.stub.Fetch(request, timeout=10))

    def markers(self, topic: str, *markers: tuple[int, int, bool, int]):
        request = storage_pb2.WriteTxnMarkersRequest(
            markers=[
                storage_pb2.TxnMarker(
                    producer_id=pid,
                    producer_epoch=epoch,
                    committed=committed,
                    coordinator_epoch=coordinator_epoch,
                    partitions=[storage_pb2.HostedPartitionRef(topic=topic, partition=0)],
                )
                for pid, epoch, committed, coordinator_epoch in markers
            ],
            timeout_ms=10_000,
        )
        return self.stub.WriteTxnMarkers(request, timeout=15)

    def latest(self, topic: str, isolation: int) -> int:
        asked = common_pb2.ListOffsetsRequest(
            partitions=[
                common_pb2.ListOffsetsPartition(
                    topic=topic, partition=0, timestamp=-1, isolation_level=isolation
                )
            ]
        )
        return self.stub.ListOffsets(asked, timeout=10).partitions[0].offset


def txn_batch(producer_id: int, values: list[bytes], *, epoch: int = 0, sequence: int = 0):
    builder = RecordBatchBuilder(
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        is_transactional=True,
    )
    now = time.time_ns() // 1_000_000
    for value in values:
        builder.append(None, value, now)
    return builder.build()


def offsets_of(answers: list[common_pb2.FetchResponse]) -> list[int]:
    """The last offset of each batch answered (control batches included)."""
    from seglog.records.batch import RecordBatch

    out = []
    for answer in answers:
        view, pos = memoryview(answer.records), 0
        while pos < len(view):
            batch = RecordBatch(view[pos:])
            out.append(batch.header.last_offset)
            pos += batch.size_in_bytes
    return out


def errors_of(response: storage_pb2.WriteTxnMarkersResponse) -> list[str]:
    return [
        common_pb2.ErrorCode.Name(p.error) for marker in response.markers for p in marker.partitions
    ]


def follower_of(cluster, topic: str):
    leader = cluster.leader_of(topic, 0)
    return next(n for n in cluster.nodes.values() if n is not leader)


def caught_up(cluster, topic: str) -> bool:
    leader_log = cluster.log(topic, 0)
    follower_log = follower_of(cluster, topic).logs.get_log(topic, 0)
    return (
        follower_log.log_end_offset == leader_log.log_end_offset
        and follower_log.high_watermark == leader_log.high_watermark
    )


def test_read_committed_stops_at_open_transactions_and_lists_the_aborted(cluster):
    cluster.admin.create_topic("txn-reads", 1, 2)
    with Node(cluster.leader_of("txn-reads", 0)) as node:
        assert node.append("txn-reads", txn_batch(1000, [b"a0", b"a1", b"a2"])).error == 0
        assert node.append("txn-reads", txn_batch(2000, [b"c0", b"c1"])).error == 0
        # Both open: read_uncommitted reads to the high watermark, read_committed nothing.
        uncommitted = node.fetch("txn-reads", 0, READ_UNCOMMITTED)
        assert offsets_of(uncommitted) == [2, 4]
        assert uncommitted[-1].high_watermark == 5 and uncommitted[-1].last_stable_offset == 0
        committed = node.fetch("txn-reads", 0, READ_COMMITTED)
        assert offsets_of(committed) == [] and committed[-1].last_stable_offset == 0
        assert node.latest("txn-reads", READ_COMMITTED) == 0
        assert node.latest("txn-reads", READ_UNCOMMITTED) == 5
        # 1000 aborts (marker at 5), 2000 commits (marker at 6).
        written = node.markers("txn-reads", (1000, 0, False, 3), (2000, 0, True, 3))
        assert errors_of(written) == ["NONE", "NONE"]
        assert [m.producer_id for m in written.markers] == [1000, 2000]
        committed = node.fetch("txn-reads", 0, READ_COMMITTED)
        assert offsets_of(committed) == [2, 4, 5, 6]
        assert committed[-1].last_stable_offset == 7
        aborted = [
            (a.producer_id, a.first_offset) for c in committed for a in c.aborted_transactions
        ]
        assert aborted == [(1000, 0)]
        # From past the aborted transaction's marker: none listed.
        later = node.fetch("txn-reads", 6, READ_COMMITTED)
        assert [a for c in later for a in c.aborted_transactions] == []
        # A third transaction opens at 7: the LSO stays there, the HW moves past it.
        assert node.append("txn-reads", txn_batch(3000, [b"o0"])).error == 0
        assert node.latest("txn-reads", READ_COMMITTED) == 7
        assert node.latest("txn-reads", READ_UNCOMMITTED) == 8
        assert offsets_of(node.fetch("txn-reads", 7, READ_COMMITTED)) == []
        # An older epoch's marker is refused and writes nothing.
        assert node.append("txn-reads", txn_batch(1000, [b"n0"], epoch=1)).error == 0
        stale = node.markers("txn-reads", (1000, 0, True, 3))
        assert errors_of(stale) == ["INVALID_PRODUCER_EPOCH"]
        assert cluster.log("txn-reads", 0).log_end_offset == 9
        # Clients cannot write markers themselves.
        forged = build_marker(3000, 0, ControlMarker(True, 3), timestamp_ms=int(time.time() * 1000))
        with pytest.raises(grpc.RpcError) as refused:
            node.append("txn-reads", forged)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "control batches" in refused.value.details()
        described = node.stub.DescribeProducers(
            storage_pb2.DescribeProducersRequest(
                partitions=[storage_pb2.HostedPartitionRef(topic="txn-reads", partition=0)]
            ),
            timeout=10,
        )
        producers = {p.producer_id: p for p in described.partitions[0].producers}
        assert (producers[2000].coordinator_epoch, producers[2000].current_txn_start_offset) == (
            3,
            -1,
        )
        assert producers[3000].current_txn_start_offset == 7
        assert producers[1000].current_txn_start_offset == 8  # epoch 1's transaction
    # The marker went to the follower like any batch: same LSO, same files.
    assert wait_until(lambda: caught_up(cluster, "txn-reads"), timeout_s=20)
    leader_log = cluster.log("txn-reads", 0)
    follower_log = follower_of(cluster, "txn-reads").logs.get_log("txn-reads", 0)
    assert follower_log.last_stable_offset == leader_log.last_stable_offset == 7
    leader_index = leader_log.segments[0].txn_index.path.read_bytes()
    assert len(leader_index) == 34
    assert follower_log.segments[0].txn_index.path.read_bytes() == leader_index
    assert follower_log.aborted_transactions(0, 9) == leader_log.aborted_transactions(0, 9)
    # Kafka's DescribeProducers through the gateway shows the same (kafka-transactions
    # describe-producers prints these columns).
    with KafkaWire(cluster.kafka_address) as kafka:
        request = DescribeProducersRequest[0](
            topics=[DescribeProducersRequest.TopicRequest(name="txn-reads", partition_indexes=[0])]
        )
        answer = kafka.request(request, 0, DescribeProducersResponse)
    shown = {
        p.producer_id: (p.coordinator_epoch, p.current_txn_start_offset)
        for p in answer.topics[0].partitions[0].active_producers
    }
    assert shown == {1000: (3, 8), 2000: (3, -1), 3000: (-1, 7)}


def test_librdkafka_read_committed_skips_aborted_and_open_transactions(cluster):
    """Through the gateway's Kafka listener and its fetch relay: the LSO and the aborted
    transactions reach a real client, which must drop the aborted records by them."""
    cluster.admin.create_topic("txn-kafka", 1, 2)
    with Node(cluster.leader_of("txn-kafka", 0)) as node:
        node.append("txn-kafka", txn_batch(4000, [b"aborted-0", b"aborted-1"]))
        node.append("txn-kafka", txn_batch(5000, [b"committed-0"]))
        node.append("txn-kafka", txn_batch(4000, [b"aborted-2"], sequence=2))
        assert errors_of(node.markers("txn-kafka", (4000, 0, False, 1), (5000, 0, True, 1))) == [
            "NONE",
            "NONE",
        ]
        node.append("txn-kafka", txn_batch(6000, [b"open-0"]))

    def read(isolation: str) -> list[bytes]:
        """Every record the client hands over until it reports the partition's end (the LSO
        for read_committed, the high watermark otherwise), then that end."""
        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": cluster.kafka_address,
                "group.id": f"txn-{isolation}",
                "auto.offset.reset": "earliest",
                "isolation.level": isolation,
                "enable.auto.commit": False,
                "enable.partition.eof": True,
            }
        )
        consumer.assign([confluent_kafka.TopicPartition("txn-kafka", 0, 0)])
        values: list[bytes] = []
        ended = []

        def at_end() -> bool:
            message = consumer.poll(0.2)
            if message is None:
                return False
            error = message.error()
            if error is None:
                values.append(message.value())
                return False
            assert error.code() == confluent_kafka.KafkaError._PARTITION_EOF, error
            ended.append(message.offset())
            return True

        try:
            assert wait_until(at_end, timeout_s=20, interval_s=0)
            low, high = consumer.get_watermark_offsets(
                confluent_kafka.TopicPartition("txn-kafka", 0), timeout=10, cached=False
            )
        finally:
            consumer.close()
        return values + [b"end=%d" % ended[0], b"high=%d" % high]

    assert read("read_committed") == [b"committed-0", b"end=6", b"high=6"]
    assert read("read_uncommitted") == [
        b"aborted-0",
        b"aborted-1",
        b"committed-0",
        b"aborted-2",
        b"open-0",
        b"end=7",
        b"high=7",
    ]


def test_a_restarted_follower_rebuilds_a_torn_txnindex(cluster):
    cluster.admin.create_topic("txn-torn", 1, 2)
    with Node(cluster.leader_of("txn-torn", 0)) as node:
        node.append("txn-torn", txn_batch(7000, [b"x"]))
        node.append("txn-torn", txn_batch(8000, [b"y"]))
        assert errors_of(node.markers("txn-torn", (7000, 0, False, 2))) == ["NONE"]
        node.append("txn-torn", txn_batch(9000, [b"z"]))  # open at 3, 8000's still open at 1
    assert wait_until(lambda: caught_up(cluster, "txn-torn"), timeout_s=20)
    follower = follower_of(cluster, "txn-torn")
    leader_index = cluster.log("txn-torn", 0).segments[0].txn_index.path.read_bytes()
    path = follower.logs.get_log("txn-torn", 0).segments[0].txn_index.path
    node_id = next(i for i, n in cluster.nodes.items() if n is follower)
    cluster.stop_node(node_id)
    path.write_bytes(path.read_bytes()[:20])  # a write torn by a crash
    restarted = cluster.start_node(node_id)
    log = restarted.logs.get_log("txn-torn", 0)
    assert path.read_bytes() == leader_index
    # The open transactions came back from the snapshot and the log: the LSO is 8000's.
    assert wait_until(lambda: log.high_watermark == 4, timeout_s=20)
    assert log.last_stable_offset == 1
    open_ = {p.producer_id: p.current_txn_start_offset for p in log.active_producers()}
    assert open_ == {7000: -1, 8000: 1, 9000: 3}


@pytest.mark.slow
def test_kafka_dump_log_reads_the_markers_and_txnindex(cluster):
    assert apache_kafka.installed(), apache_kafka.INSTALL_HINT
    cluster.admin.create_topic("txn-dump", 1, 1)
    with Node(cluster.leader_of("txn-dump", 0)) as node:
        node.append("txn-dump", txn_batch(11, [b"a", b"b"]))
        node.append("txn-dump", txn_batch(12, [b"c"]))
        assert errors_of(node.markers("txn-dump", (11, 0, False, 9), (12, 0, True, 9))) == [
            "NONE",
            "NONE",
        ]
    segment = cluster.log("txn-dump", 0).segments[0]
    done = apache_kafka.run_tool(
        "org.apache.kafka.tools.DumpLogSegments",
        "--files",
        f"{segment.log.path},{segment.txn_index.path}",
        "--deep-iteration",
    )
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert "isvalid: false" not in out
    assert "offset: 3 " in out and "endTxnMarker: ABORT coordinatorEpoch: 9" in out
    assert "endTxnMarker: COMMIT coordinatorEpoch: 9" in out
    assert "version: 0 producerId: 11 firstOffset: 0 lastOffset: 3 lastStableOffset: 2" in out


def test_a_new_leader_answers_the_same_lso_and_aborted_transactions(cluster):
    cluster.admin.create_topic("txn-failover", 1, 2)
    with Node(cluster.leader_of("txn-failover", 0)) as node:
        node.append("txn-failover", txn_batch(21, [b"a"]))
        node.append("txn-failover", txn_batch(22, [b"b"]))
        assert errors_of(node.markers("txn-failover", (21, 0, False, 5))) == ["NONE"]
        before = node.fetch("txn-failover", 0, READ_COMMITTED)
    assert [a.producer_id for c in before for a in c.aborted_transactions] == [21]
    assert before[-1].last_stable_offset == 1  # 22's transaction is open
    assert wait_until(lambda: caught_up(cluster, "txn-failover"), timeout_s=20)
    old_leader = cluster.leader_of("txn-failover", 0)
    old_id = next(i for i, n in cluster.nodes.items() if n is old_leader)
    cluster.stop_node(old_id)
    try:
        assert wait_until(
            lambda: cluster.gateway.registry.route("txn-failover", 0).leader not in (old_id, -1),
            timeout_s=20,
        )
        new_leader = cluster.leader_of("txn-failover", 0)
        with Node(new_leader) as node:
            assert wait_until(
                lambda: node.fetch("txn-failover", 0, READ_COMMITTED)[-1].error == 0, timeout_s=20
            )
            after = node.fetch("txn-failover", 0, READ_COMMITTED)
            assert after[-1].last_stable_offset == 1
            assert offsets_of(after) == offsets_of(before)
            assert [
                (a.producer_id, a.first_offset) for c in after for a in c.aborted_transactions
            ] == [(21, 0)]
            # The new leader ends 22's transaction: the LSO moves past its marker.
            assert errors_of(node.markers("txn-failover", (22, 0, True, 6))) == ["NONE"]
            assert node.latest("txn-failover", READ_COMMITTED) == 4
    finally:
        cluster.start_node(old_id)


def transactions_tool(cluster, *args: str) -> list[list[str]]:
    """`kafka-transactions` run against the gateway: the rows of the table it prints (its
    columns are tab-separated, padded with spaces)."""
    done = apache_kafka.run_tool(
        "org.apache.kafka.tools.TransactionsCommand",
        "--bootstrap-server",
        cluster.kafka_address,
        *args,
    )
    assert done.returncode == 0, (done.stdout.decode(), done.stderr.decode()[-3000:])
    lines = done.stdout.decode().splitlines()
    return [[cell.strip() for cell in line.rstrip("\t").split("\t")] for line in lines]


@pytest.mark.slow
def test_kafka_transactions_finds_a_hanging_transaction_and_aborts_it(cluster):
    """An operator's recovery from a hanging transaction (KIP-664), with Kafka's own tool: a
    transactional batch of a producer no coordinator knows (what a broker without KIP-890's
    verification could be left with) holds the LSO back; `describe-producers` shows its
    start, `find-hanging` names it, `abort` (by --start-offset, or by producer id and epochs)
    writes the ABORT marker through the gateway's WriteTxnMarkers, and the LSO moves past
    it."""
    assert apache_kafka.installed(), apache_kafka.INSTALL_HINT
    cluster.admin.create_topic("txn-hanging", 1, 2)
    with Node(cluster.leader_of("txn-hanging", 0)) as node:
        assert node.append("txn-hanging", txn_batch(9000, [b"a"])).error == 0
        node.append("txn-hanging", txn_batch(9001, [b"b", b"c"]))
        assert node.latest("txn-hanging", READ_COMMITTED) == 0
    where = ("--topic", "txn-hanging", "--partition", "0")
    header, *rows = transactions_tool(cluster, "describe-producers", *where)
    shown = {row[0]: dict(zip(header, row, strict=True)) for row in rows}
    assert shown["9000"]["CurrentTransactionStartOffset"] == "0"
    assert shown["9001"]["CurrentTransactionStartOffset"] == "1"
    # Any open transaction older than 0 minutes is looked up at the coordinators.
    header, *rows = transactions_tool(
        cluster, "find-hanging", *where, "--max-transaction-timeout", "0"
    )
    assert header[:6] == [
        "Topic",
        "Partition",
        "ProducerId",
        "ProducerEpoch",
        "CoordinatorEpoch",
        "StartOffset",
    ]
    assert sorted(row[:6] for row in rows) == [
        ["txn-hanging", "0", "9000", "0", "-1", "0"],
        ["txn-hanging", "0", "9001", "0", "-1", "1"],
    ]
    assert transactions_tool(cluster, "abort", *where, "--start-offset", "0") == []
    with Node(cluster.leader_of("txn-hanging", 0)) as node:
        # The marker follows 9001's batch (offsets 0, 1-2, marker 3): 9001 still holds the LSO.
        assert node.latest("txn-hanging", READ_COMMITTED) == 1
    assert cluster.log("txn-hanging", 0).aborted_transactions(0, 4)[0].producer_id == 9000
    header, *rows = transactions_tool(
        cluster, "find-hanging", *where, "--max-transaction-timeout", "0"
    )
    assert [row[2] for row in rows] == ["9001"]
    # The tool's other form names the producer itself (its epoch and coordinator epoch).
    abort_9001 = ("--producer-id", "9001", "--producer-epoch", "0", "--coordinator-epoch", "0")
    assert transactions_tool(cluster, "abort", *where, *abort_9001) == []
    with Node(cluster.leader_of("txn-hanging", 0)) as node:
        assert node.latest("txn-hanging", READ_COMMITTED) == 5  # past both markers (3, 4)
