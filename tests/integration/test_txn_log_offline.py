"""The transaction coordinator with its log partition offline (found by the transactional
fault campaign): AddPartitionsToTxn answers COORDINATOR_NOT_AVAILABLE, as Kafka's
coordinator answers a log write that cannot be made, never the log partition's own
LEADER_NOT_AVAILABLE: librdkafka takes that for an abortable error, aborts, and its abort then
meets a coordinator that never added the partitions (INVALID_TXN_STATE, fatal: the
producer is dead). Retried, the transaction goes on once the partition is back."""

from __future__ import annotations

import confluent_kafka
import pytest
from kafka.protocol.producer import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
)

from services.gateway.cluster.partition_changes import NO_LEADER
from services.gateway.transactions.txn_log import TRANSACTION_STATE_TOPIC
from tests.cluster import LocalCluster
from tests.kafka_wire import KafkaWire
from tests.waiting import wait_for

TIMEOUT_S = 20
COORDINATOR_NOT_AVAILABLE = 15
TID = "offline-log"


@pytest.fixture
def cluster(tmp_path):
    c = LocalCluster(tmp_path, nodes=1, transaction_state_log_num_partitions=1)
    c.admin.create_topic("data", 1, 1)
    yield c
    c.close()


def log_leader(cluster) -> int:
    [topic] = cluster.client.describe_topics([TRANSACTION_STATE_TOPIC])
    return int(topic.partitions[0].leader)


def test_an_offline_log_partition_is_the_coordinator_not_available(cluster):
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": cluster.kafka_address, "transactional.id": "creates-the-log"}
    )
    producer.init_transactions(TIMEOUT_S)  # the log topic created and read back
    del producer  # (librdkafka's own threads stop with it)
    with KafkaWire(cluster.kafka_address) as wire:
        grant = wire.request(
            InitProducerIdRequest[4](
                transactional_id=TID,
                transaction_timeout_ms=60_000,
                producer_id=-1,
                producer_epoch=-1,
            ),
            4,
            InitProducerIdResponse,
        )
        assert grant.error_code == 0
        cluster.stop_node(1, controlled=False)
        wait_for(lambda: log_leader(cluster) == NO_LEADER, TIMEOUT_S, "the log partition offline")
        add = AddPartitionsToTxnRequest[3](
            v3_and_below_transactional_id=TID,
            v3_and_below_producer_id=grant.producer_id,
            v3_and_below_producer_epoch=grant.producer_epoch,
            v3_and_below_topics=[
                AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name="data", partitions=[0])
            ],
        )
        assert codes_of(wire.request(add, 3, AddPartitionsToTxnResponse)) == {
            COORDINATOR_NOT_AVAILABLE
        }
        # Back, the same AddPartitionsToTxn is answered (retried, as librdkafka retries it,
        # while the restarted node takes its leadership up).
        cluster.start_node(1)
        wait_for(
            lambda: codes_of(wire.request(add, 3, AddPartitionsToTxnResponse)) == {0},
            TIMEOUT_S,
            "the partition added once the log is back",
        )


def codes_of(answer) -> set[int]:
    return {
        p.partition_error_code
        for t in answer.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }
