"""`__consumer_offsets` as Kafka keeps it: committed offsets with the leader epoch the
consumer read, GroupMetadata records per rebalance, expiry after offsets.retention.minutes,
and a read-back that survives a corrupt batch."""

from __future__ import annotations

import pytest

from seglog.client.consumer import Consumer
from seglog.client.structs import TopicPartition
from seglog.records import RecordBatch
from services.gateway.groups.offsets_formats import decode_subscription_topics
from services.gateway.groups.offsets_store import OFFSETS_TOPIC
from tests.authorizer_modes import AUTHORIZER_MODES, GROUP_GRANTS, Grant
from tests.batches import make_batch
from tests.cluster import drain
from tests.waiting import wait_until

# Each test with the authorizer off and on (conftest's cluster, AUTHORIZER_GRANTS to ANONYMOUS).
pytestmark = pytest.mark.parametrize("cluster", AUTHORIZER_MODES, indirect=True)
# Group tests' needs, and deleting a topic (its committed offsets go with it).
AUTHORIZER_GRANTS = (*GROUP_GRANTS, Grant("topic", ("Delete",)))

GROUP = dict(session_timeout_ms=1500, heartbeat_interval_ms=100, enable_auto_commit=False)
RETENTION_MS = 60_000


def restart_gateway(cluster):
    cluster.restart_gateway()
    assert wait_until(lambda: len(cluster.admin.describe_cluster().nodes) == 3)


def test_a_commit_carries_the_leader_epoch_of_the_records_read(cluster):
    cluster.admin.create_topic("epochs", 1)
    cluster.client.produce("epochs", {0: make_batch([b"a", b"b"])})
    leader_epoch = cluster.gateway.registry.route("epochs", 0).leader_epoch
    assert leader_epoch >= 0
    tp = TopicPartition("epochs", 0)
    with Consumer(cluster.address, group_id="g", auto_offset_reset="earliest", **GROUP) as c:
        c.assign([tp])
        assert len(drain(c, 2)) == 2
        c.commit()
        committed = c.committed(tp)[tp]
    assert (committed.offset, committed.leader_epoch) == (2, leader_epoch)
    stored = cluster.gateway.offsets.committed("g")[("epochs", 0)]
    assert stored.leader_epoch == leader_epoch


def test_group_metadata_records_follow_rebalances_and_survive_a_restart(cluster):
    cluster.admin.create_topic("watched", 2)
    with Consumer(cluster.address, group_id="watchers", **GROUP) as consumer:
        consumer.subscribe(["watched"])
        assert wait_until(lambda: (consumer.poll(timeout_ms=50), consumer.assignment())[1])
        assert cluster.gateway.coordinator.wait_persisted(10)
        meta = cluster.gateway.offsets.group_metadata("watchers")
        assert meta is not None and meta.protocol_type == "consumer"
        assert meta.protocol == "range" and len(meta.members) == 1
        assert decode_subscription_topics(meta.members[0].subscription) == ["watched"]
        stable_generation = meta.generation
    # The consumer left: the group is empty, and its record says so, with a later timestamp.
    assert wait_until(lambda: cluster.gateway.coordinator.groups_with_members() == set())
    assert cluster.gateway.coordinator.wait_persisted(10)
    empty = cluster.gateway.offsets.group_metadata("watchers")
    assert empty.members == () and empty.generation > stable_generation
    assert empty.current_state_timestamp_ms >= meta.current_state_timestamp_ms
    restart_gateway(cluster)
    assert cluster.gateway.offsets.group_metadata("watchers") == empty  # read back


