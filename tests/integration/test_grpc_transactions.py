"""seglog's own transactional Producer over gRPC (the TransactionCoordinator service, the same
coordinator core the Kafka port's clients use): commit and abort seen by seglog's
read_committed and read_uncommitted Consumers and by librdkafka's read_committed consumer,
zombie fencing by a second producer of one transactional id (the first becomes unusable), a
consume-transform-produce loop with send_offsets_to_transaction, a timeout's abort, and the
coordinator's Describe/List calls."""

from __future__ import annotations

import grpc
import pytest

from seglog.client import ConsumerGroupMetadata, TopicPartition
from seglog.client.consumer import Consumer
from seglog.client.producer import Producer
from seglog.client.transactions import TransactionStateError
from seglog.coordinator_errors import ProducerFencedError
from seglog.errors import (
    IllegalGenerationError,
    InvalidConfigError,
    InvalidProducerEpochError,
    PermissionDeniedError,
)
from seglog.records.batch import RecordBatch
from seglog.rpc.status import error_from_rpc
from seglog.v1 import transactions_pb2, transactions_pb2_grpc
from tests.cluster import cli_in_process, drain
from tests.kafka_transactions import (
    ABORTING,
    TIMEOUT_S,
    described,
    read_to_end,
    transactions_cluster,
)
from tests.waiting import wait_until

FENCED = (ProducerFencedError, InvalidProducerEpochError)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = transactions_cluster(tmp_path_factory.mktemp("grpc-transactions"))
    yield c
    c.close()


def transactional(cluster, transactional_id, **config):
    return Producer(cluster.address, transactional_id=transactional_id, linger_ms=5, **config)


def read_all(cluster, topic, isolation_level, expected):
    with Consumer(cluster.address, isolation_level=isolation_level) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning(TopicPartition(topic, 0))
        return [r.value for r in drain(consumer, expected, timeout_s=30)]


def batches(log) -> list[RecordBatch]:
    """Every batch of every segment of the log, in offset order."""
    out = []
    for segment in log.segments:
        for found in segment.log.batches(0):
            out.append(RecordBatch(segment.log.read(found.position, found.header.size_in_bytes)))
    return out


def test_a_transactional_id_needs_idempotence():
    with pytest.raises(InvalidConfigError):
        Producer("127.0.0.1:1", transactional_id="t", enable_idempotence=False)
    with pytest.raises(InvalidConfigError):
        Producer("127.0.0.1:1", transactional_id="t", acks=1)


def test_commit_and_abort_reach_read_committed_and_read_uncommitted_readers(cluster):
    cluster.admin.create_topic("grpc-txn", 1, 3)
    with transactional(cluster, "grpc-commits") as producer:
        with pytest.raises(TransactionStateError):
            producer.begin_transaction()  # before init_transactions
        producer.init_transactions(TIMEOUT_S)
        for values, commit in (
            ([b"c0", b"c1", b"c2"], True),
            ([b"a0", b"a1"], False),
            ([b"end"], True),
        ):
            producer.begin_transaction()
            for value in values:
                producer.send("grpc-txn", value, partition=0)
            if commit:
                producer.commit_transaction(TIMEOUT_S)
            else:
                producer.abort_transaction(TIMEOUT_S)
        state = described(cluster, "grpc-commits")
    assert wait_until(lambda: described(cluster, "grpc-commits").state == "CompleteCommit", 30)
    committed = [b"c0", b"c1", b"c2", b"end"]
    assert read_all(cluster, "grpc-txn", "read_committed", 4) == committed
    assert read_all(cluster, "grpc-txn", "read_uncommitted", 6) == [
        b"c0",
        b"c1",
        b"c2",
        b"a0",
        b"a1",
        b"end",
    ]
    assert read_to_end(cluster, "grpc-txn", "read_committed") == committed
    # The batches are the transactional id's, as a Kafka producer's are.
    headers = [b.header for b in batches(cluster.log("grpc-txn", 0))]
    assert {(h.producer_id, h.is_transactional) for h in headers} == {(state.producer_id, True)}
    assert sum(h.is_control for h in headers) == 3  # COMMIT, ABORT, COMMIT

    # The coordinator's Describe and List on the gRPC API.
    stub = transactions_pb2_grpc.TransactionCoordinatorStub(cluster.channel)
    answer = stub.DescribeTransactions(
        transactions_pb2.TxnDescribeRequest(transactional_id="grpc-commits"), timeout=10
    )
    assert (answer.transaction.state, answer.transaction.producer_id) == (
        "CompleteCommit",
        state.producer_id,
    )
    listed = stub.ListTransactions(
        transactions_pb2.TxnListRequest(states=["CompleteCommit", "Nowhere"], min_duration_ms=-1),
        timeout=10,
    )
    assert "grpc-commits" in {t.transactional_id for t in listed.transactions}
    assert list(listed.unknown_states) == ["Nowhere"]


