"""Kafka's transactions against the gateway's transaction coordinator, with librdkafka's
transactional producer (confluent-kafka) and the Kafka wire: init/begin/produce/commit and
abort, zombie fencing by a second producer of the same transactional id, the transaction
timeout's abort, INVALID_TRANSACTION_TIMEOUT, the produce path's verification, a restarted
gateway reading `__transaction_state` back and resuming a PrepareCommit, and that log's
records read by Kafka's own decoder (TransactionLogMessageFormatter).

Until storage nodes serve WriteTxnMarkers, a transaction's markers stay pending (the writer
retries): these tests check what does not depend on them (a Prepare state logged, answered,
resumed), and accept the Complete state the markers lead to once nodes write them.
"""

from __future__ import annotations

import json
import time

import confluent_kafka
import pytest
from kafka.protocol.admin.transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)

from devtools import apache_kafka
from devtools.apache_kafka import run_tool
from seglog.coordinator_errors import TransactionalIdNotFoundError
from seglog.records import RecordBatchBuilder, iter_records
from seglog.security.acls import ANONYMOUS, AclBinding
from services.gateway.broker.caller import Caller
from services.gateway.transactions.log_formats import decode_key, decode_value
from services.gateway.transactions.state import TxnState
from services.gateway.transactions.txn_log import TRANSACTION_STATE_TOPIC
from tests.authorizer_modes import GROUP_GRANTS, Grant, cluster_in_mode
from tests.kafka_wire import KafkaWire
from tests.waiting import wait_until

TIMEOUT_S = 20
TRANSACTIONS_TOOL = "org.apache.kafka.tools.TransactionsCommand"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
TXN_LOG_FORMATTER = "org.apache.kafka.tools.consumer.TransactionLogMessageFormatter"
ADMIN = Caller("User:ANONYMOUS", "127.0.0.1", None, "kafka")
COMMITTING = {"PrepareCommit", "CompleteCommit"}
ABORTING = {"PrepareAbort", "CompleteAbort"}


# The authorizer is on, as in production: the tests' principal may use every transactional id
# but Write "refused" (a deny ACL, which wins).
GRANTS = (*GROUP_GRANTS, Grant("transactional_id", ("Write", "Describe")))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = cluster_in_mode(
        tmp_path_factory.mktemp("kafka-transactions"),
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
    yield c
    c.close()


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


def test_a_timeout_above_the_maximum_is_invalid_transaction_timeout(cluster):
    with KafkaWire(cluster.kafka_address) as wire:
        for timeout_ms, code in ((900_001, 50), (0, 50), (900_000, 0)):
            request = InitProducerIdRequest[4](
                transactional_id="timeouts",
                transaction_timeout_ms=timeout_ms,
                producer_id=-1,
                producer_epoch=-1,
            )
            assert wire.request(request, 4, InitProducerIdResponse).error_code == code


def test_an_old_epoch_is_fenced_as_each_version_names_it(cluster):
    """EndTxn from a fenced epoch: PRODUCER_FENCED (90) from v2, INVALID_PRODUCER_EPOCH (47)
    below (KIP-588), as Kafka's broker answers."""
    with KafkaWire(cluster.kafka_address) as wire:
        grants = [
            wire.request(
                InitProducerIdRequest[4](
                    transactional_id="versions",
                    transaction_timeout_ms=60_000,
                    producer_id=-1,
                    producer_epoch=-1,
                ),
                4,
                InitProducerIdResponse,
            )
            for _ in range(2)
        ]
        assert grants[1].producer_epoch == grants[0].producer_epoch + 1
        for version, code in ((1, 47), (3, 90)):
            request = EndTxnRequest[version](
                transactional_id="versions",
                producer_id=grants[0].producer_id,
                producer_epoch=grants[0].producer_epoch,
                committed=True,
            )
            assert wire.request(request, version, EndTxnResponse).error_code == code


def test_a_transactional_batch_of_a_partition_not_in_the_transaction_is_refused(cluster):
    """KIP-890's verification: the producer's transaction has txn-0 only; its batch for txn-1
    is refused INVALID_TXN_STATE and not written, its batch for txn-0 is written."""
    producer = transactional_producer(cluster, "verified")
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce("txn", value=b"in", partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    state = described(cluster, "verified")
    ends = {p: cluster.log("txn", p).log_end_offset for p in (0, 1)}

    def batch():
        builder = RecordBatchBuilder(
            producer_id=state.producer_id,
            producer_epoch=state.producer_epoch,
            base_sequence=1,
            is_transactional=True,
        )
        builder.append(None, b"raw", 1, None)
        return builder.build()

    request = ProduceRequest[9](
        transactional_id="verified",
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="txn",
                partition_data=[
                    ProduceRequest.TopicProduceData.PartitionProduceData(index=p, records=batch())
                    for p in (0, 1)
                ],
            )
        ],
    )
    with KafkaWire(cluster.kafka_address) as wire:
        answer = wire.request(request, 9, ProduceResponse)
    codes = {p.index: p.error_code for p in answer.responses[0].partition_responses}
    assert codes == {0: 0, 1: 48}
    assert cluster.log("txn", 1).log_end_offset == ends[1]
    assert cluster.log("txn", 0).log_end_offset == ends[0] + 1
    producer.abort_transaction(TIMEOUT_S)


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


