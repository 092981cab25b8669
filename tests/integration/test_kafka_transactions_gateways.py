"""KIP-890's produce verification with several gateways on etcd (real processes): a
transactional batch sent to a gateway that does not coordinate its transactional id is
verified by asking the coordinating gateway (transactions/remote_verification.py): the batch
for the partition added to the transaction is written, the one for a partition not added is
refused INVALID_TXN_STATE and not written, and a fenced epoch is refused."""

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

from seglog.client.gateway import LATEST
from seglog.records import RecordBatchBuilder
from seglog.v1 import transactions_pb2, transactions_pb2_grpc
from tests.kafka_wire import KafkaWire
from tests.multi_gateway import EtcdBackedCluster
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(180)

TOPIC = "verified"
TID = "verified-elsewhere"
INVALID_TXN_STATE, INVALID_PRODUCER_EPOCH, PRODUCER_FENCED = 48, 47, 90


def init(address: str) -> InitProducerIdResponse:
    request = InitProducerIdRequest[4](
        transactional_id=TID, transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1
    )
    with KafkaWire(address) as wire:
        return wire.request(request, 4, InitProducerIdResponse)


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


def test_a_gateway_asks_the_coordinating_gateway_before_forwarding(tmp_path):
    cluster = EtcdBackedCluster(tmp_path, gateways=2, nodes=3)
    try:
        cluster.admin(0).create_topic(TOPIC, 2, 3)
        # InitProducerId at gateway 1 places the id there (its first use claims its log
        # partition); the produce goes to gateway 0.
        grant = init(cluster.kafka_addresses[1])
        assert grant.error_code == 0, grant
        pid, epoch = grant.producer_id, grant.producer_epoch
        with cluster.channel(cluster.gateway_addresses[0]) as channel:
            found = transactions_pb2_grpc.TransactionCoordinatorStub(channel).FindCoordinator(
                transactions_pb2.FindTxnCoordinatorRequest(
                    key=TID, key_type=transactions_pb2.TXN_KEY_TRANSACTION
                ),
                timeout=10,
            )
        assert found.address == cluster.gateway_addresses[1]
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
        assert (
            added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
        )

        client = cluster.client(0)
        ends = {p: r.offset for p, r in client.list_offsets(TOPIC, {0: LATEST, 1: LATEST}).items()}
        codes = produce(
            cluster.kafka_addresses[0], {0: batch(pid, epoch, 0), 1: batch(pid, epoch, 0)}
        )
        assert codes == {0: 0, 1: INVALID_TXN_STATE}
        after = {p: r.offset for p, r in client.list_offsets(TOPIC, {0: LATEST, 1: LATEST}).items()}
        assert after == {0: ends[0] + 1, 1: ends[1]}  # the refused batch was not written

        # A newer producer of the id fences this one (the open transaction is aborted
        # first: CONCURRENT_TRANSACTIONS until it is): its next batch is refused too.
        assert wait_until(lambda: init(cluster.kafka_addresses[1]).error_code == 0, 30)
        fenced = produce(cluster.kafka_addresses[0], {1: batch(pid, epoch, 0)})
        assert fenced[1] in (INVALID_PRODUCER_EPOCH, PRODUCER_FENCED), fenced
        client.close()
    finally:
        cluster.close()