def test_a_second_producer_of_the_id_fences_the_first_for_good(cluster):
    cluster.admin.create_topic("grpc-zombie", 1, 3)
    first = transactional(cluster, "grpc-zombie")
    second = transactional(cluster, "grpc-zombie")
    try:
        first.init_transactions(TIMEOUT_S)
        first.begin_transaction()
        first.send("grpc-zombie", b"zombie", partition=0)
        first.flush(TIMEOUT_S)
        second.init_transactions(TIMEOUT_S)  # aborts the first's transaction, bumps the epoch
        with pytest.raises(FENCED):
            first.commit_transaction(TIMEOUT_S)
        with pytest.raises(FENCED):
            first.begin_transaction()  # unusable from now on, as Kafka's producer
        second.begin_transaction()
        second.send("grpc-zombie", b"alive", partition=0)
        second.commit_transaction(TIMEOUT_S)
        assert wait_until(lambda: described(cluster, "grpc-zombie").state == "CompleteCommit")
        assert read_all(cluster, "grpc-zombie", "read_committed", 1) == [b"alive"]
    finally:
        first.close(0)
        second.close()


def test_consume_transform_produce_commits_output_and_offsets_together(cluster):
    """Two rounds of read 3 -> write them upper-cased + the group's offsets, the first
    committed, the second aborted: the output has the first round only, and the group's
    committed offset is the first round's position."""
    cluster.admin.create_topic("grpc-eos-in", 1, 3)
    cluster.admin.create_topic("grpc-eos-out", 1, 3)
    tp_in = TopicPartition("grpc-eos-in", 0)
    with Producer(cluster.address) as plain:
        for i in range(6):
            plain.send("grpc-eos-in", b"in%d" % i, partition=0)
    consumer = Consumer(
        cluster.address, group_id="grpc-eos", isolation_level="read_committed", max_poll_records=3
    )
    producer = transactional(cluster, "grpc-eos-loop")
    try:
        consumer.assign([tp_in])
        consumer.seek_to_beginning(tp_in)
        producer.init_transactions(TIMEOUT_S)
        for commit in (True, False):
            got = drain(consumer, 3, timeout_s=30)
            assert len(got) == 3
            producer.begin_transaction()
            for record in got:
                producer.send("grpc-eos-out", record.value.upper(), partition=0)
            metadata = consumer.group_metadata()
            assert metadata == ConsumerGroupMetadata("grpc-eos")  # assigned: no member
            producer.send_offsets_to_transaction(
                {tp_in: consumer.position(tp_in)}, metadata, TIMEOUT_S
            )
            if commit:
                producer.commit_transaction(TIMEOUT_S)
            else:
                producer.abort_transaction(TIMEOUT_S)
        assert wait_until(lambda: described(cluster, "grpc-eos-loop").state == "CompleteAbort", 30)
        committed = consumer.committed(tp_in)[tp_in]
        assert committed is not None and committed.offset == 3
    finally:
        consumer.close(autocommit=False)
        producer.close()
    assert read_all(cluster, "grpc-eos-out", "read_committed", 3) == [b"IN0", b"IN1", b"IN2"]
    assert read_to_end(cluster, "grpc-eos-out", "read_committed") == [b"IN0", b"IN1", b"IN2"]


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(cluster):
    cluster.admin.create_topic("grpc-times-out", 1, 3)
    with transactional(cluster, "grpc-times-out", transaction_timeout_ms=1000) as producer:
        producer.init_transactions(TIMEOUT_S)
        producer.begin_transaction()
        producer.send("grpc-times-out", b"late", partition=0)
        producer.flush(TIMEOUT_S)
        assert wait_until(lambda: described(cluster, "grpc-times-out").state in ABORTING, 10)
        with pytest.raises(FENCED):
            producer.commit_transaction(TIMEOUT_S)
    assert read_all(cluster, "grpc-times-out", "read_uncommitted", 1) == [b"late"]
    assert read_to_end(cluster, "grpc-times-out", "read_committed") == []


def test_verify_partitions_is_for_gateways_only(cluster):
    """The gateways' own question (VerifyPartitions) needs their certificate or ClusterAction:
    this module's principal has neither."""
    stub = transactions_pb2_grpc.TransactionCoordinatorStub(cluster.channel)
    request = transactions_pb2.TxnVerifyRequest(
        producer=transactions_pb2.TxnProducer(transactional_id="grpc-commits")
    )
    request.topics.add(topic="grpc-txn", partitions=[0])
    with pytest.raises(grpc.RpcError) as refused:
        stub.VerifyPartitions(request, timeout=10)
    assert isinstance(error_from_rpc(refused.value), PermissionDeniedError)


