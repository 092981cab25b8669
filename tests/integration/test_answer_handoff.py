"""Waits answered by the thread that made them answerable
(services/storage_node/answer_handoff.py), on a real three-node cluster whose followers fetch
and whose gateway produces over the bulk path: followers' rounds answered by the appending
thread, byte for byte in the followers' files, an answer too large for it left to the round's
own thread, not lost; and acks=all produces answered by the thread whose follower fetch moved
the high watermark past them, with their own offsets."""

from __future__ import annotations

import pytest

from seglog.client import Producer
from services.storage_node.bulk_answer import UNSENT_FITS_BYTES
from tests.batches import make_batch
from tests.cluster import LocalCluster
from tests.waiting import wait_until

TOPIC = "handed"


@pytest.fixture
def cluster(tmp_path):
    c = LocalCluster(tmp_path, nodes=3)
    c.admin.create_topic(TOPIC, 1, 3, configs={"min.insync.replicas": "2"})
    yield c
    c.close()


def _followers_waiting(cluster) -> bool:
    """Both followers' rounds wait at the leader, open to the next append's thread."""
    leader = cluster.leader_of(TOPIC, 0)
    sessions = leader.replicas.fetches.sessions
    followers = [number for number, n in cluster.nodes.items() if n is not leader]
    return all(
        any(s.handoff is not None and s.handoff.is_open for s in sessions.of_replica(follower))
        for follower in followers
    )


def _segment_bytes(node):
    log = node.replicas.partition(TOPIC, 0).log
    return {path.name: path.read_bytes() for path in sorted(log.directory.glob("*.log"))}


def test_rounds_waiting_at_an_acks_all_append_are_answered_by_its_thread_byte_for_byte(cluster):
    leader = cluster.leader_of(TOPIC, 0)
    appends = 20
    for i in range(appends):
        wait_until(lambda: _followers_waiting(cluster), timeout_s=10)
        [result] = cluster.client.produce(TOPIC, {0: make_batch([b"v%d" % i] * 3)}, acks=-1)
        assert result.error == 0
    assert leader.bulk is not None
    assert leader.bulk.rounds_answered_by_appenders > 0
    assert leader.bulk.rounds_left_by_appenders == 0
    assert leader.bulk.produce.answers_sent_elsewhere > 0
    log = leader.replicas.partition(TOPIC, 0).log
    assert log.high_watermark == log.log_end_offset == 3 * appends
    wait_until(
        lambda: all(_segment_bytes(n) == _segment_bytes(leader) for n in cluster.nodes.values()),
        timeout_s=10,
    )


def test_an_answer_too_large_for_the_appender_is_sent_by_the_rounds_own_thread(cluster):
    leader = cluster.leader_of(TOPIC, 0)
    value = bytes(range(256)) * (UNSENT_FITS_BYTES // 256 + 1)  # incompressible enough
    wait_until(lambda: _followers_waiting(cluster), timeout_s=10)
    [result] = cluster.client.produce(TOPIC, {0: make_batch([value])}, acks=-1)
    assert result.error == 0
    assert leader.bulk is not None
    assert leader.bulk.rounds_left_by_appenders > 0
    wait_until(
        lambda: all(_segment_bytes(n) == _segment_bytes(leader) for n in cluster.nodes.values()),
        timeout_s=10,
    )


def test_a_producer_acks_all_through_the_handoff_reads_back_every_record(cluster):
    with Producer(cluster.address, acks="all", linger_ms=1) as producer:
        futures = [producer.send(TOPIC, value=b"r%d" % i, partition=0) for i in range(2_000)]
        producer.flush()
    offsets = [f.result(10).offset for f in futures]
    assert offsets == list(range(2_000))
    leader = cluster.leader_of(TOPIC, 0)
    assert leader.bulk is not None
    assert leader.bulk.rounds_answered_by_appenders > 0
    assert leader.bulk.produce.answers_sent_elsewhere > 0
