"""The transaction coordinator's log and Kafka's own tools and client over it: a restarted
gateway reading `__transaction_state` back and resuming a PrepareCommit, the log's records in
Kafka's format and read by Kafka's own decoder (TransactionLogMessageFormatter),
`kafka-transactions` listing and describing, and Kafka's Java transactional producer,
exactly-once copier and read_committed console consumer."""

from __future__ import annotations

import json
import time

import confluent_kafka
import pytest

from devtools import apache_kafka
from devtools.apache_kafka import run_tool
from seglog.records import iter_records
from services.gateway.transactions.log_formats import decode_key, decode_value
from services.gateway.transactions.state import TxnState
from services.gateway.transactions.txn_log import TRANSACTION_STATE_TOPIC
from tests.kafka_transactions import (
    TIMEOUT_S,
    described,
    produce_in_transaction,
    read_to_end,
    transactional_producer,
    transactions_cluster,
)
from tests.waiting import wait_until

TRANSACTIONS_TOOL = "org.apache.kafka.tools.TransactionsCommand"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
TXN_LOG_FORMATTER = "org.apache.kafka.tools.consumer.TransactionLogMessageFormatter"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = transactions_cluster(tmp_path_factory.mktemp("kafka-transactions-log"))
    yield c
    c.close()


def transaction_state_records(cluster):
    """(transactional id, value) of every record in __transaction_state, read from the
    leaders' logs in offset order."""
    records = []
    partitions = len(cluster.gateway.registry.topic(TRANSACTION_STATE_TOPIC).partitions)
    for partition in range(partitions):
        log = cluster.log(TRANSACTION_STATE_TOPIC, partition)
        for record in iter_records(bytes(log.read_records(0, 1 << 20).data)):
            records.append((decode_key(record.key), decode_value(record.value)))
    return records


def test_a_restarted_gateway_reads_the_log_back_and_resumes_a_prepare_commit(cluster, monkeypatch):
    """The coordinator's marker writer is held (its attempts write nothing), so the gateway
    stops with the transaction in PrepareCommit; the new gateway reads it back, writes the
    markers without any client asking, and a read_committed consumer sees every record."""
    held: list[str] = []
    markers = cluster.gateway.transactions.markers
    monkeypatch.setattr(markers, "_attempt", lambda p: held.append(p.completion.transactional_id))
    producer = transactional_producer(cluster, "resumed")
    producer.init_transactions(TIMEOUT_S)
    start = {p: cluster.log("txn", p).log_end_offset for p in (0, 1)}
    produce_in_transaction(producer)
    producer.commit_transaction(TIMEOUT_S)
    assert wait_until(lambda: "resumed" in held, 10)
    before = described(cluster, "resumed")
    assert before.state == "PrepareCommit"
    producer.flush(1)
    del producer

    cluster.restart_gateway()
    assert wait_until(lambda: described(cluster, "resumed").state == "CompleteCommit", 30)
    after = described(cluster, "resumed")
    assert (after.producer_id, after.producer_epoch) == (before.producer_id, before.producer_epoch)
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": cluster.kafka_address,
            "group.id": "resumed-reader",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition("txn", p, start[p]) for p in (0, 1)])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 4 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value())
        assert sorted(got) == [b"v0", b"v1", b"v2", b"v3"]
    finally:
        consumer.close()


def test_the_log_holds_each_state_change_in_kafka_s_format(cluster):
    producer = transactional_producer(cluster, "logged")
    producer.init_transactions(TIMEOUT_S)
    produce_in_transaction(producer)
    producer.commit_transaction(TIMEOUT_S)
    states = [
        (TxnState(value.status), sorted(value.partitions))
        for tid, value in transaction_state_records(cluster)
        if tid == "logged"
    ]
    both = [("txn", 0), ("txn", 1)]
    assert states[:3] == [
        (TxnState.EMPTY, []),
        (TxnState.ONGOING, both),
        (TxnState.PREPARE_COMMIT, both),
    ]
    assert states[3:] in ([], [(TxnState.COMPLETE_COMMIT, [])])


@pytest.mark.slow
def test_kafka_s_own_decoder_reads_the_transaction_log(cluster):
    """Kafka 4.3.1's TransactionLogMessageFormatter (its generated TransactionLogKey/Value
    readers) over the records a console consumer fetches from __transaction_state."""
    assert apache_kafka.installed(), apache_kafka.INSTALL_HINT
    producer = transactional_producer(cluster, "kafka-reads")
    producer.init_transactions(TIMEOUT_S)
    produce_in_transaction(producer)
    producer.commit_transaction(TIMEOUT_S)
    partition = cluster.gateway.transactions.log.partition_for("kafka-reads")
    count = cluster.log(TRANSACTION_STATE_TOPIC, partition).log_end_offset
    done = run_tool(
        CONSOLE_CONSUMER,
        "--bootstrap-server",
        cluster.kafka_address,
        "--topic",
        TRANSACTION_STATE_TOPIC,
        "--partition",
        str(partition),
        "--offset",
        "earliest",
        "--max-messages",
        str(count),
        "--timeout-ms",
        "15000",
        "--formatter",
        TXN_LOG_FORMATTER,
    )
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    decoded, position, decoder = [], 0, json.JSONDecoder()
    while position < len(out.rstrip()):  # one JSON object per record, unseparated
        record, position = decoder.raw_decode(out, position)
        decoded.append(record)
        position += len(out[position:]) - len(out[position:].lstrip())
    mine = [
        record["value"]["data"]
        for record in decoded
        if record["key"]["data"]["transactionalId"] == "kafka-reads"
    ]
    state = described(cluster, "kafka-reads")
    assert [(r["transactionStatus"], r["transactionPartitions"]) for r in mine[:3]] == [
        (0, None),
        (1, [{"topic": "txn", "partitionIds": [0, 1]}]),
        (2, [{"topic": "txn", "partitionIds": [0, 1]}]),
    ]
    assert {(r["producerId"], r["producerEpoch"]) for r in mine} == {
        (state.producer_id, state.producer_epoch)
    }
    assert all(r["transactionTimeoutMs"] == state.timeout_ms for r in mine)


