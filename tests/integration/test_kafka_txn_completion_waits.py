"""A producer's next transaction while its last one's markers are still being written: the
coordinator answered EndTxn once PrepareCommit was logged (as Kafka does), and an
AddPartitionsToTxn now is parked until the Complete state is logged, with the next
transaction's Ongoing state in the same write, then answered (no CONCURRENT_TRANSACTIONS, no
client backoff: librdkafka waited 20 ms after each, a third of a 100-record transaction's
time); markers held up longer than the wait's bound answer CONCURRENT_TRANSACTIONS as before,
and the client retries.

The marker writer is held by replacing its attempt with one that writes nothing (it then
retries after its backoff), and let go by putting the real one back."""

from __future__ import annotations

import threading

import pytest
from kafka.protocol.producer import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
)

from seglog.records import iter_batches
from services.gateway.broker.caller import Caller
from services.gateway.transactions.log_formats import (
    decode_key,
    decode_value,
    partition_for_transactional_id,
)
from services.gateway.transactions.state import TxnState
from services.gateway.transactions.txn_log import TRANSACTION_STATE_TOPIC
from tests.cluster import LocalCluster
from tests.kafka_wire import KafkaWire
from tests.waiting import wait_for

TOPIC = "parked"
NONE, CONCURRENT_TRANSACTIONS = 0, 51
ADMIN = Caller("User:ANONYMOUS", "127.0.0.1", None, "kafka")
TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(
        tmp_path_factory.mktemp("txn-completion-waits"),
        nodes=1,
        transaction_state_log_num_partitions=1,
    )
    c.admin.create_topic(TOPIC, 2, 1)
    yield c
    c.close()


class Producer:
    """A transactional producer's coordinator calls on the Kafka wire."""

    def __init__(self, wire: KafkaWire, transactional_id: str) -> None:
        self.wire, self.tid = wire, transactional_id
        grant = wire.request(
            InitProducerIdRequest[1](
                transactional_id=transactional_id, transaction_timeout_ms=60_000
            ),
            1,
            InitProducerIdResponse,
        )
        assert grant.error_code == NONE
        self.pid, self.epoch = grant.producer_id, grant.producer_epoch

    def add(self, partition: int) -> int:
        request = AddPartitionsToTxnRequest[1](
            v3_and_below_transactional_id=self.tid,
            v3_and_below_producer_id=self.pid,
            v3_and_below_producer_epoch=self.epoch,
            v3_and_below_topics=[
                AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(
                    name=TOPIC, partitions=[partition]
                )
            ],
        )
        answer = self.wire.request(request, 1, AddPartitionsToTxnResponse)
        (topic,) = answer.results_by_topic_v3_and_below
        (result,) = topic.results_by_partition
        return int(result.partition_error_code)

    def commit(self) -> int:
        request = EndTxnRequest[1](
            transactional_id=self.tid,
            producer_id=self.pid,
            producer_epoch=self.epoch,
            committed=True,
        )
        return int(self.wire.request(request, 1, EndTxnResponse).error_code)


def logged_states(cluster, tid: str) -> list[list[TxnState]]:
    """The states logged for `tid` in __transaction_state, batch by batch, in log order."""
    partition = partition_for_transactional_id(tid, 1)
    data = bytes(cluster.log(TRANSACTION_STATE_TOPIC, partition).read_records(0, 1 << 20).data)
    batches = []
    for batch in iter_batches(data):
        states = [
            TxnState(decode_value(r.value).status)
            for r in batch.records()
            if decode_key(r.key) == tid
        ]
        if states:
            batches.append(states)
    return batches


def state(cluster, tid: str) -> str:
    return cluster.gateway.transactions.queries.describe(ADMIN, tid).state


@pytest.fixture
def held_markers(cluster, monkeypatch):
    """The marker writer writing nothing until the test calls the returned release."""
    markers = cluster.gateway.transactions.markers
    real = markers._attempt
    monkeypatch.setattr(markers, "_attempt", lambda pending: None)
    return lambda: monkeypatch.setattr(markers, "_attempt", real)


def test_the_next_transaction_s_add_waits_for_the_markers_and_is_answered_ok(
    cluster, held_markers, monkeypatch
):
    waits = cluster.gateway.transactions.waits
    monkeypatch.setattr(waits, "max_wait_s", TIMEOUT_S)  # only the release ends this wait
    with KafkaWire(cluster.kafka_address) as wire:
        producer = Producer(wire, "parked-ok")
        assert producer.add(0) == NONE
        assert producer.commit() == NONE
        assert state(cluster, "parked-ok") == "PrepareCommit"  # markers held
        answers: list[int] = []
        adding = threading.Thread(target=lambda: answers.append(producer.add(1)))
        adding.start()
        wait_for(lambda: waits.waiting() == 1, TIMEOUT_S, "the add parked")
        assert not answers
        held_markers()
        adding.join(TIMEOUT_S)
    assert answers == [NONE]
    assert state(cluster, "parked-ok") == "Ongoing"
    assert waits.waiting() == 0
    # The next transaction's Ongoing state went into the Complete state's write: one batch
    # of two records, and no write after it (the call taken up again found its partition).
    batches = logged_states(cluster, "parked-ok")
    assert batches[-2:] == [
        [TxnState.PREPARE_COMMIT],
        [TxnState.COMPLETE_COMMIT, TxnState.ONGOING],
    ]


def test_markers_held_past_the_wait_s_bound_answer_concurrent_transactions(
    cluster, held_markers, monkeypatch
):
    waits = cluster.gateway.transactions.waits
    monkeypatch.setattr(waits, "max_wait_s", 0.2)
    with KafkaWire(cluster.kafka_address) as wire:
        producer = Producer(wire, "parked-late")
        assert producer.add(0) == NONE
        assert producer.commit() == NONE
        assert producer.add(1) == CONCURRENT_TRANSACTIONS
        assert waits.waiting() == 0
        assert state(cluster, "parked-late") == "PrepareCommit"
        held_markers()
        wait_for(lambda: state(cluster, "parked-late") == "CompleteCommit", TIMEOUT_S, "commit")
        assert producer.add(1) == NONE