def test_a_compacted_topic_loses_markers_with_no_data_left(cluster):
    """Transactions written by seglog's Producer into a compacted topic (markers by the
    coordinator through the nodes' WriteTxnMarkers), cleaned by the leader's own cleaner:
    the superseded and aborted records go first, their markers in the passes after (the
    delete horizon is 0 here); read_committed readers see the same records throughout."""
    configs = {
        "cleanup.policy": "compact",
        "delete.retention.ms": "0",
        "segment.bytes": "400",
        # The node's own cleaner thread never finds it dirty enough: only this test's passes
        # (the same Cleaner) clean it, one at a time.
        "min.cleanable.dirty.ratio": "1",
    }
    cluster.admin.create_topic("grpc-compacted", 1, 3, configs=configs)
    with transactional(cluster, "grpc-compactor") as producer:
        producer.init_transactions(TIMEOUT_S)
        for key, value, commit in (
            (b"k0", b"old", True),
            (b"k1", b"aborted", False),
            (b"k2", b"kept", True),  # the producer's last batch: it stays
        ):
            producer.begin_transaction()
            producer.send("grpc-compacted", value, key=key, partition=0)
            if commit:
                producer.commit_transaction(TIMEOUT_S)
            else:
                producer.abort_transaction(TIMEOUT_S)
    assert wait_until(lambda: described(cluster, "grpc-compactor").state == "CompleteCommit")
    with Producer(cluster.address) as plain:  # supersedes k0, and fills a segment or two
        for i in range(6):
            plain.send("grpc-compacted", b"new" if i == 0 else b"x", key=b"k0", partition=0)
    log = cluster.log("grpc-compacted", 0)
    assert wait_until(lambda: log.high_watermark == log.log_end_offset)
    log.roll()
    expected = read_all(cluster, "grpc-compacted", "read_committed", 8)
    markers_before = sum(h.is_control for h in (b.header for b in batches(log)))
    assert markers_before == 3
    cleaner = cluster.leader_of("grpc-compacted", 0).logs.cleaner
    for _ in range(3):  # data; the markers' delete horizons; the markers
        cleaner.clean(log, log.log_start_offset, log.active_segment.base_offset)
    left = [b.header for b in batches(log)]
    # Only the marker of the transaction whose record (k2) is still there stays.
    assert [(h.is_control, h.record_count) for h in left if h.is_control] == [(True, 1)]
    values = [r.value for b in batches(log) for r in b.records() if not b.header.is_control]
    assert b"old" not in values and b"aborted" not in values and b"kept" in values
    assert read_all(cluster, "grpc-compacted", "read_committed", 2) == [b"kept", b"x"]
    assert len(expected) == 8


def test_a_zombie_consumers_offsets_make_the_transaction_abortable(cluster):
    """send_offsets_to_transaction with the member's real group metadata is accepted; with a
    generation the group has moved past (a zombie consumer's, KIP-447) it is refused
    ILLEGAL_GENERATION, the transaction can then only be aborted, and the producer goes on."""
    cluster.admin.create_topic("grpc-zombie-in", 1, 3)
    tp_in = TopicPartition("grpc-zombie-in", 0)
    with Producer(cluster.address) as plain:
        plain.send("grpc-zombie-in", b"r", partition=0).get(timeout=TIMEOUT_S)
    consumer = Consumer(cluster.address, group_id="grpc-zombie-group", auto_offset_reset="earliest")
    producer = transactional(cluster, "grpc-zombie-consumer")
    try:
        consumer.subscribe(["grpc-zombie-in"])
        assert len(drain(consumer, 1, timeout_s=30)) == 1
        metadata = consumer.group_metadata()
        assert metadata.generation_id >= 1 and metadata.member_id
        producer.init_transactions(TIMEOUT_S)
        producer.begin_transaction()
        producer.send_offsets_to_transaction({tp_in: 1}, metadata, TIMEOUT_S)
        producer.commit_transaction(TIMEOUT_S)
        stale = metadata._replace(generation_id=metadata.generation_id - 1)
        producer.begin_transaction()
        with pytest.raises(IllegalGenerationError):
            producer.send_offsets_to_transaction({tp_in: 1}, stale, TIMEOUT_S)
        with pytest.raises(TransactionStateError):
            producer.commit_transaction(TIMEOUT_S)
        producer.abort_transaction(TIMEOUT_S)
        producer.begin_transaction()  # usable again
        producer.abort_transaction(TIMEOUT_S)
    finally:
        consumer.close(autocommit=False)
        producer.close()


def test_the_cli_lists_and_describes_transactions(cluster, capsys, monkeypatch):
    cluster.admin.create_topic("grpc-cli-txn", 2, 3)
    with transactional(cluster, "grpc-cli") as producer:
        producer.init_transactions(TIMEOUT_S)
        producer.begin_transaction()
        producer.send("grpc-cli-txn", b"open", partition=1)
        producer.flush(TIMEOUT_S)
        state = described(cluster, "grpc-cli")
        code, out, err = cli_in_process(
            cluster, capsys, monkeypatch, "transactions", "list", "--state", "Ongoing"
        )
        assert code == 0, err
        assert f"grpc-cli\t{state.producer_id}\tOngoing" in out.splitlines()
        code, out, err = cli_in_process(
            cluster, capsys, monkeypatch, "transactions", "describe", "grpc-cli"
        )
        assert code == 0, err
        fields = out.strip().split("\t")
        assert fields[:3] == ["grpc-cli", "Ongoing", f"producer {state.producer_id} epoch 0"]
        assert fields[-1] == "grpc-cli-txn-1"
        producer.abort_transaction(TIMEOUT_S)
    code, out, err = cli_in_process(
        cluster, capsys, monkeypatch, "transactions", "describe", "never-used"
    )
    assert code != 0 and "never-used" in err
