"""Kafka's transactions with librdkafka's transactional producer (confluent-kafka) against
the gateway's transaction coordinator: commit and abort, zombie fencing by a second producer
of the same transactional id, the transaction timeout's abort, an id the producer may not
write, and consume-transform-produce loops (classic and KIP-848 groups) committing their
output and offsets together. The wire-level answers are in test_kafka_transactions_wire.py,
the log, Kafka's tools and Java client in test_kafka_transactions_log.py."""

from __future__ import annotations

import time

import confluent_kafka
import pytest

from seglog.coordinator_errors import TransactionalIdNotFoundError
from tests.kafka_transactions import (
    ABORTING,
    COMMITTING,
    TIMEOUT_S,
    described,
    produce_in_transaction,
    transactional_producer,
    transactions_cluster,
)
from tests.waiting import wait_until


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = transactions_cluster(tmp_path_factory.mktemp("kafka-transactions"))
    yield c
    c.close()


def test_librdkafka_commits_and_aborts_transactions(cluster):
    committer = transactional_producer(cluster, "commits")
    committer.init_transactions(TIMEOUT_S)
    produce_in_transaction(committer)
    assert described(cluster, "commits").state == "Ongoing"
    assert described(cluster, "commits").partitions == (("txn", 0), ("txn", 1))
    committer.commit_transaction(TIMEOUT_S)
    committed = described(cluster, "commits")
    assert committed.state in COMMITTING
    assert committed.producer_epoch == 0

    aborter = transactional_producer(cluster, "aborts")
    aborter.init_transactions(TIMEOUT_S)
    produce_in_transaction(aborter)
    aborter.abort_transaction(TIMEOUT_S)
    assert described(cluster, "aborts").state in ABORTING
    # The node appended the transactional batches (the markers settle them).
    assert cluster.log("txn", 0).log_end_offset >= 4


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(cluster):
    first = transactional_producer(cluster, "zombie")
    first.init_transactions(TIMEOUT_S)
    epoch = described(cluster, "zombie").producer_epoch
    second = transactional_producer(cluster, "zombie")
    second.init_transactions(TIMEOUT_S)
    assert described(cluster, "zombie").producer_epoch == epoch + 1

    first.begin_transaction()  # local only: the first call to the coordinator is refused
    first.produce("txn", value=b"zombie", partition=0)
    with pytest.raises(confluent_kafka.KafkaException) as raised:
        first.commit_transaction(TIMEOUT_S)
    error = raised.value.args[0]
    assert error.fatal(), error
    assert error.code() in (
        confluent_kafka.KafkaError._FENCED,
        confluent_kafka.KafkaError.PRODUCER_FENCED,
        confluent_kafka.KafkaError.INVALID_PRODUCER_EPOCH,
    ), error

    produce_in_transaction(second)
    second.commit_transaction(TIMEOUT_S)
    assert described(cluster, "zombie").state in COMMITTING


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(cluster):
    producer = transactional_producer(cluster, "times-out", **{"transaction.timeout.ms": 1000})
    producer.init_transactions(TIMEOUT_S)
    produce_in_transaction(producer)
    assert wait_until(lambda: described(cluster, "times-out").state in ABORTING, 10)
    assert described(cluster, "times-out").producer_epoch == 1  # fenced: the epoch bumped
    with pytest.raises(confluent_kafka.KafkaException):
        producer.commit_transaction(TIMEOUT_S)


def test_a_transactional_id_the_producer_may_not_write_is_refused_fatally(cluster):
    """Write on the transactional id, as Kafka's broker checks InitProducerId: librdkafka
    takes TRANSACTIONAL_ID_AUTHORIZATION_FAILED as fatal (no retrying to its timeout)."""
    producer = transactional_producer(cluster, "refused")
    with pytest.raises(confluent_kafka.KafkaException) as raised:
        producer.init_transactions(TIMEOUT_S)
    error = raised.value.args[0]
    assert error.code() == confluent_kafka.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert error.fatal()
    with pytest.raises(TransactionalIdNotFoundError):
        described(cluster, "refused")  # nothing was given to it


