"""What the Kafka transactions tests share: their cluster (authorizer on, a deny ACL on the
transactional id "refused", timed-out transactions looked for every 100 ms), librdkafka's
transactional producer, the coordinator's view of an id, a read_committed/read_uncommitted
reader of a partition to its end; seglog's Producer made to skip AddPartitionsToTxn."""

from __future__ import annotations

import time

import confluent_kafka

from seglog.client.producer import Producer
from seglog.security.acls import ANONYMOUS, AclBinding
from services.gateway.broker.caller import Caller
from tests.authorizer_modes import GROUP_GRANTS, Grant, cluster_in_mode

TIMEOUT_S = 20
ADMIN = Caller("User:ANONYMOUS", "127.0.0.1", None, "kafka")
COMMITTING = {"PrepareCommit", "CompleteCommit"}
ABORTING = {"PrepareAbort", "CompleteAbort"}


# The authorizer is on, as in production: the tests' principal may use every transactional id
# but Write "refused" (a deny ACL, which wins).
GRANTS = (*GROUP_GRANTS, Grant("transactional_id", ("Write", "Describe")))


def transactions_cluster(path):
    """A 3-node cluster with the topic "txn" (2 partitions); the caller closes it."""
    c = cluster_in_mode(
        path,
        "authorizer-on",
        GRANTS,
        nodes=3,
        transaction_state_log_num_partitions=3,
        # Timed-out transactions are looked for every 100 ms (Kafka's default is 10 s).
        transaction_abort_timed_out_transaction_cleanup_interval_ms=100,
    )
    c.gateway.registry.add_acls(
        [AclBinding(ANONYMOUS, "*", "transactional_id", "literal", "refused", "Write", "deny")]
    )
    c.admin.create_topic("txn", 2, 3)
    return c


def transactional_producer(cluster, transactional_id, **config):
    return confluent_kafka.Producer(
        {
            "bootstrap.servers": cluster.kafka_address,
            "transactional.id": transactional_id,
            "linger.ms": 5,
            **config,
        }
    )


def described(cluster, transactional_id):
    return cluster.gateway.transactions.queries.describe(ADMIN, transactional_id)


def produce_in_transaction(producer, count=4):
    producer.begin_transaction()
    for i in range(count):
        producer.produce("txn", value=b"v%d" % i, partition=i % 2)
    assert producer.flush(TIMEOUT_S) == 0


def read_to_end(cluster, topic: str, isolation: str) -> list[bytes]:
    """Every value of partition 0 a librdkafka reader hands over until it reports the
    partition's end (the LSO for read_committed, the high watermark otherwise)."""
    reader = confluent_kafka.Consumer(
        {
            "bootstrap.servers": cluster.kafka_address,
            "group.id": f"{topic}-reader",
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    values: list[bytes] = []
    try:
        reader.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            message = reader.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                if message.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    return values
                continue
            values.append(message.value())
        raise AssertionError(f"no end of {topic} in 30 s after {len(values)} records")
    finally:
        reader.close()


def skip_adding(producer: Producer, topic: str) -> None:
    """The producer adds none of `topic`'s partitions to its transactions but sends to them
    as if it had (a client that skips AddPartitionsToTxn)."""
    manager = producer._transactions
    assert manager is not None
    original = manager.add_partitions

    def add_partitions(partitions):
        partitions = list(partitions)
        original([tp for tp in partitions if tp[0] != topic])
        with manager._lock:
            manager._partitions.update(tp for tp in partitions if tp[0] == topic)

    manager.add_partitions = add_partitions  # type: ignore[method-assign]
