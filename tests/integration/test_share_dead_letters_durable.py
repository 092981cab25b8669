"""Dead letters are never lost with the gateway holding a share partition (archiving.py):
on two gateways in etcd and three nodes, a record acquired at the delivery count limit whose
holder is SIGKILLed before its next fetch (the lapse of a lock, like a departed member's
release, is only applied there) is archived by the gateway taking the partition over, which
writes its dead letter: it is in the dead-letter topic, and the record is never delivered
again."""

from __future__ import annotations

import confluent_kafka
import pytest

from services.gateway.kafka.topic_ids import to_wire
from tests.integration.test_share_gateways import TAKEOVER_S, Member, acquired, holder
from tests.multi_gateway import EtcdBackedCluster
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(240)

TOPIC, DLQ = "queue", "dlq.queue"


def fetch(member: Member, max_records: int) -> list[tuple[int, int]]:
    """(offset, delivery count) of what `member` acquires; an answer naming no partition (a
    share session leaves out a partition with nothing new) acquired nothing."""
    try:
        return acquired(member.fetch(max_records=max_records))
    except ValueError:  # Member.fetch unpacking an answer without the partition
        return []


def dead_letters(bootstrap: str) -> list[dict[str, str]]:
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "dlq-reader", "enable.auto.commit": False}
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(DLQ, 0, 0)])
        found = []
        for message in consumer.consume(num_messages=100, timeout=5):
            if message.error() is None:
                found.append({k: (v or b"").decode() for k, v in message.headers() or []})
        return found
    finally:
        consumer.close()


@pytest.mark.long  # dead letters stay in make test (test_share_dead_letter_configs.py)
def test_a_record_held_at_the_delivery_limit_is_dead_lettered_after_its_holder_is_killed(
    tmp_path,
):
    cluster = EtcdBackedCluster(
        tmp_path,
        gateway_args=(
            "--share-coordinator-state-topic-num-partitions", "1",
            "--share-auto-offset-reset", "earliest",
            "--group-share-delivery-count-limit", "2",
            "--group-share-record-lock-duration-ms", "1000",
            "--errors-deadletterqueue-topic-name", DLQ,
            "--errors-deadletterqueue-auto-create-topics-enable", "true",
        ),
    )  # fmt: skip
    try:
        admin = cluster.admin(0)
        admin.create_topic(TOPIC, 1, 3)
        admin.create_topic(DLQ, 1, 3, {"errors.deadletterqueue.group.enable": "true"})
        (described,) = admin.describe_topics([TOPIC])
        topic_id = to_wire(described.topic_id)
        producer = confluent_kafka.Producer({"bootstrap.servers": cluster.kafka_addresses[0]})
        producer.produce(TOPIC, value=b"0")
        assert producer.flush(30) == 0
        members = [Member(address, f"via-{i}", topic_id) for i, address in
                   enumerate(cluster.kafka_addresses)]  # fmt: skip
        assert acquired(members[0].fetch(max_records=1)) == [(0, 1)]
        dead = holder(cluster)
        member = members[1 - dead]  # on the gateway that survives
        # Its lock lapses unacknowledged; the next fetch hands it out at the limit.
        again: list = []
        assert wait_until(lambda: again.extend(fetch(member, 1)) or again, 30)
        assert again == [(0, 2)]
        cluster.gateways[dead].kill()
        producer = confluent_kafka.Producer(
            {"bootstrap.servers": cluster.kafka_addresses[1 - dead]}
        )
        producer.produce(TOPIC, value=b"1")
        assert producer.flush(30) == 0
        # The survivor takes over: offset 0 is archived, never handed out again.
        later: list = []

        def taken_over() -> bool:
            later.extend(fetch(member, 10))
            return bool(later)

        assert wait_until(taken_over, TAKEOVER_S), "the share partition was not taken over"
        assert later == [(1, 1)]
        letters: list = []
        assert wait_until(lambda: letters.extend(dead_letters(cluster.kafka_addresses[1 - dead]))
                          or letters, 30)  # fmt: skip
        assert [(h["__dlq.errors.offset"], h["__dlq.errors.delivery.count"]) for h in letters] == [
            ("0", "2")
        ]
        assert letters[0]["__dlq.errors.message"] == "Offset delivery count exceeded the threshold."
        for m in members:
            m.wire.close()
    finally:
        cluster.close()
