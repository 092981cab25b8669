"""Transactional offsets in the group coordinator (Kafka's TxnOffsetCommit, KIP-98/KIP-447),
at the wire with kafka-python's protocol classes on a real gateway and node: offsets held
pending per producer until the transaction's marker, invisible to OffsetFetch meanwhile
(UNSTABLE_OFFSET_COMMIT with require_stable), committed or dropped by the transaction
coordinator's hook, and the same state read back from the log (COMMIT/ABORT control batches
replayed) by a gateway that loads the partition, or picked up from the log's tail when
another gateway wrote the marker."""

from __future__ import annotations

import itertools
import time

import confluent_kafka
import kafka
import pytest
from kafka.protocol.consumer.group import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from kafka.protocol.producer.transaction import TxnOffsetCommitRequest, TxnOffsetCommitResponse

from seglog.client.consumer import Consumer
from seglog.client.producer import Producer
from seglog.client.structs import TopicPartition
from seglog.errors import RequestTimedOutError
from seglog.security.acls import AclBinding
from services.gateway.groups.offsets_contents import OFFSETS_TOPIC
from tests.cluster import LocalCluster, drain
from tests.kafka_wire import KafkaWire
from tests.txn_batches import ABORT, COMMIT, write_marker
from tests.waiting import wait_until

TOPIC = "txn-offsets-in"
NONE = 0
UNSTABLE_OFFSET_COMMIT = kafka.errors.UnstableOffsetCommitError.errno
ILLEGAL_GENERATION = kafka.errors.IllegalGenerationError.errno
UNKNOWN_MEMBER_ID = kafka.errors.UnknownMemberIdError.errno
UNKNOWN_TOPIC_OR_PARTITION = kafka.errors.UnknownTopicOrPartitionError.errno
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = kafka.errors.TransactionalIdAuthorizationFailedError.errno
_producer_ids = itertools.count(7000)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("txn-offsets"), nodes=1)
    c.admin.create_topic(TOPIC, 2, 1)
    yield c
    c.close()


def txn_commit(
    wire,
    group,
    producer_id,
    offsets,
    *,
    version=3,
    epoch=0,
    generation=-1,
    member_id="",
    topic=TOPIC,
):
    fields = dict(
        transactional_id=f"txn-{producer_id}",
        group_id=group,
        producer_id=producer_id,
        producer_epoch=epoch,
        topics=[
            TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(
                name=topic,
                partitions=[
                    TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition(
                        partition_index=p, committed_offset=o, committed_metadata="m"
                    )
                    for p, o in offsets.items()
                ],
            )
        ],
    )
    if version >= 3:
        fields.update(generation_id=generation, member_id=member_id, group_instance_id=None)
    answer = wire.request(
        TxnOffsetCommitRequest[version](**fields), version, TxnOffsetCommitResponse
    )
    return {p.partition_index: p.error_code for t in answer.topics for p in t.partitions}


def offset_fetch(wire, group, *, require_stable):
    request = OffsetFetchRequest[7](
        group_id=group,
        topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=[0, 1])],
        require_stable=require_stable,
    )
    answer = wire.request(request, 7, OffsetFetchResponse)
    assert answer.error_code == NONE
    return {
        p.partition_index: (p.committed_offset, p.error_code)
        for t in answer.topics
        for p in t.partitions
    }


def mark_as_another_gateway(
    cluster, partition: int, producer_id: int, kind: int, *, epoch: int = 0
) -> None:
    """Have the node write a marker directly, as another gateway's transaction coordinator
    does: this gateway's store does not see it written."""
    gateway = cluster.gateway
    route = gateway.registry.route(OFFSETS_TOPIC, partition)
    stub = gateway.connections.get(route.leader, route.address).stub
    write_marker(stub, OFFSETS_TOPIC, partition, producer_id, kind, epoch=epoch)


def test_txn_offsets_are_pending_until_the_transaction_commits(cluster):
    group, pid = "txn-commit", next(_producer_ids)
    with KafkaWire(cluster.kafka_address) as wire:
        assert offset_fetch(wire, group, require_stable=False) == {0: (-1, 0), 1: (-1, 0)}
        assert txn_commit(wire, group, pid, {0: 5, 1: 9}) == {0: NONE, 1: NONE}
        # Not visible; with require_stable, unstable.
        assert offset_fetch(wire, group, require_stable=False) == {0: (-1, 0), 1: (-1, 0)}
        assert offset_fetch(wire, group, require_stable=True) == {
            0: (-1, UNSTABLE_OFFSET_COMMIT),
            1: (-1, UNSTABLE_OFFSET_COMMIT),
        }
        cluster.gateway.groups.complete_transactional_offsets(group, pid, 0, True)
        assert offset_fetch(wire, group, require_stable=True) == {0: (5, 0), 1: (9, 0)}


