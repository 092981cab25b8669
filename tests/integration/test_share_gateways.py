"""Share groups on several gateways (real etcd, two gateway processes, three nodes): members
of one share group fetching one partition through different gateways never hold a record at
once, and when the gateway holding the share partition is SIGKILLed the other takes it over
from __share_group_state: nothing acknowledged comes back, what was acquired comes back
with its delivery count kept (share/placement.py, share/forwarding.py)."""

from __future__ import annotations

import confluent_kafka
import pytest

from services.gateway.kafka.share_messages import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
    ShareFetchResponse,
)
from services.gateway.kafka.topic_ids import to_wire
from tests.kafka_wire import KafkaWire
from tests.multi_gateway import SESSION_TIMEOUT_MS, EtcdBackedCluster
from tests.share_wire import share_fetch_request
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(240)

ACCEPT = 1
TOPIC, GROUP = "queue", "g-gateways"
TAKEOVER_S = 3 * SESSION_TIMEOUT_MS / 1000 + 20


class Member:
    """One share group member talking Kafka's ShareFetch to one gateway."""

    def __init__(self, address: str, member_id: str, topic_id: str) -> None:
        self.wire = KafkaWire(address)
        self.member_id = member_id
        self.topic_id = topic_id
        self.epoch = 0

    def fetch(self, acks: list[tuple[int, int]] = (), max_records: int = 10):
        """Acknowledge `acks` (ranges, ACCEPT) and acquire up to `max_records`: the answer's
        partition (its error codes and acquired ranges)."""
        request = share_fetch_request(
            GROUP, self.member_id, self.epoch, self.topic_id, acks, max_records
        )
        answer = self.wire.request(request, 1, ShareFetchResponse)
        assert answer.error_code == 0, answer
        self.epoch += 1
        (topic,) = answer.responses
        (found,) = topic.partitions
        return found


def acquired(partition) -> list[tuple[int, int]]:
    """(offset, delivery count) of each record the answer acquired."""
    return [
        (offset, r.delivery_count)
        for r in partition.acquired_records
        for offset in range(r.first_offset, r.last_offset + 1)
    ]


def start_offsets(address: str) -> dict[int, int]:
    """The group's share-partition start offsets as `kafka-share-groups --describe` asks them
    of the gateway at `address` (DescribeShareGroupOffsets)."""
    request_class = DescribeShareGroupOffsetsRequest[1]
    request = request_class(
        groups=[request_class.DescribeShareGroupOffsetsRequestGroup(group_id=GROUP, topics=None)]
    )
    with KafkaWire(address) as wire:
        answer = wire.request(request, 1, DescribeShareGroupOffsetsResponse)
    (group,) = answer.groups
    assert group.error_code == 0, group
    return {p.partition_index: p.start_offset for t in group.topics for p in t.partitions}


def holder(cluster: EtcdBackedCluster) -> int:
    """The gateway holding the share partitions (it logs each state partition it gains)."""
    held = [
        i
        for i in range(len(cluster.gateways))
        if "coordinates share state partition" in cluster.log(f"gateway-{i}")
    ]
    assert len(held) == 1, held
    return held[0]


def test_members_on_two_gateways_share_a_partition_and_survive_the_holder_killed(tmp_path):
    cluster = EtcdBackedCluster(
        tmp_path,
        gateway_args=(
            "--share-coordinator-state-topic-num-partitions", "1",
            "--share-auto-offset-reset", "earliest",
        ),
    )  # fmt: skip
    try:
        admin = cluster.admin(0)
        admin.create_topic(TOPIC, 1, 3)
        (described,) = admin.describe_topics([TOPIC])
        topic_id = to_wire(described.topic_id)
        producer = confluent_kafka.Producer({"bootstrap.servers": cluster.kafka_addresses[0]})
        for i in range(100):
            producer.produce(TOPIC, value=b"%d" % i)
        assert producer.flush(30) == 0
        members = [
            Member(cluster.kafka_addresses[0], "via-0", topic_id),
            Member(cluster.kafka_addresses[1], "via-1", topic_id),
        ]
        # Both gateways serve fetches of one share partition: what each member acquires is
        # never held by the other, every record goes out once, each acknowledgement holds.
        held: dict[str, list[tuple[int, int]]] = {m.member_id: [] for m in members}
        delivered: list[tuple[int, int]] = []
        for _ in range(20):
            for m in members:
                got = m.fetch(held[m.member_id], max_records=7)
                assert (got.error_code, got.acknowledge_error_code) == (0, 0), got
                held[m.member_id] = [(r.first_offset, r.last_offset) for r in got.acquired_records]
                delivered.extend(acquired(got))
            if len(delivered) >= 50:
                break
        assert sorted(o for o, _ in delivered) == list(range(len(delivered)))
        assert {count for _, count in delivered} == {1}
        for m in members:  # acknowledge what is still held, acquiring nothing
            got = m.fetch(held[m.member_id], max_records=0)
            assert got.acknowledge_error_code == 0, got
        done = len(delivered)
        # Either gateway describes the group's start offset (one holds it, the other asks).
        for address in cluster.kafka_addresses:
            assert start_offsets(address) == {0: done}
        # The holder SIGKILLed while the survivor's member holds records unacknowledged.
        dead = holder(cluster)
        survivor = members[1 - dead]
        unacknowledged = acquired(survivor.fetch(max_records=5))
        assert [o for o, _ in unacknowledged] == list(range(done, done + 5))
        cluster.gateways[dead].kill()
        # The survivor takes the share partition over once the holder's lease lapses and
        # reads it back: acknowledged records stay done, the acquired ones come back counted.
        again: list = []

        def redelivered() -> bool:
            got = survivor.fetch(max_records=10)
            again.extend(acquired(got))
            return bool(again)

        assert wait_until(redelivered, TAKEOVER_S), "the share partition was not taken over"
        assert again[:5] == [(o, 2) for o, _ in unacknowledged]
        assert [o for o, _ in again[5:]] == list(range(done + 5, done + len(again)))
        assert all(count == 1 for _, count in again[5:])
        for m in members:
            m.wire.close()
    finally:
        cluster.close()