@pytest.mark.slow
def test_kafka_transactions_lists_and_describes(cluster):
    assert apache_kafka.installed(), apache_kafka.INSTALL_HINT
    producer = transactional_producer(cluster, "tool-listed")
    producer.init_transactions(TIMEOUT_S)
    produce_in_transaction(producer)
    state = described(cluster, "tool-listed")

    def tool(*args):
        done = run_tool(TRANSACTIONS_TOOL, "--bootstrap-server", cluster.kafka_address, *args)
        assert done.returncode == 0, (done.stdout.decode(), done.stderr.decode()[-3000:])
        return done.stdout.decode()

    listed = tool("list")
    header = listed.splitlines()[0].split()
    assert header == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    row = next(line.split() for line in listed.splitlines() if "tool-listed" in line)
    assert row[2:] == [str(state.producer_id), "Ongoing"]
    description = tool("describe", "--transactional-id", "tool-listed")
    header, values = description.splitlines()[:2]
    fields = dict(zip(header.split("\t"), values.split("\t"), strict=False))
    assert fields["TransactionalId"].strip() == "tool-listed"
    assert fields["TransactionState"].strip() == "Ongoing"
    assert fields["ProducerId"].strip() == str(state.producer_id)
    assert "txn-0" in fields["TopicPartitions"] and "txn-1" in fields["TopicPartitions"]
    producer.abort_transaction(TIMEOUT_S)


def java_tool(main_class: str, *args: str) -> str:
    done = run_tool(main_class, *args)
    assert done.returncode == 0, (done.stdout.decode()[-2000:], done.stderr.decode()[-3000:])
    return done.stdout.decode()


@pytest.mark.slow
def test_kafka_s_java_transactional_producer_and_read_committed_consumer(cluster):
    """Kafka's own Java client (4.3, transaction.version 0 advertised: explicit
    AddPartitionsToTxn): kafka-producer-perf-test commits its records in transactions of
    100 ms; Kafka's TransactionalMessageCopier (its system tests' exactly-once copier:
    read_committed input, output and group offsets in one transaction, some rounds aborted
    at random and redone) copies them; the Java console consumer with read_committed reads
    each input record exactly once, and none of a transaction librdkafka aborted."""
    count = 300
    cluster.admin.create_topic("java-in", 1, 3)
    cluster.admin.create_topic("java-out", 1, 3)
    aborter = transactional_producer(cluster, "java-aborter")
    aborter.init_transactions(TIMEOUT_S)
    aborter.begin_transaction()
    aborter.produce("java-out", value=b"aborted", partition=0)
    assert aborter.flush(TIMEOUT_S) == 0
    aborter.abort_transaction(TIMEOUT_S)
    java_tool(
        "org.apache.kafka.tools.ProducerPerformance",
        *("--topic", "java-in", "--num-records", str(count), "--payload-monotonic"),
        *("--throughput", "-1", "--transactional-id", "java-perf"),
        *("--transaction-duration-ms", "100"),
        *("--command-property", f"bootstrap.servers={cluster.kafka_address}"),
    )
    assert described(cluster, "java-perf").state == "CompleteCommit"
    assert read_to_end(cluster, "java-in", "read_committed") == [b"%d" % i for i in range(count)]
    copied = java_tool(
        "org.apache.kafka.tools.TransactionalMessageCopier",
        *("--broker-list", cluster.kafka_address, "--transactional-id", "java-copier"),
        *("--input-topic", "java-in", "--input-partition", "0", "--output-topic", "java-out"),
        *("--consumer-group", "java-copier", "--transaction-size", "50"),
        # Its own end would be the LSO less its position, so perf-test's last COMMIT marker
        # would count as a record never to come (it hangs so on Kafka too).
        *("--max-messages", str(count)),
        *("--enable-random-aborts", "--use-group-metadata"),
    )
    last = json.loads(copied.strip().splitlines()[-1])
    assert (last["stage"], last["totalProcessed"]) == ("ShutdownComplete", count)
    shown = java_tool(
        CONSOLE_CONSUMER,
        *("--bootstrap-server", cluster.kafka_address, "--topic", "java-out"),
        *("--from-beginning", "--isolation-level", "read_committed"),
        *("--max-messages", str(count)),
    )
    assert sorted(shown.split(), key=int) == [str(i) for i in range(count)]
    # Nothing past them either: each copied once, the aborted rounds and record left out.
    assert sorted(read_to_end(cluster, "java-out", "read_committed"), key=int) == [
        b"%d" % i for i in range(count)
    ]
    assert b"aborted" in read_to_end(cluster, "java-out", "read_uncommitted")
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": cluster.kafka_address, "group.id": "java-copier"}
    )
    try:
        (committed,) = consumer.committed(
            [confluent_kafka.TopicPartition("java-in", 0)], timeout=TIMEOUT_S
        )
        # Past the last record (the log ends with perf-test's last COMMIT marker after it).
        end = cluster.log("java-in", 0).log_end_offset
        assert committed.offset in (end - 1, end)
    finally:
        consumer.close()