def test_txn_offsets_are_dropped_when_the_transaction_aborts(cluster):
    group, pid = "txn-abort", next(_producer_ids)
    with KafkaWire(cluster.kafka_address) as wire:
        assert txn_commit(wire, group, pid, {0: 3}) == {0: NONE}
        cluster.gateway.groups.complete_transactional_offsets(group, pid, 0, True)
        assert txn_commit(wire, group, pid, {0: 8}, epoch=1) == {0: NONE}
        cluster.gateway.groups.complete_transactional_offsets(group, pid, 1, False)
        assert offset_fetch(wire, group, require_stable=True) == {0: (3, 0), 1: (-1, 0)}


def test_a_gateway_loading_the_log_replays_markers_to_the_same_offsets(cluster):
    """Two producers' transactions in one partition, one committed and one aborted by their
    control batches, and a third still open: read back whole (a failover's load), the
    partition gives what the hook gave."""
    group = "txn-replay"
    committer, aborter, open_one = (next(_producer_ids) for _ in range(3))
    groups = cluster.gateway.groups
    partition = groups.offsets.partition_for(group)
    with KafkaWire(cluster.kafka_address) as wire:
        assert txn_commit(wire, group, committer, {0: 11}) == {0: NONE}
        assert txn_commit(wire, group, aborter, {1: 22}) == {1: NONE}
        assert txn_commit(wire, group, open_one, {1: 33}) == {1: NONE}
        mark_as_another_gateway(cluster, partition, committer, COMMIT)
        mark_as_another_gateway(cluster, partition, aborter, ABORT)
        groups.complete_transactional_offsets(group, committer, 0, True)
        groups.complete_transactional_offsets(group, aborter, 0, False)
        live = offset_fetch(wire, group, require_stable=True)
        assert live == {0: (11, 0), 1: (-1, UNSTABLE_OFFSET_COMMIT)}
        groups.offsets.forget_partition(partition)  # as when another gateway held it
        assert offset_fetch(wire, group, require_stable=True) == live
        mark_as_another_gateway(cluster, partition, open_one, COMMIT)
        groups.offsets.forget_partition(partition)
        assert offset_fetch(wire, group, require_stable=True) == {0: (11, 0), 1: (33, 0)}


def test_a_marker_written_by_another_gateway_settles_the_groups_offsets(cluster):
    """The transaction's coordinator is another gateway: its hook call is not made here, the
    marker is in the log; the group's coordinator reads it from the partition's tail."""
    group, pid = "txn-elsewhere", next(_producer_ids)
    partition = cluster.gateway.groups.offsets.partition_for(group)
    with KafkaWire(cluster.kafka_address) as wire:
        assert txn_commit(wire, group, pid, {0: 4, 1: 6}) == {0: NONE, 1: NONE}
        assert offset_fetch(wire, group, require_stable=False) == {0: (-1, 0), 1: (-1, 0)}
        mark_as_another_gateway(cluster, partition, pid, COMMIT)
        assert offset_fetch(wire, group, require_stable=True) == {0: (4, 0), 1: (6, 0)}


def test_a_plain_commit_after_the_transactions_offsets_wins_at_its_commit(cluster):
    """Kafka keeps the offset of the later record: a plain OffsetCommit written after the
    transaction's offsets is not overwritten when the transaction commits."""
    group, pid = "txn-then-plain", next(_producer_ids)
    groups = cluster.gateway.groups
    with KafkaWire(cluster.kafka_address) as wire:
        assert txn_commit(wire, group, pid, {0: 10, 1: 10}) == {0: NONE, 1: NONE}
        commit = OffsetCommitRequest[8](
            group_id=group,
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            topics=[
                OffsetCommitRequest.OffsetCommitRequestTopic(
                    name=TOPIC,
                    partitions=[
                        OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                            partition_index=0, committed_offset=20, committed_metadata=""
                        )
                    ],
                )
            ],
        )
        wire.request(commit, 8, OffsetCommitResponse)
        groups.complete_transactional_offsets(group, pid, 0, True)
        assert offset_fetch(wire, group, require_stable=True) == {0: (20, 0), 1: (10, 0)}


