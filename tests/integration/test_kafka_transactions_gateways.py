"""Transactions with several gateways on etcd (real processes). KIP-890's produce
verification: a transactional batch sent to a gateway that does not coordinate its
transactional id is verified by asking the coordinating gateway
(transactions/remote_verification.py): the batch for the partition added to the transaction
is written, the one for a partition not added is refused INVALID_TXN_STATE and not written,
and a fenced epoch is refused; the answers are remembered briefly. seglog's transactional
Producer bootstrapped from one gateway follows its id's coordinator to the other."""

from __future__ import annotations

import pytest
from kafka.protocol.producer import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
)

from seglog.client import Consumer, Producer, TopicPartition
from seglog.client.gateway import LATEST
from seglog.coordinator_errors import InvalidTxnStateError, ProducerFencedError
from seglog.records import RecordBatchBuilder
from seglog.v1 import transactions_pb2, transactions_pb2_grpc
from services.gateway.transactions.remote_verification import VERIFIED_FOR_MS, RemoteVerifier
from tests.cluster import drain
from tests.kafka_transactions import skip_adding
from tests.kafka_wire import KafkaWire
from tests.multi_gateway import EtcdBackedCluster
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(180)

TOPIC = "verified"
TID = "verified-elsewhere"
INVALID_TXN_STATE, INVALID_PRODUCER_EPOCH, PRODUCER_FENCED = 48, 47, 90


def init_id(address: str, transactional_id: str) -> InitProducerIdResponse:
    request = InitProducerIdRequest[4](
        transactional_id=transactional_id,
        transaction_timeout_ms=60_000,
        producer_id=-1,
        producer_epoch=-1,
    )
    with KafkaWire(address) as wire:
        return wire.request(request, 4, InitProducerIdResponse)


def init(address: str) -> InitProducerIdResponse:
    return init_id(address, TID)


def add_partition(address: str, transactional_id: str, grant, partition: int) -> None:
    add = AddPartitionsToTxnRequest[3](
        v3_and_below_transactional_id=transactional_id,
        v3_and_below_producer_id=grant.producer_id,
        v3_and_below_producer_epoch=grant.producer_epoch,
        v3_and_below_topics=[
            AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=TOPIC, partitions=[partition])
        ],
    )
    with KafkaWire(address) as wire:
        added = wire.request(add, 3, AddPartitionsToTxnResponse)
    assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0


def batch(producer_id: int, epoch: int, sequence: int) -> bytes:
    builder = RecordBatchBuilder(
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        is_transactional=True,
    )
    builder.append(None, b"raw", 1, None)
    return builder.build()


def produce(address: str, batches: dict[int, bytes]) -> dict[int, int]:
    request = ProduceRequest[9](
        transactional_id=TID,
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=TOPIC,
                partition_data=[
                    ProduceRequest.TopicProduceData.PartitionProduceData(index=p, records=b)
                    for p, b in batches.items()
                ],
            )
        ],
    )
    with KafkaWire(address) as wire:
        answer = wire.request(request, 9, ProduceResponse)
    return {p.index: p.error_code for p in answer.responses[0].partition_responses}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = EtcdBackedCluster(tmp_path_factory.mktemp("txn-gateways"), gateways=2, nodes=3)
    try:
        c.admin(0).create_topic(TOPIC, 2, 3)
        yield c
    finally:
        c.close()


def find_coordinator(cluster, index: int, transactional_id: str) -> str:
    with cluster.channel(cluster.gateway_addresses[index]) as channel:
        found = transactions_pb2_grpc.TransactionCoordinatorStub(channel).FindCoordinator(
            transactions_pb2.FindTxnCoordinatorRequest(
                key=transactional_id, key_type=transactions_pb2.TXN_KEY_TRANSACTION
            ),
            timeout=10,
        )
    return found.address or cluster.gateway_addresses[index]


