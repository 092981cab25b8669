"""The Apache Kafka harness (devtools/apache_kafka.py) itself, against which seglog's Kafka
listener is compared: a one-broker KRaft cluster starts, librdkafka produces to it and
consumes back what it produced, Kafka's own topic tool describes the topic, and stopping
ends the broker's process; seglog's `dump --verify` reads the broker's files of an empty
partition clean; seglog's engine reads the broker's transaction markers and `.txnindex`, and
seglog's transaction log decoder reads the broker's __transaction_state as Kafka's own
formatter does."""

from __future__ import annotations

import base64
import json
import os
import shutil

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from devtools import apache_kafka
from devtools.apache_kafka import KafkaBrokers
from seglog.cli.main import main
from seglog.records import iter_records
from seglog.records.batch import CONTROL_MASK
from seglog.records.control import read_marker
from seglog.storage import Log, partition_metadata
from seglog.storage.txn_index import TransactionIndex
from services.gateway.transactions.log_formats import (
    decode_key,
    decode_value,
    partition_for_transactional_id,
)
from tests.waiting import wait_until

# JVMs start in seconds: a broker per module, a JVM per tool run.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def kafka_installed() -> None:
    """`make kafka` (run by `make test`) installs the jars: missing, these tests fail."""
    assert apache_kafka.installed(), apache_kafka.INSTALL_HINT


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    brokers = KafkaBrokers(tmp_path_factory.mktemp("apache-kafka"), brokers=1)
    brokers.start()
    yield brokers
    brokers.stop()


def test_librdkafka_consumes_what_it_produced_to_apache_kafka(kafka):
    # Idempotent: the first sends meet the topic's auto-creation and are retried, and without
    # idempotence librdkafka's pipelined retries may reorder them (a CI run got value-30
    # first); Kafka keeps a partition's order across retries only for an idempotent producer.
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": kafka.bootstrap, "acks": "all", "enable.idempotence": True}
    )
    for i in range(200):
        producer.produce("harness", b"value-%d" % i, key=b"key-%d" % (i % 7))
    assert producer.flush(30) == 0
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": kafka.bootstrap,
            "group.id": "harness",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe(["harness"])
    values: list[bytes] = []

    def consumed_all() -> bool:
        message = consumer.poll(0.5)
        if message is not None:
            assert message.error() is None, message.error()
            values.append(message.value())
        return len(values) >= 200

    try:
        assert wait_until(consumed_all, timeout_s=60, interval_s=0), f"{len(values)} of 200"
    finally:
        consumer.close()
    assert values == [b"value-%d" % i for i in range(200)]


def test_kafka_topic_tool_describes_a_topic_it_created(kafka):
    created = apache_kafka.run_tool(
        apache_kafka.TOPICS_TOOL,
        "--bootstrap-server",
        kafka.bootstrap,
        "--create",
        "--topic",
        "tool-made",
        "--partitions",
        "3",
    )
    assert created.returncode == 0, created.stderr.decode()
    described = apache_kafka.run_tool(
        apache_kafka.TOPICS_TOOL,
        "--bootstrap-server",
        kafka.bootstrap,
        "--describe",
        "--topic",
        "tool-made",
    )
    assert described.returncode == 0, described.stderr.decode()
    assert b"PartitionCount: 3" in described.stdout