def test_txn_offset_commit_answers_kafkas_errors(cluster):
    group, pid = "txn-errors", next(_producer_ids)
    with KafkaWire(cluster.kafka_address) as wire:
        # A member or generation named must be the group's (KIP-447's zombie fencing): the
        # group has none.
        assert txn_commit(wire, group, pid, {0: 1}, generation=3) == {0: ILLEGAL_GENERATION}
        assert txn_commit(wire, group, pid, {0: 1}, generation=3, member_id="gone") == {
            0: ILLEGAL_GENERATION
        }
        # Versions 0-2 name no member; the oldest version works.
        assert txn_commit(wire, group, pid, {0: 2}, version=0) == {0: NONE}
        assert txn_commit(wire, group, pid, {7: 1}) == {7: UNKNOWN_TOPIC_OR_PARTITION}
        assert txn_commit(wire, group, pid, {0: 1}, topic="no-such-topic") == {
            0: UNKNOWN_TOPIC_OR_PARTITION
        }
        assert txn_commit(wire, group, pid, {1: 5}, version=5) == {1: NONE}
        cluster.gateway.groups.complete_transactional_offsets(group, pid, 0, True)
        assert offset_fetch(wire, group, require_stable=True) == {0: (2, 0), 1: (5, 0)}


def test_a_producers_next_transaction_is_not_settled_by_its_previous_marker(cluster):
    """The previous transaction's marker was written by another gateway and not yet read
    here when the producer's next transaction commits offsets: the marker settles only the
    offsets written before it."""
    group, pid = "txn-next", next(_producer_ids)
    partition = cluster.gateway.groups.offsets.partition_for(group)
    with KafkaWire(cluster.kafka_address) as wire:
        assert txn_commit(wire, group, pid, {0: 1, 1: 1}) == {0: NONE, 1: NONE}
        mark_as_another_gateway(cluster, partition, pid, COMMIT)
        assert txn_commit(wire, group, pid, {0: 2}, epoch=1) == {0: NONE}
        assert offset_fetch(wire, group, require_stable=True) == {
            0: (-1, UNSTABLE_OFFSET_COMMIT),  # Kafka answers no offset with it
            1: (1, 0),
        }
        assert offset_fetch(wire, group, require_stable=False) == {0: (1, 0), 1: (1, 0)}
        mark_as_another_gateway(cluster, partition, pid, ABORT, epoch=1)
        assert offset_fetch(wire, group, require_stable=True) == {0: (1, 0), 1: (1, 0)}


def test_txn_offset_commit_fences_by_the_groups_member_and_generation(cluster):
    """KIP-447: the producer sends its consumer's group metadata; a member or generation
    that is no longer the group's is refused (a zombie's offsets never pend)."""
    group, pid = "txn-member", next(_producer_ids)
    with Consumer(cluster.address, group_id=group, enable_auto_commit=False) as consumer:
        consumer.subscribe([TOPIC])
        assert wait_until(
            lambda: consumer.poll_records(timeout_ms=50) is not None and consumer.assignment(),
            20,
        )
        snapshot = cluster.gateway.coordinator.snapshot(group)
        (member,) = snapshot.members
        generation = snapshot.generation
        with KafkaWire(cluster.kafka_address) as wire:

            def commit(**metadata):
                return txn_commit(wire, group, pid, {0: 12}, version=3, **metadata)

            assert commit(generation=generation - 1, member_id=member) == {0: ILLEGAL_GENERATION}
            assert commit(generation=generation, member_id="a-zombie") == {0: UNKNOWN_MEMBER_ID}
            assert commit(generation=-1, member_id=member) == {0: ILLEGAL_GENERATION}
            # Pending offsets from the refused ones: none.
            assert offset_fetch(wire, group, require_stable=True) == {0: (-1, 0), 1: (-1, 0)}
            assert commit(generation=generation, member_id=member) == {0: NONE}
            # A producer of versions 0-2 sends no group metadata: accepted (Kafka's rule).
            assert txn_commit(wire, group, pid, {1: 13}, version=2) == {1: NONE}
            cluster.gateway.groups.complete_transactional_offsets(group, pid, 0, True)
            assert offset_fetch(wire, group, require_stable=True) == {0: (12, 0), 1: (13, 0)}


def test_a_read_committed_librdkafka_consumer_waits_for_pending_offsets(cluster):
    """librdkafka with isolation.level=read_committed fetches committed offsets with
    require_stable and retries UNSTABLE_OFFSET_COMMIT: it sees the transaction's offsets
    once committed, never the older ones while they pend."""
    group, pid = "txn-rdkafka", next(_producer_ids)
    with KafkaWire(cluster.kafka_address) as wire:
        assert txn_commit(wire, group, pid, {0: 3}) == {0: NONE}
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": cluster.kafka_address,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        tp = confluent_kafka.TopicPartition(TOPIC, 0)
        with pytest.raises(confluent_kafka.KafkaException) as waited:
            consumer.committed([tp], timeout=1.5)
        assert waited.value.args[0].code() == confluent_kafka.KafkaError._TIMED_OUT
        cluster.gateway.groups.complete_transactional_offsets(group, pid, 0, True)
        (answer,) = consumer.committed([tp], timeout=10)
        assert answer.offset == 3
    finally:
        consumer.close()