def test_consume_transform_produce_commits_output_and_offsets_together(cluster):
    """Kafka's exactly-once loop with librdkafka: read from an input topic in a group, write
    the transformed records and the group's offsets in one transaction (the second one
    aborted). A read_committed reader of the output sees the committed round only, and the
    group's committed offsets are those the committed transaction sent, not the aborted one's."""
    cluster.admin.create_topic("eos-in", 1, 3)
    cluster.admin.create_topic("eos-out", 1, 3)
    plain = confluent_kafka.Producer({"bootstrap.servers": cluster.kafka_address})
    for i in range(6):
        plain.produce("eos-in", value=b"in%d" % i, partition=0)
    assert plain.flush(TIMEOUT_S) == 0
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": cluster.kafka_address,
            "group.id": "eos",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    producer = transactional_producer(cluster, "eos-loop")
    producer.init_transactions(TIMEOUT_S)
    try:
        consumer.assign([confluent_kafka.TopicPartition("eos-in", 0, 0)])
        for round_number, commit in ((0, True), (1, False)):
            got: list[confluent_kafka.Message] = []
            deadline = time.monotonic() + 30
            while len(got) < 3 and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    got.append(message)
            assert len(got) == 3, round_number
            producer.begin_transaction()
            for message in got:
                producer.produce("eos-out", value=message.value().upper(), partition=0)
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()),
                consumer.consumer_group_metadata(),
                TIMEOUT_S,
            )
            if commit:
                producer.commit_transaction(TIMEOUT_S)
            else:
                producer.abort_transaction(TIMEOUT_S)
        assert wait_until(lambda: described(cluster, "eos-loop").state == "CompleteAbort", 30)
        (committed,) = consumer.committed(
            [confluent_kafka.TopicPartition("eos-in", 0)], timeout=TIMEOUT_S
        )
        assert committed.offset == 3  # the committed round's position, not the aborted one's
    finally:
        consumer.close()
    reader = confluent_kafka.Consumer(
        {
            "bootstrap.servers": cluster.kafka_address,
            "group.id": "eos-reader",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    try:
        reader.assign([confluent_kafka.TopicPartition("eos-out", 0, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            message = reader.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                if message.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    break
                continue
            values.append(message.value())
        assert values == [b"IN0", b"IN1", b"IN2"]
    finally:
        reader.close()


def test_a_kip848_group_members_offsets_commit_in_a_transaction(cluster):
    """A consumer in a KIP-848 group (group.protocol=consumer) sends its offsets in the
    producer's transaction with its member id and epoch: they are checked against the
    consumer group's member (not the classic coordinator's, which has no such group) and
    committed with the transaction."""
    cluster.admin.create_topic("eos848-in", 1, 3)
    plain = confluent_kafka.Producer({"bootstrap.servers": cluster.kafka_address})
    for i in range(4):
        plain.produce("eos848-in", value=b"r%d" % i, partition=0)
    assert plain.flush(TIMEOUT_S) == 0
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": cluster.kafka_address,
            "group.id": "eos848",
            "group.protocol": "consumer",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    producer = transactional_producer(cluster, "eos848-loop")
    producer.init_transactions(TIMEOUT_S)
    try:
        consumer.subscribe(["eos848-in"])
        got: list[confluent_kafka.Message] = []
        deadline = time.monotonic() + 60
        while len(got) < 4 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message)
        assert len(got) == 4
        metadata = consumer.consumer_group_metadata()
        producer.begin_transaction()
        producer.produce("txn", value=b"derived", partition=0)
        producer.send_offsets_to_transaction(
            consumer.position(consumer.assignment()), metadata, TIMEOUT_S
        )
        producer.commit_transaction(TIMEOUT_S)
        assert wait_until(lambda: described(cluster, "eos848-loop").state == "CompleteCommit", 30)
        (committed,) = consumer.committed(
            [confluent_kafka.TopicPartition("eos848-in", 0)], timeout=TIMEOUT_S
        )
        assert committed.offset == 4
    finally:
        consumer.close()
