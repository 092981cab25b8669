"""seglog's own Consumer in KIP-848 groups (`group_protocol="consumer"`, the gRPC side of
ConsumerGroupHeartbeat): three consumers reading while members leave and join read every
record, none twice past a commit that succeeded, and the coordinator never lets two members
hold one partition; their groups are the Kafka clients' consumer groups."""

from __future__ import annotations

import threading

import pytest

from seglog.client.config import ConsumerConfig
from seglog.client.consumer import Consumer
from seglog.client.membership import CommitFailedError
from seglog.client.producer import Producer
from seglog.errors import InvalidConfigError, SeglogError
from tests.cluster import LocalCluster
from tests.kip848_clients import OwnershipWatch, new_name
from tests.waiting import wait_for

TIMEOUT_S = 60


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(
        tmp_path_factory.mktemp("consumer-protocol"),
        nodes=2,
        group_consumer_heartbeat_interval_ms=200,
        group_consumer_session_timeout_ms=6000,
    )
    yield c
    c.close()


class Reader:
    """A seglog consumer on its own thread, committing after each batch it reads."""

    def __init__(self, cluster, group_id, topic, name, reads) -> None:
        self.name, self.reads = name, reads
        self.stop = threading.Event()
        self.consumer = Consumer(
            cluster.address,
            group_id=group_id,
            group_protocol="consumer",
            client_id=name,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            max_poll_records=20,
        )
        self.consumer.subscribe([topic])
        self.thread = threading.Thread(target=self._run, name=name)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            records = self.consumer.poll_records(timeout_ms=100)
            if not records:
                continue
            try:
                self.consumer.commit()
                committed = True
            except SeglogError:
                committed = False  # its partitions moved meanwhile: read again from the commit
            with self.reads.lock:
                self.reads.read += [(r.partition, r.offset, self.name, committed) for r in records]
        self.consumer.close(autocommit=False)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(TIMEOUT_S)


class Reads:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.read: list[tuple[int, int, str, bool]] = []

    def count(self) -> int:
        with self.lock:
            return len({(p, o) for p, o, _, _ in self.read})


def produce(cluster, topic, values, partitions):
    with Producer(cluster.address, acks="all") as producer:
        for value in values:
            producer.send(topic, value=str(value).encode(), partition=value % partitions)
        producer.flush()


def test_three_seglog_consumers_under_churn_read_every_record_once_past_commits(cluster):
    topic, group_id, partitions, per_phase = new_name("cp"), new_name("g"), 6, 60
    cluster.admin.create_topic(topic, partitions, 2)
    reads = Reads()
    watch = OwnershipWatch(cluster, group_id)
    readers = {n: Reader(cluster, group_id, topic, n, reads) for n in "abc"}
    produced = 0
    for phase, (leaving, joining) in enumerate([(None, None), ("b", "d"), ("a", "e"), ("c", None)]):
        if leaving:
            readers.pop(leaving).close()
        if joining:
            readers[joining] = Reader(cluster, group_id, topic, joining, reads)
        produce(cluster, topic, range(produced, produced + per_phase), partitions)
        produced += per_phase
        wait_for(lambda n=produced: reads.count() >= n, TIMEOUT_S, f"phase {phase}: records read")
    group = cluster.gateway.consumer_groups.describe(group_id)
    assert len(group.members) == 2 and all(m.classic is None for m in group.members.values())
    for reader in readers.values():
        reader.close()
    watch.close()
    assert watch.samples > 10 and not watch.double
    for partition in range(partitions):
        offsets = {o for p, o, _, _ in reads.read if p == partition}
        assert offsets == set(range(len(offsets)))  # nothing skipped
    assert reads.count() == produced
    first: dict[tuple[int, int], tuple[str, bool]] = {}
    for p, o, reader, committed in reads.read:
        if (p, o) in first:
            assert not first[(p, o)][1], f"{p}:{o} committed by {first[(p, o)][0]}, read again"
        else:
            first[(p, o)] = (reader, committed)
    assert len({r for _, _, r, _ in reads.read}) >= 4  # the churn did move partitions


def test_an_unknown_group_protocol_is_refused_before_anything_is_sent():
    with pytest.raises(InvalidConfigError, match="group_protocol must be one of"):
        ConsumerConfig(group_id="g", group_protocol="cooperative")
    assert ConsumerConfig(group_id="g").group_protocol == "classic"  # classic stays the default


def test_a_member_that_stops_polling_leaves_and_joins_again_on_its_next_poll(cluster):
    topic, group_id = new_name("slow"), new_name("g")
    cluster.admin.create_topic(topic, 2, 2)
    produce(cluster, topic, range(4), 2)
    groups = cluster.gateway.consumer_groups
    with Consumer(
        cluster.address,
        group_id=group_id,
        group_protocol="consumer",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_poll_interval_ms=1000,
    ) as consumer:
        consumer.subscribe([topic])
        read: list[object] = []
        wait_for(lambda: read.extend(consumer.poll_records(timeout_ms=100)) or len(read) >= 4,
                 TIMEOUT_S, "records read")  # fmt: skip
        wait_for(lambda: not groups.has_members(group_id), TIMEOUT_S, "the stalled member gone")
        with pytest.raises(CommitFailedError, match="max_poll_interval_ms"):
            consumer.commit()
        wait_for(
            lambda: consumer.poll_records(timeout_ms=100) == [] and groups.has_members(group_id),
            TIMEOUT_S,
            "joined again on its next poll",
        )