def test_txn_offset_commit_needs_write_on_the_transactional_id(tmp_path):
    cluster = LocalCluster(tmp_path, nodes=1, authorizer=True)
    try:
        cluster.gateway.registry.add_acls(
            [
                AclBinding("User:ANONYMOUS", "*", "topic", "literal", "*", op, "allow")
                for op in ("Create", "Read", "Describe")
            ]
            + [
                AclBinding("User:ANONYMOUS", "*", "group", "literal", "*", op, "allow")
                for op in ("Read", "Describe")
            ]
        )
        cluster.admin.create_topic(TOPIC, 2, 1)
        with KafkaWire(cluster.kafka_address) as wire:
            assert txn_commit(wire, "txn-acl", 42, {0: 1, 1: 1}) == {
                0: TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                1: TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            }
            assert offset_fetch(wire, "txn-acl", require_stable=True) == {0: (-1, 0), 1: (-1, 0)}
    finally:
        cluster.close()


def test_an_offset_with_transactional_offsets_pending_does_not_expire(cluster):
    group, pid = "txn-expiry", next(_producer_ids)
    offsets = cluster.gateway.groups.offsets
    with KafkaWire(cluster.kafka_address) as wire:
        assert txn_commit(wire, group, pid, {0: 1, 1: 1}) == {0: NONE, 1: NONE}
        cluster.gateway.groups.complete_transactional_offsets(group, pid, 0, True)
        assert txn_commit(wire, group, pid, {0: 2}, epoch=1) == {0: NONE}
        # Retention 0: every offset of the group is past it now, but the pending one's.
        offsets.expire_offsets(time.time_ns() // 1_000_000, 0, active_groups=set())
        assert offset_fetch(wire, group, require_stable=False) == {0: (1, 0), 1: (-1, 0)}


def test_a_read_committed_seglog_consumer_starts_at_the_transactions_offsets(cluster):
    """seglog's Consumer, read_committed in a group: a partition whose offsets a transaction
    has pending gets no position (it would otherwise start from the older offset, or reset)
    until the transaction commits; then it reads from the transaction's offset."""
    group, pid, topic = "txn-seglog", next(_producer_ids), "txn-seglog-in"
    cluster.admin.create_topic(topic, 1, 1)
    with Producer(cluster.address) as producer:
        producer.send_many(topic, [b"v%d" % i for i in range(6)], partition=0)
        producer.flush(10)
    with KafkaWire(cluster.kafka_address) as wire:
        assert txn_commit(wire, group, pid, {0: 4}, topic=topic) == {0: NONE}
    tp = TopicPartition(topic, 0)
    with Consumer(
        cluster.address,
        group_id=group,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        retry_backoff_ms=20,
        request_timeout_ms=1000,
    ) as consumer:
        consumer.subscribe([topic])
        assert wait_until(
            lambda: consumer.poll_records(timeout_ms=50) == [] and consumer.assignment(), 20
        )
        assert consumer.poll_records(timeout_ms=200) == []  # no position: nothing read
        with pytest.raises(RequestTimedOutError):
            consumer.committed(tp)  # waits out its request timeout for the transaction
        cluster.gateway.groups.complete_transactional_offsets(group, pid, 0, True)
        got = drain(consumer, 2, timeout_s=10)
        assert [r.offset for r in got] == [4, 5]
        assert consumer.committed(tp)[tp].offset == 4


def test_deleting_a_group_drops_its_pending_offsets_in_the_log_too(cluster):
    """Kafka tombstones a deleted group's pending offsets: the transaction's later commit
    brings nothing back, live or read back from the log."""
    group, pid = "txn-deleted", next(_producer_ids)
    groups = cluster.gateway.groups
    partition = groups.offsets.partition_for(group)
    with KafkaWire(cluster.kafka_address) as wire:
        assert txn_commit(wire, group, pid, {0: 7}) == {0: NONE}
        assert cluster.admin.delete_groups([group]) == {group: None}
        mark_as_another_gateway(cluster, partition, pid, COMMIT)
        groups.complete_transactional_offsets(group, pid, 0, True)
        assert offset_fetch(wire, group, require_stable=True) == {0: (-1, 0), 1: (-1, 0)}
        groups.offsets.forget_partition(partition)
        assert offset_fetch(wire, group, require_stable=True) == {0: (-1, 0), 1: (-1, 0)}
