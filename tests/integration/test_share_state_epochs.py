"""State epochs of share partitions (share/state_store.py): a holder that takes a share
partition over claims it at the next state epoch, and the partition leader refuses the old
holder's later writes (FENCED_STATE_EPOCH), so the old holder never overwrites the new one's
state. First on one gateway with a second holder built beside its own over the same storage
(deterministic: the old holder's write is sure to come after the claim), then with two
gateway processes, the old holder SIGSTOPped while the other takes over, then resumed."""

from __future__ import annotations

import confluent_kafka
import pytest
from kafka.protocol.metadata.find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)

from services.gateway.kafka.share_messages import ShareFetchResponse
from services.gateway.kafka.topic_ids import to_wire
from services.gateway.share.partition_states import PartitionStates
from services.gateway.share.state_store import StateStore
from tests.cluster import LocalCluster
from tests.integration.test_share_gateways import GROUP, TOPIC, acquired, holder
from tests.integration.test_share_gateways import Member as SharingMember
from tests.kafka_wire import KafkaWire
from tests.multi_gateway import SESSION_TIMEOUT_MS, EtcdBackedCluster
from tests.share_wire import share_fetch_request
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(300)

FENCED_STATE_EPOCH = 124  # Kafka's Errors.FENCED_STATE_EPOCH
INVALID_RECORD_STATE = 121
INVALID_REQUEST = 42
GROUP_KEY, SHARE_KEY = 0, 2
TAKEOVER_S = 3 * SESSION_TIMEOUT_MS / 1000 + 30


class Member(SharingMember):
    """A member whose fetch answers None when the share session leaves its partition out
    (an incremental answer with nothing to say about it)."""

    def fetch(self, acks: list[tuple[int, int]] = (), max_records: int = 10):
        request = share_fetch_request(
            GROUP, self.member_id, self.epoch, self.topic_id, acks, max_records
        )
        answer = self.wire.request(request, 1, ShareFetchResponse)
        assert answer.error_code == 0, answer
        self.epoch += 1
        found = [p for t in answer.responses for p in t.partitions]
        return found[0] if found else None


def find_coordinators(address: str, key_type: int, keys: list[str], version: int = 6) -> list:
    """FindCoordinator v4+ (batched keys) as raw bytes: the answer's Coordinator entries."""
    with KafkaWire(address) as wire:
        request = FindCoordinatorRequest[version](key_type=key_type, coordinator_keys=keys)
        return list(wire.request(request, version, FindCoordinatorResponse).coordinators)


def gateway_of(cluster: EtcdBackedCluster, coordinator) -> int:
    """Which gateway a Coordinator entry names (its listener or one of its nodes' lanes, a
    run of ports from its own)."""
    (index,) = [
        i
        for i, address in enumerate(cluster.kafka_addresses)
        if 0 <= coordinator.port - int(address.rsplit(":", 1)[1]) < 8
    ]
    return index


def produce(bootstrap: str, count: int) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(TOPIC, value=b"%d" % i)
    assert producer.flush(30) == 0


def test_the_old_holders_write_after_a_takeover_is_fenced(tmp_path):
    cluster = LocalCluster(tmp_path, nodes=1, share_auto_offset_reset="earliest")
    try:
        cluster.admin.create_topic(TOPIC, 1, 1)
        (described,) = cluster.admin.describe_topics([TOPIC])
        produce(cluster.kafka_address, 10)
        share_key = f"{GROUP}:{described.topic_id}:0"
        # FindCoordinator v6 SHARE keys: this gateway holds them all; below v6, or a key
        # that is not group:topicId:partition, INVALID_REQUEST; group keys batch alike.
        (found,) = find_coordinators(cluster.kafka_address, SHARE_KEY, [share_key])
        assert (found.key, found.error_code) == (share_key, 0), found
        base_port = int(cluster.kafka_address.rsplit(":", 1)[1])
        assert 0 <= found.port - base_port < 8, found  # its listener or a lane of it
        (old_version,) = find_coordinators(cluster.kafka_address, SHARE_KEY, [share_key], 5)
        assert old_version.error_code == INVALID_REQUEST, old_version
        bad = find_coordinators(
            cluster.kafka_address, SHARE_KEY, [f"{GROUP}:{described.topic_id}", "g:nope:0"]
        )
        assert [c.error_code for c in bad] == [INVALID_REQUEST, INVALID_REQUEST], bad
        groups = find_coordinators(cluster.kafka_address, GROUP_KEY, ["g1", "g2"], 4)
        assert [(c.key, c.error_code) for c in groups] == [("g1", 0), ("g2", 0)], groups
        member = Member(cluster.kafka_address, "old-holders-member", to_wire(described.topic_id))
        got = member.fetch(max_records=5)
        assert [o for o, _ in acquired(got)] == [0, 1, 2, 3, 4]
        gateway = cluster.gateway
        old = gateway.share.states
        pid = (GROUP, TOPIC, 0)
        key, topic_id = old.key_of(pid)
        before = old.store.read(key, topic_id)
        # A second holder over the same storage takes the share partition: it reads the
        # state back and claims it at the next state epoch.
        plane = gateway.data_plane
        store = StateStore(
            gateway.registry,
            plane.producing,
            plane.fetching,
            plane.queries,
            gateway.topic_admin.create_internal_topic,
            old.store.num_partitions,
        )
        new = PartitionStates(gateway.registry, store, old.settings, old.offset_of)
        claimed = new.get(pid)
        assert claimed.state_epoch == before.state_epoch + 1
        # The old holder, unaware, acknowledges what it handed out: refused by the leader.
        got = member.fetch(acks=[(0, 4)], max_records=0)
        assert got.acknowledge_error_code == FENCED_STATE_EPOCH, got
        assert new.store.read(key, topic_id) == store.read(key, topic_id)
        assert store.read(key, topic_id).state_epoch == claimed.state_epoch
        # The old holder dropped its copy: reading it back, it finds nothing acknowledged and
        # hands the records out again, their deliveries counted.
        again = acquired(member.fetch(max_records=5))
        assert again == [(o, 2) for o in range(5)], again
        assert old.get(pid).state_epoch == claimed.state_epoch + 1
        member.wire.close()
    finally:
        cluster.close()