def test_add_offsets_puts_the_group_s_offsets_partition_and_the_group_in_the_transaction(cluster):
    """AddOffsetsToTxn (send_offsets_to_transaction's first call) adds the group's
    __consumer_offsets partition; the commit's markers then go to it too, and the group is
    named for the groups core's completion of its pending offsets."""
    with KafkaWire(cluster.kafka_address) as wire:
        grant = wire.request(
            InitProducerIdRequest[4](
                transactional_id="offsets",
                transaction_timeout_ms=60_000,
                producer_id=-1,
                producer_epoch=-1,
            ),
            4,
            InitProducerIdResponse,
        )
        add = AddOffsetsToTxnRequest[3](
            transactional_id="offsets",
            producer_id=grant.producer_id,
            producer_epoch=grant.producer_epoch,
            group_id="consume-transform-produce",
        )
        assert wire.request(add, 3, AddOffsetsToTxnResponse).error_code == 0
        offsets_partition = cluster.gateway.offsets.partition_for("consume-transform-produce")
        assert described(cluster, "offsets").partitions == (
            ("__consumer_offsets", offsets_partition),
        )
        end = EndTxnRequest[3](
            transactional_id="offsets",
            producer_id=grant.producer_id,
            producer_epoch=grant.producer_epoch,
            committed=True,
        )
        assert wire.request(end, 3, EndTxnResponse).error_code == 0
    markers = cluster.gateway.transactions.markers
    if described(cluster, "offsets").state == "PrepareCommit":  # nodes without markers yet
        found: list = []

        def pending_for_offsets():
            # Between rounds: the completion being sent is not in the queue for that moment.
            found[:] = [c for c in markers.pending() if c.transactional_id == "offsets"]
            return found

        assert wait_until(pending_for_offsets)
        (completion,) = found
        assert completion.groups == frozenset({"consume-transform-produce"})
        assert completion.partitions == frozenset({("__consumer_offsets", offsets_partition)})
        assert completion.committed


