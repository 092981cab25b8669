"""KIP-890's verification on seglog's own produce paths (issue 54), on a real 3-node cluster
(authorizer on): seglog's transactional Producer that skips AddPartitionsToTxn has its batch
refused INVALID_TXN_STATE and nothing written, through the gateway's gRPC Produce (which asks
the coordinator) and straight to the leader's bulk listener (whose node takes a client's
transactional batch only for a transaction already open in its partition: the refused request
then goes through the gateway); a fenced epoch is refused on both; a producer that adds its
partitions commits on both, its later batches of a transaction sent straight to the leaders.
The same through a gateway that does not coordinate the id: test_kafka_transactions_gateways.
"""

from __future__ import annotations

import socket
import time

import pytest

from seglog.client.producer import Producer
from seglog.coordinator_errors import InvalidTxnStateError, ProducerFencedError
from seglog.errors import InvalidProducerEpochError
from seglog.records import RecordBatchBuilder
from seglog.rpc import wire
from seglog.v1 import bulk_pb2, common_pb2
from tests.bulk_produce import exchange, produce_header
from tests.kafka_transactions import TIMEOUT_S, skip_adding, transactions_cluster
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(180)

FENCED = (ProducerFencedError, InvalidProducerEpochError)
TRANSPORTS = ("grpc", "auto")  # through the gateway; straight to the leaders' bulk listeners


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = transactions_cluster(tmp_path_factory.mktemp("txn-produce-verification"))
    yield c
    c.close()


def transactional(cluster, tid: str, transport: str) -> Producer:
    producer = Producer(
        cluster.address, transactional_id=tid, linger_ms=5, produce_transport=transport
    )
    producer.init_transactions(TIMEOUT_S)
    return producer


def direct(producer: Producer) -> int:
    return int(producer.metrics()["producer-metrics"]["direct-requests"])


def ends(cluster, topic: str, partitions: int) -> list[int]:
    return [cluster.log(topic, p).log_end_offset for p in range(partitions)]


def send_refused(producer: Producer, topic: str, partition: int) -> BaseException:
    future = producer.send(topic, b"unverified", partition=partition)
    producer.flush(TIMEOUT_S)
    with pytest.raises(Exception) as refused:
        future.get(timeout=TIMEOUT_S)
    return refused.value


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_partition_not_added_to_the_transaction_is_refused_and_not_written(cluster, transport):
    topic = f"unadded-{transport}"
    cluster.admin.create_topic(topic, 2, 3)
    with transactional(cluster, f"skips-adding-{transport}", transport) as producer:
        producer.begin_transaction()
        producer.send(topic, b"added", partition=0).get(timeout=TIMEOUT_S)  # added, written
        skip_adding(producer, topic)
        before = ends(cluster, topic, 2)
        error = send_refused(producer, topic, 1)
        assert isinstance(error, InvalidTxnStateError), repr(error)
        assert ends(cluster, topic, 2) == before
        assert direct(producer) == 0  # nothing was taken straight by a leader either


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_added_partition_commits_and_later_batches_go_straight_to_the_leader(cluster, transport):
    topic = f"added-{transport}"
    cluster.admin.create_topic(topic, 2, 3)
    with transactional(cluster, f"adds-{transport}", transport) as producer:
        for round_ in range(2):
            producer.begin_transaction()
            for i in range(3):  # three requests per partition, each flushed alone
                futures = [
                    producer.send(topic, b"%d-%d" % (round_, i), partition=p) for p in (0, 1)
                ]
                producer.flush(TIMEOUT_S)
                for future in futures:
                    future.get(timeout=TIMEOUT_S)
            producer.commit_transaction(TIMEOUT_S)
        # The first request of a transaction to a partition goes through the gateway (the
        # coordinator verifies it); the ones after it straight to the leader.
        assert direct(producer) == (0 if transport == "grpc" else 2 * 2 * 2)
    # Each partition: 6 records and 2 COMMIT markers (written once the commits are logged).
    assert wait_until(lambda: ends(cluster, topic, 2) == [8, 8], TIMEOUT_S), ends(cluster, topic, 2)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_fenced_epoch_is_refused_and_not_written(cluster, transport):
    topic = f"fenced-{transport}"
    tid = f"fenced-{transport}"
    cluster.admin.create_topic(topic, 2, 3)
    zombie = transactional(cluster, tid, transport)
    try:
        zombie.begin_transaction()
        zombie.send(topic, b"zombie", partition=0).get(timeout=TIMEOUT_S)
        skip_adding(zombie, topic)  # its coordinator calls would be refused first
        with transactional(cluster, tid, transport):  # a newer instance: the epoch bumps
            before = ends(cluster, topic, 2)
            # Partition 1, where the zombie never wrote: only the coordinator knows its
            # epoch is fenced (partition 0's abort marker would tell its node).
            error = send_refused(zombie, topic, 1)
            assert isinstance(error, FENCED), repr(error)
            assert ends(cluster, topic, 2) == before
    finally:
        zombie.close()


def test_a_node_takes_a_clients_transactional_batch_only_in_a_transaction_open_there(cluster):
    """The bulk listener itself, with the producer's own grant: a transactional batch that
    would begin a transaction in its partition is refused INVALID_TXN_STATE, nothing written
    (the connection stays); one of a transaction open there is written."""
    topic = "node-verifies"
    cluster.admin.create_topic(topic, 1, 3)
    leader = cluster.leader_of(topic, 0)
    [grant] = [
        g
        for g in cluster.stub.ProduceGrants(
            bulk_pb2.ProduceGrantsRequest(topics=[topic]), timeout=10
        ).grants
        if g.node_id == leader.config.node_id
    ]
    host, port = leader.bulk.address.rsplit(":", 1)
    with transactional(cluster, "node-verifies", "grpc") as producer:
        assert producer._transactions is not None and producer._transactions.producer
        pid, epoch = producer._transactions.producer

        def raw_send(sock, sequence: int):
            builder = RecordBatchBuilder(
                producer_id=pid,
                producer_epoch=epoch,
                base_sequence=sequence,
                is_transactional=True,
            )
            builder.append(None, b"raw-%d" % sequence, int(time.time() * 1000), None)
            request = wire.encode_produce_request(
                topic, -1, 5000, [(0, -1, [builder.build()])], transactional_id="node-verifies"
            )
            return exchange(sock, produce_header(request, grant.grant, grant.signature), request)

        with socket.create_connection((host, int(port)), timeout=10) as sock:
            producer.begin_transaction()
            answer = raw_send(sock, 0)  # no transaction of this producer open in the partition
            assert not answer.end
            assert common_pb2.ErrorCode.Name(answer.error) == "INVALID_TXN_STATE"
            assert cluster.log(topic, 0).log_end_offset == 0
            # The producer's own first batch (through the gateway, verified) opens it there.
            producer.send(topic, b"first", partition=0).get(timeout=TIMEOUT_S)
            answer = raw_send(sock, 1)
            assert answer.error == common_pb2.NONE, answer.error_message
            [result] = common_pb2.ProduceResponse.FromString(answer.response).partitions
            assert (result.error, result.base_offset) == (0, 1)
            producer.abort_transaction(TIMEOUT_S)
    # Two records, one ABORT marker (written once the abort is logged).
    assert wait_until(lambda: cluster.log(topic, 0).log_end_offset == 3, TIMEOUT_S)