def test_stopping_ends_every_broker_process(tmp_path):
    brokers = KafkaBrokers(tmp_path, brokers=1)
    brokers.start()
    pids = brokers.pids()
    brokers.stop()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_seglog_dump_verifies_a_kafka_brokers_empty_partition(kafka, capsys):
    # Kafka preallocates an active segment's .index and .timeindex zero-filled: none of those
    # slots is an entry, so an empty partition dumps with no entry and verifies clean.
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    futures = admin.create_topics([NewTopic("never-written", 1, 1)])
    futures["never-written"].result(timeout=60)
    partition_dir = kafka.root / "broker-1" / "never-written-0"
    assert wait_until(lambda: any(partition_dir.glob("*.timeindex")), timeout_s=60)
    (index,) = partition_dir.glob("*.index")
    assert index.stat().st_size > 0 and not any(index.read_bytes())  # preallocated zeros
    code = main(["dump", "--verify", "--topic", "never-written", "--data-dir", str(kafka.root)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "offset:" not in out and "timestamp:" not in out, out
    assert f"Dumping {index}" in out


def test_partition_metadata_is_the_file_a_kafka_broker_writes(kafka):
    """The broker's own partition.metadata (its topic id, KIP-516) is byte for byte what a
    node writes for that id, and reads back as that id."""
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.create_topics([NewTopic("with-an-id", 1, 1)])["with-an-id"].result(timeout=60)
    partition_dir = kafka.root / "broker-1" / "with-an-id-0"
    written = partition_dir / partition_metadata.PARTITION_METADATA
    assert wait_until(lambda: written.exists() and written.stat().st_size > 0, timeout_s=60)
    topic_id = partition_metadata.read(partition_dir)
    assert written.read_bytes() == partition_metadata.encode(topic_id)
    described = admin.describe_topics(confluent_kafka.TopicCollection(["with-an-id"]))
    seen = described["with-an-id"].result(timeout=60).topic_id
    # librdkafka prints ids in standard base64 (Kafka in URL-safe): the same 16 bytes.
    assert base64.b64decode(str(seen) + "==") == base64.urlsafe_b64decode(topic_id + "==")


def test_a_new_cluster_id_is_a_kafka_uuid_no_command_line_reads_as_an_option():
    # One urlsafe-base64 id in 64 starts with "-": kafka-storage's parser took it for a flag.
    ids = [apache_kafka.new_cluster_id() for _ in range(5000)]
    assert not [i for i in ids if i.startswith("-")]
    assert all(len(base64.urlsafe_b64decode(i + "==")) == 16 for i in ids)


def test_seglog_reads_a_kafka_brokers_markers_and_txnindex(kafka, tmp_path):
    """Transactions aborted and committed by librdkafka's transactional producer against the
    broker: seglog's engine reads the broker's control batches as the same markers, rebuilds
    the broker's `.txnindex` byte for byte from its log (a copy opened as after a crash:
    every segment recovered), and answers the same aborted transactions and LSO."""
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.create_topics([NewTopic("txn-files", 1, 1)])["txn-files"].result(timeout=60)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": kafka.bootstrap, "transactional.id": "txn-files"}
    )
    producer.init_transactions(60)
    for count, committed in ((3, False), (2, True), (1, False)):
        producer.begin_transaction()
        for i in range(count):
            producer.produce("txn-files", b"v%d" % i, partition=0)
        assert producer.flush(60) == 0  # sent: an abort drops what is still queued
        if committed:
            producer.commit_transaction(60)
        else:
            producer.abort_transaction(60)
    partition_dir = kafka.root / "broker-1" / "txn-files-0"
    # The coordinator writes the markers after EndTxn is answered.
    kafka_index = partition_dir / "00000000000000000000.txnindex"
    assert wait_until(
        lambda: kafka_index.exists() and kafka_index.stat().st_size == 2 * 34, timeout_s=60
    ), sorted(p.name for p in partition_dir.iterdir())
    written = kafka_index.read_bytes()
    copy = tmp_path / "txn-files-0"
    copy.mkdir()
    for path in partition_dir.iterdir():
        if path.suffix in (".log", ".index", ".timeindex", ".snapshot"):
            shutil.copy(path, copy / path.name)
    log = Log.open(copy)
    try:
        log.update_high_watermark(log.log_end_offset)
        markers = []
        for segment in log.segments:
            for found in segment.log.batches():
                header = found.header
                if header.attributes & CONTROL_MASK:
                    raw = segment.log.read(found.position, header.size_in_bytes)
                    markers.append((header.base_offset, read_marker(raw, header).committed))
        # Offsets: 0-2 aborted, 3 ABORT, 4-5 committed, 6 COMMIT, 7 aborted, 8 ABORT.
        assert markers == [(3, False), (6, True), (8, False)]
        assert log.segments[0].txn_index.path.read_bytes() == written
        # The broker's own file, read by seglog's index, says the same.
        kafkas = TransactionIndex(kafka_index).entries
        assert kafkas == log.aborted_transactions(0, log.log_end_offset)
        assert [
            (a.producer_id, a.first_offset, a.last_offset)
            for a in log.aborted_transactions(0, log.log_end_offset)
        ] == [
            (log.active_producers()[0].producer_id, 0, 3),
            (log.active_producers()[0].producer_id, 7, 8),
        ]
        assert log.last_stable_offset == log.high_watermark == 9
    finally:
        log.close()


def test_kafka_s_transaction_log_reads_the_same_in_seglog_s_decoder(kafka):
    """A real broker's __transaction_state records (Kafka 4.3.1 writes TransactionLogValue v1,
    flexible, with tagged fields), read from its files with seglog's transaction log decoder
    (services/gateway/transactions/log_formats.py), field for field as Kafka's own
    TransactionLogMessageFormatter prints them."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": kafka.bootstrap, "transactional.id": "decoded-alike"}
    )
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce("txn-harness", b"in a transaction")
    producer.commit_transaction(60)
    partition = partition_for_transactional_id("decoded-alike", 50)  # Kafka's default count
    directory = kafka.root / "broker-1" / f"__transaction_state-{partition}"

    def seglog_reads():
        records = []
        for segment in sorted(directory.glob("*.log")):
            for record in iter_records(segment.read_bytes()):
                if record.value is not None and decode_key(record.key) == "decoded-alike":
                    records.append(decode_value(record.value))
        return records

    # CompleteCommit is written once the markers landed, just after EndTxn's answer.
    assert wait_until(lambda: any(v.status == 4 for v in seglog_reads()), 30)
    mine = seglog_reads()
    done = apache_kafka.run_tool(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        "--bootstrap-server",
        kafka.bootstrap,
        "--topic",
        "__transaction_state",
        "--partition",
        str(partition),
        "--offset",
        "earliest",
        "--max-messages",
        str(len(mine)),
        "--timeout-ms",
        "20000",
        "--formatter",
        "org.apache.kafka.tools.consumer.TransactionLogMessageFormatter",
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    out, position, decoder, kafkas = done.stdout.decode(), 0, json.JSONDecoder(), []
    while position < len(out.rstrip()):
        record, position = decoder.raw_decode(out, position)
        position += len(out[position:]) - len(out[position:].lstrip())
        if record["key"]["data"]["transactionalId"] == "decoded-alike":
            kafkas.append(record["value"])
    assert len(kafkas) == len(mine) >= 4
    # Kafka 4.3.1 (transaction.version 2 finalized) writes the flexible v1 with its tags.
    assert {record["version"] for record in kafkas} == {1}
    for theirs, ours in zip(kafkas, mine, strict=True):
        data = theirs["data"]
        partitions = {
            (t["topic"], p) for t in data["transactionPartitions"] or [] for p in t["partitionIds"]
        }
        assert (
            data["producerId"],
            data["producerEpoch"],
            data["transactionTimeoutMs"],
            data["transactionStatus"],
            partitions,
            data["transactionLastUpdateTimestampMs"],
            data["transactionStartTimestampMs"],
            data.get("previousProducerId", -1),
            data.get("nextProducerId", -1),
            data.get("clientTransactionVersion", 0),
        ) == (
            ours.producer_id,
            ours.producer_epoch,
            ours.timeout_ms,
            ours.status,
            set(ours.partitions),
            ours.last_update_ms,
            ours.start_ms,
            ours.previous_producer_id,
            ours.next_producer_id,
            ours.client_transaction_version,
        )
    assert [v.status for v in mine][-2:] == [2, 4]  # PrepareCommit, CompleteCommit