@pytest.mark.long  # the old holder fenced after a takeover stays in make test
def test_a_paused_holder_resumed_after_a_takeover_does_not_overwrite_the_new_state(tmp_path):
    # The nodes report to gateway 1, which stays up: pausing gateway 0 (the holder) leaves
    # the storage live, as a holder cut off from etcd and its peers would.
    cluster = EtcdBackedCluster(
        tmp_path,
        node_gateway_order=(1, 0),
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
        produce(cluster.kafka_addresses[0], 20)
        members = [Member(cluster.kafka_addresses[i], f"via-{i}", topic_id) for i in range(2)]
        assert [o for o, _ in acquired(members[0].fetch(max_records=5))] == list(range(5))
        # The first gateway to use the share partition claims it (placement.py).
        old = holder(cluster)
        assert old == 0
        stale, fresh = members
        # Both gateways name the holder as the share partition's coordinator.
        share_key = f"{GROUP}:{described.topic_id}:0"
        for address in cluster.kafka_addresses:
            (found,) = find_coordinators(address, SHARE_KEY, [share_key])
            assert found.error_code == 0, found
            assert gateway_of(cluster, found) == 0
        cluster.pause(cluster.gateways[old])
        try:
            # The other gateway takes the partition over once the paused one's lease lapses,
            # and its member acknowledges everything: 0-4 again (counted twice), then 5-19.
            taken: list[tuple[int, int]] = []

            def took_over() -> bool:
                got = fresh.fetch(max_records=20)
                taken.extend(acquired(got) if got is not None else [])
                return bool(taken)

            assert wait_until(took_over, TAKEOVER_S), "the share partition was not taken over"
            while len(taken) < 20:
                got = fresh.fetch(acks=[(taken[0][0], taken[-1][0])], max_records=20)
                assert got is not None and got.acknowledge_error_code == 0, got
                taken.extend(acquired(got))
            assert sorted(o for o, _ in taken) == list(range(20))
            (found,) = find_coordinators(cluster.kafka_addresses[1], SHARE_KEY, [share_key])
            assert found.error_code == 0 and gateway_of(cluster, found) == 1, found
            done = fresh.fetch(acks=[(taken[0][0], taken[-1][0])], max_records=20)
            assert done is not None and done.acknowledge_error_code == 0, done
        finally:
            cluster.resume(cluster.gateways[old])
        # The resumed holder's member acknowledges what it was handed before the pause: its
        # write is refused (fenced by the leader), or, when the gateway learnt first that it
        # lost the partition, refused by the new holder: either way nothing is overwritten.
        late = stale.fetch(acks=[(0, 4)], max_records=0)
        assert late is not None, "the late acknowledgement was not answered"
        assert late.acknowledge_error_code in (FENCED_STATE_EPOCH, INVALID_RECORD_STATE), late
        # The state is the new holder's: all 20 acknowledged, nothing handed out again.
        for m in members:
            got = m.fetch(max_records=20)
            assert got is None or (got.error_code, acquired(got)) == (0, []), got
        for m in members:
            m.wire.close()
    finally:
        cluster.close()