def test_wrong_calls_are_answered_as_kafka_s_coordinator_answers_them(cluster):
    """EndTxn with no transaction: INVALID_TXN_STATE; a partition that does not exist:
    UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED, none added; another
    producer id: INVALID_PRODUCER_ID_MAPPING; an empty group id: INVALID_GROUP_ID; an id
    never seen: TRANSACTIONAL_ID_NOT_FOUND; a state filter no state has: listed back as
    unknown."""
    with KafkaWire(cluster.kafka_address) as wire:
        grant = wire.request(
            InitProducerIdRequest[4](
                transactional_id="wrong-calls",
                transaction_timeout_ms=60_000,
                producer_id=-1,
                producer_epoch=-1,
            ),
            4,
            InitProducerIdResponse,
        )
        pid, epoch = grant.producer_id, grant.producer_epoch
        end = EndTxnRequest[3](
            transactional_id="wrong-calls", producer_id=pid, producer_epoch=epoch, committed=True
        )
        assert wire.request(end, 3, EndTxnResponse).error_code == 48

        def add(producer_id, topics):
            request = AddPartitionsToTxnRequest[3](
                v3_and_below_transactional_id="wrong-calls",
                v3_and_below_producer_id=producer_id,
                v3_and_below_producer_epoch=epoch,
                v3_and_below_topics=[
                    AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=ps)
                    for t, ps in topics.items()
                ],
            )
            answer = wire.request(request, 3, AddPartitionsToTxnResponse)
            return {
                (t.name, p.partition_index): p.partition_error_code
                for t in answer.results_by_topic_v3_and_below
                for p in t.results_by_partition
            }

        assert add(pid, {"txn": [0], "no-such-topic": [0]}) == {
            ("txn", 0): 55,
            ("no-such-topic", 0): 3,
        }
        assert described(cluster, "wrong-calls").state == "Empty"  # nothing added
        assert add(pid + 1_000_000, {"txn": [0]}) == {("txn", 0): 49}
        no_group = AddOffsetsToTxnRequest[3](
            transactional_id="wrong-calls", producer_id=pid, producer_epoch=epoch, group_id=""
        )
        assert wire.request(no_group, 3, AddOffsetsToTxnResponse).error_code == 24
        unknown = wire.request(
            DescribeTransactionsRequest[0](transactional_ids=["never-seen"]),
            0,
            DescribeTransactionsResponse,
        )
        assert unknown.transaction_states[0].error_code == 105
        listed = wire.request(
            ListTransactionsRequest[1](
                state_filters=["Empty", "Sleeping"], producer_id_filters=[pid], duration_filter=-1
            ),
            1,
            ListTransactionsResponse,
        )
        assert listed.unknown_state_filters == ["Sleeping"]
        assert [(t.transactional_id, t.transaction_state) for t in listed.transaction_states] == [
            ("wrong-calls", "Empty")
        ]


def test_write_txn_markers_from_a_client_needs_cluster_action(cluster):
    """What `kafka-transactions abort` sends a partition's leader: refused on every partition
    with CLUSTER_AUTHORIZATION_FAILED for a principal without ClusterAction (this module's),
    as Kafka's broker answers; nothing is written."""
    end = cluster.log("txn", 0).log_end_offset
    request = WriteTxnMarkersRequest[1](
        markers=[
            WriteTxnMarkersRequest.WritableTxnMarker(
                producer_id=5,
                producer_epoch=0,
                transaction_result=False,
                topics=[
                    WriteTxnMarkersRequest.WritableTxnMarker.WritableTxnMarkerTopic(
                        name="txn", partition_indexes=[0, 1]
                    )
                ],
                coordinator_epoch=0,
            )
        ]
    )
    with KafkaWire(cluster.kafka_address) as wire:
        answer = wire.request(request, 1, WriteTxnMarkersResponse)
    (marker,) = answer.markers
    assert marker.producer_id == 5
    assert [(p.partition_index, p.error_code) for p in marker.topics[0].partitions] == [
        (0, 31),
        (1, 31),
    ]
    assert cluster.log("txn", 0).log_end_offset == end


def test_a_producer_recovering_with_its_epoch_bumps_it_and_a_lost_answer_is_retried(cluster):
    """KIP-360's InitProducerId with the producer's current id and epoch: bumped; the same
    call again (its answer lost) gets the same answer; an epoch older than that is fenced."""

    def init(producer_id, epoch):
        request = InitProducerIdRequest[4](
            transactional_id="recovers",
            transaction_timeout_ms=60_000,
            producer_id=producer_id,
            producer_epoch=epoch,
        )
        with KafkaWire(cluster.kafka_address) as wire:
            answer = wire.request(request, 4, InitProducerIdResponse)
        return answer.error_code, answer.producer_id, answer.producer_epoch

    _, pid, epoch = init(-1, -1)
    assert init(pid, epoch) == (0, pid, epoch + 1)
    assert init(pid, epoch) == (0, pid, epoch + 1)  # a retry: not bumped again
    assert init(pid, epoch + 1) == (0, pid, epoch + 2)
    assert init(pid, epoch)[0] == 90  # PRODUCER_FENCED
    assert init(pid + 1_000_000, epoch + 2)[0] == 90


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