def test_committed_offsets_expire_after_retention_by_kafkas_rules(cluster):
    cluster.admin.create_topic("kept", 1)
    tp = TopicPartition("kept", 0)
    offsets = cluster.gateway.offsets
    # A group that never had members (assign() users): each offset from its commit time.
    with Consumer(cluster.address, group_id="standalone", **GROUP) as c:
        c.assign([tp])
        c.commit({tp: 5})
    commit_ms = offsets.committed("standalone")[("kept", 0)].commit_timestamp_ms
    # A consumer group: from the moment it became empty, however old its commits.
    with Consumer(cluster.address, group_id="members", **GROUP) as c:
        c.subscribe(["kept"])
        assert wait_until(lambda: (c.poll(timeout_ms=50), c.assignment())[1])
        c.commit({tp: 3})
        active = cluster.gateway.coordinator.groups_with_members()
        assert offsets.expire_offsets(commit_ms + 10 * RETENTION_MS, RETENTION_MS, active) == 1
        assert "members" in offsets.group_ids()  # a group with members keeps its offsets
    assert "standalone" not in offsets.group_ids()
    assert wait_until(lambda: cluster.gateway.coordinator.groups_with_members() == set())
    assert cluster.gateway.coordinator.wait_persisted(10)
    empty_since = offsets.group_metadata("members").current_state_timestamp_ms
    assert offsets.expire_offsets(empty_since + RETENTION_MS - 1, RETENTION_MS, set()) == 0
    assert offsets.expire_offsets(empty_since + RETENTION_MS, RETENTION_MS, set()) == 1
    assert offsets.group_metadata("members") is None  # an empty group with no offsets goes
    # The deletions are tombstones in the topic: a restarted gateway reads none of it back.
    restart_gateway(cluster)
    assert cluster.gateway.offsets.group_ids() == set()
    assert cluster.gateway.offsets.group_metadata("members") is None


def test_a_corrupt_batch_in_the_offsets_topic_costs_only_its_own_commits(cluster):
    cluster.admin.create_topic("ledger", 1)
    tp = TopicPartition("ledger", 0)
    store = cluster.gateway.offsets
    with Consumer(cluster.address, group_id="auditors", **GROUP) as c:
        c.assign([tp])
        c.commit({tp: 10})
        c.commit({tp: 20})
        c.commit({tp: 30})
    partition = store.partition_for("auditors")
    log = cluster.log(OFFSETS_TOPIC, partition)
    path = log.active_segment.log.path
    data = bytearray(path.read_bytes())
    positions, pos = [], 0
    while pos < len(data):
        positions.append(pos)
        pos += RecordBatch(data, pos).size_in_bytes
    last = positions[-1]
    data[last + RecordBatch(data, last).size_in_bytes - 1] ^= 0xFF  # the commit of 30
    with open(path, "r+b") as f:
        f.seek(last)
        f.write(data[last:])
    restart_gateway(cluster)
    with Consumer(cluster.address, group_id="auditors", **GROUP) as c:
        assert c.committed(tp)[tp].offset == 20  # the batch before it is still read
        c.assign([tp])
        c.commit({tp: 40})  # and the group keeps working
        assert c.committed(tp)[tp].offset == 40


def test_deleting_a_topic_deletes_its_committed_offsets(cluster):
    cluster.admin.create_topic("reborn", 1)
    cluster.admin.create_topic("kept", 1)
    tp, other = TopicPartition("reborn", 0), TopicPartition("kept", 0)
    with Consumer(cluster.address, group_id="readers", **GROUP) as c:
        c.assign([tp, other])
        c.commit({tp: 1, other: 7})
    cluster.admin.delete_topic("reborn")
    cluster.admin.create_topic("reborn", 1)
    cluster.client.produce("reborn", {0: make_batch([b"first", b"second"])})
    config = dict(group_id="readers", auto_offset_reset="earliest", **GROUP)
    with Consumer(cluster.address, **config) as c:
        assert c.committed([tp, other]) == {tp: None, other: c.committed(other)[other]}
        assert c.committed(other)[other].offset == 7  # other topics' offsets stay
        c.assign([tp])
        # Read from the new topic's start, not from the old topic's offset 1 (which
        # would skip a record of the new topic silently).
        assert [r.value for r in drain(c, 2)] == [b"first", b"second"]
    restart_gateway(cluster)  # the deletion is in the topic, not only in memory
    assert set(cluster.gateway.offsets.committed("readers")) == {("kept", 0)}