def test_a_gateway_asks_the_coordinating_gateway_before_forwarding(cluster):
    # InitProducerId at gateway 1 places the id there (its first use claims its log
    # partition); the produce goes to gateway 0.
    grant = init(cluster.kafka_addresses[1])
    assert grant.error_code == 0, grant
    pid, epoch = grant.producer_id, grant.producer_epoch
    assert find_coordinator(cluster, 0, TID) == cluster.gateway_addresses[1]
    add = AddPartitionsToTxnRequest[3](
        v3_and_below_transactional_id=TID,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[
            AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=TOPIC, partitions=[0])
        ],
    )
    with KafkaWire(cluster.kafka_addresses[1]) as wire:
        added = wire.request(add, 3, AddPartitionsToTxnResponse)
    assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0

    client = cluster.client(0)
    ends = {p: r.offset for p, r in client.list_offsets(TOPIC, {0: LATEST, 1: LATEST}).items()}
    codes = produce(cluster.kafka_addresses[0], {0: batch(pid, epoch, 0), 1: batch(pid, epoch, 0)})
    assert codes == {0: 0, 1: INVALID_TXN_STATE}
    after = {p: r.offset for p, r in client.list_offsets(TOPIC, {0: LATEST, 1: LATEST}).items()}
    assert after == {0: ends[0] + 1, 1: ends[1]}  # the refused batch was not written

    # A newer producer of the id fences this one (the open transaction is aborted
    # first: CONCURRENT_TRANSACTIONS until it is): its next batch is refused too.
    assert wait_until(lambda: init(cluster.kafka_addresses[1]).error_code == 0, 30)
    fenced = produce(cluster.kafka_addresses[0], {1: batch(pid, epoch, 0)})
    assert fenced[1] in (INVALID_PRODUCER_EPOCH, PRODUCER_FENCED), fenced
    client.close()


def test_a_verified_partition_is_remembered_briefly_and_a_refusal_not_at_all(cluster):
    """RemoteVerifier against the coordinating gateway (a real one): a partition in the
    transaction is asked once and trusted for VERIFIED_FOR_MS, one not in it every time."""
    tid = "remembered"
    grant = init_id(cluster.kafka_addresses[1], tid)
    coordinator = find_coordinator(cluster, 0, tid)
    assert coordinator == cluster.gateway_addresses[1]
    add_partition(cluster.kafka_addresses[1], tid, grant, 0)
    now = [1000.0]
    verifier = RemoteVerifier(None, clock=lambda: now[0])
    try:
        pid, epoch = grant.producer_id, grant.producer_epoch
        ask = lambda p: verifier.verify(coordinator, tid, pid, epoch, [(TOPIC, p)])[(TOPIC, p)]  # noqa: E731
        assert ask(0) is None and verifier.calls == 1
        assert ask(0) is None and verifier.calls == 1  # remembered
        assert isinstance(ask(1), InvalidTxnStateError) and verifier.calls == 2
        assert isinstance(ask(1), InvalidTxnStateError) and verifier.calls == 3
        now[0] += VERIFIED_FOR_MS / 1000
        assert ask(0) is None and verifier.calls == 4  # asked again once it is stale
        # Another epoch is another producer: not taken from what was remembered.
        other = verifier.verify(coordinator, tid, pid, epoch + 1, [(TOPIC, 0)])
        assert isinstance(other[(TOPIC, 0)], ProducerFencedError) and verifier.calls == 5
    finally:
        verifier.close()


def test_seglogs_producer_follows_its_ids_coordinator_to_another_gateway(cluster):
    """Bootstrapped from gateway 0, a transactional Producer whose id gateway 1 coordinates
    makes its coordinator calls there (FindCoordinator), sends its records through gateway
    0, and commits."""
    tid = "followed"
    assert find_coordinator(cluster, 1, tid) == cluster.gateway_addresses[1]  # placed there
    with Producer(
        cluster.gateway_addresses[0], transactional_id=tid, produce_transport="grpc"
    ) as producer:
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.send(TOPIC, b"followed", partition=1)
        producer.commit_transaction(30)
    with Consumer(cluster.gateway_addresses[0], isolation_level="read_committed") as consumer:
        consumer.assign([TopicPartition(TOPIC, 1)])
        consumer.seek_to_beginning(TopicPartition(TOPIC, 1))
        got = drain(consumer, 1, timeout_s=30)
    assert [r.value for r in got] == [b"followed"]


@pytest.mark.parametrize("transport", ["grpc", "auto"])
def test_seglogs_producer_skipping_add_partitions_is_refused_by_a_gateway_not_its_coordinator(
    cluster, transport
):
    """Through gateway 0, whose produce asks gateway 1 (the id's coordinator) over
    VerifyPartitions: a partition never added is refused INVALID_TXN_STATE, not written, on
    the gRPC Produce and on the bulk path (its node sends the request through the gateway)."""
    tid = f"unadded-elsewhere-{transport}"
    assert find_coordinator(cluster, 1, tid) == cluster.gateway_addresses[1]  # placed there
    with Producer(
        cluster.gateway_addresses[0], transactional_id=tid, produce_transport=transport
    ) as producer:
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.send(TOPIC, b"added", partition=0).get(timeout=30)
        skip_adding(producer, TOPIC)
        client = cluster.client(0)
        try:
            before = client.list_offsets(TOPIC, {1: LATEST})[1].offset
            future = producer.send(TOPIC, b"unadded", partition=1)
            producer.flush(30)
            with pytest.raises(InvalidTxnStateError):
                future.get(timeout=30)
            assert client.list_offsets(TOPIC, {1: LATEST})[1].offset == before
        finally:
            client.close()
