"""The transaction coordinator's answers on the Kafka wire (kafka-python's protocol classes),
as Kafka's coordinator gives them: INVALID_TRANSACTION_TIMEOUT, a fenced epoch named as each
EndTxn version names it, KIP-890's produce verification, AddOffsetsToTxn, wrong calls,
WriteTxnMarkers from a client, and KIP-360's epoch bump of a recovering producer."""

from __future__ import annotations

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

from seglog.records import RecordBatchBuilder
from tests.kafka_transactions import (
    TIMEOUT_S,
    described,
    transactional_producer,
    transactions_cluster,
)
from tests.kafka_wire import KafkaWire
from tests.waiting import wait_until


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = transactions_cluster(tmp_path_factory.mktemp("kafka-transactions-wire"))
    yield c
    c.close()


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
