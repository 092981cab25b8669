"""seglog's consumer in groups against a real in-process cluster (the authorizer off and on):
committed offsets, kept across a gateway restart; three members sharing a topic and
rebalancing as one leaves, stops heartbeating or stops polling; a subscribed topic created or
deleted."""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from seglog.client.consumer import Consumer
from seglog.client.membership import CommitFailedError
from seglog.client.producer import Producer
from seglog.client.structs import OffsetAndMetadata, TopicPartition
from seglog.v1 import common_pb2, groups_pb2, groups_pb2_grpc
from tests.authorizer_modes import AUTHORIZER_MODES
from tests.cluster import drain
from tests.producing import produce
from tests.waiting import wait_until

# The group tests run with the authorizer off and on (conftest's cluster, GROUP_GRANTS).
BOTH_AUTHORIZER_MODES = pytest.mark.parametrize("cluster", AUTHORIZER_MODES, indirect=True)
GROUP_CONFIG = {"session_timeout_ms": 1500, "heartbeat_interval_ms": 100}


@BOTH_AUTHORIZER_MODES
def test_manual_commits_and_committed_offsets(cluster):
    cluster.admin.create_topic("ledger", 2)
    produce(cluster.address, "ledger", [b"x"] * 10, partition=0)
    tp0, tp1 = TopicPartition("ledger", 0), TopicPartition("ledger", 1)
    config = dict(group_id="auditors", auto_offset_reset="earliest", enable_auto_commit=False)
    with Consumer(cluster.address, **config) as consumer:
        consumer.assign([tp0, tp1])
        assert consumer.committed([tp0, tp1]) == {tp0: None, tp1: None}
        assert len(drain(consumer, 10)) == 10
        consumer.commit()
        assert consumer.committed(tp0)[tp0].offset == 10
        consumer.commit({tp1: OffsetAndMetadata(0, "checkpoint")})
        assert consumer.committed(tp1) == {tp1: OffsetAndMetadata(0, "checkpoint", -1)}
        done = []
        consumer.commit_async({tp0: 4}, callback=lambda offsets, exc: done.append(exc)).result(10)
        assert done == [None] and consumer.committed(tp0)[tp0].offset == 4
    with Consumer(cluster.address, **config) as again:
        again.assign([tp0])
        assert [r.offset for r in drain(again, 6)] == list(range(4, 10))


@BOTH_AUTHORIZER_MODES
def test_committed_offsets_survive_a_gateway_restart(cluster):
    cluster.admin.create_topic("durable", 3)
    tps = [TopicPartition("durable", p) for p in range(3)]
    config = dict(group_id="keepers", enable_auto_commit=False)
    with Consumer(cluster.address, **config) as consumer:
        consumer.assign(tps)
        consumer.commit({tp: 100 + tp.partition for tp in tps})
        consumer.commit({tps[0]: 7})  # the newer commit wins after the read-back
    cluster.restart_gateway()
    assert wait_until(lambda: len(cluster.admin.describe_cluster().nodes) == 3)
    with Consumer(cluster.address, **config) as consumer:
        committed = consumer.committed(tps)
    assert {tp: meta.offset for tp, meta in committed.items()} == {
        tps[0]: 7,
        tps[1]: 101,
        tps[2]: 102,
    }
    offsets_log = cluster.log("__consumer_offsets", 0)
    assert offsets_log.config.cleanup_policy == "compact"


@BOTH_AUTHORIZER_MODES
def test_three_consumers_share_a_topic_and_rebalance_when_one_leaves(cluster):
    cluster.admin.create_topic("shared", 6)
    total = 3000
    produce_values = [b"%d" % i for i in range(total)]
    with Producer(cluster.address) as producer:
        for i, value in enumerate(produce_values):
            producer.send("shared", value, partition=i % 6)

    seen: dict[int, list[bytes]] = {}  # generation -> values read in it
    lock = threading.Lock()
    stop = threading.Event()
    leaver_reading = threading.Event()
    leaver_done = threading.Event()

    def member(name, leave_after):
        consumer = Consumer(
            cluster.address,
            group_id="sharers",
            client_id=name,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            max_poll_records=50,
            **GROUP_CONFIG,
        )
        consumer.subscribe(["shared"])
        read = 0
        first_generation = None
        try:
            while not stop.is_set():
                records = consumer.poll_records(timeout_ms=100)
                if first_generation not in (None, consumer.generation) and consumer.paused():
                    consumer.resume(*consumer.paused())  # the others joined: read beside them
                if not records:
                    continue
                generation = consumer.generation
                try:
                    consumer.commit()
                except CommitFailedError:
                    continue  # another member owns these now and reads them from the commit
                with lock:
                    seen.setdefault(generation, []).extend(r.value for r in records)
                if leave_after and first_generation is None:
                    # Alone in its first generation: it waits for the others before reading on.
                    first_generation = generation
                    consumer.pause(*consumer.assignment())
                    leaver_reading.set()
                elif leave_after and generation != first_generation:
                    read += len(records)
                    if read >= leave_after:
                        return  # mid-stream, in a generation it shares
                time.sleep(0.01)  # pace the reading so the rebalance lands mid-stream
        finally:
            consumer.close()
            if leave_after:
                leaver_done.set()

    # The leaver reads a batch first and waits, then the others join, and it leaves after
    # reading 100 records beside them: it keeps partitions with records enough for that,
    # however late a member's thread gets going on a busy machine.
    threads = [
        threading.Thread(target=member, args=("c", 100)),
        threading.Thread(target=member, args=("a", 0)),
        threading.Thread(target=member, args=("b", 0)),
    ]
    threads[0].start()
    assert leaver_reading.wait(30)
    for t in threads[1:]:
        t.start()
    assert leaver_done.wait(30)

    def everything_read():
        with lock:
            return len({v for values in seen.values() for v in values}) == total

    assert wait_until(everything_read, timeout_s=60)
    stop.set()
    for t in threads:
        t.join(10)
    with lock:
        generations = sorted(seen)
        # Within one generation, each record is read by exactly one member, once.
        for generation in generations:
            values = seen[generation]
            assert len(values) == len(set(values)), f"generation {generation} read twice"
        assert {v for values in seen.values() for v in values} == set(produce_values)
    assert len(generations) >= 2  # the leave made a new generation that kept reading


@BOTH_AUTHORIZER_MODES
def test_a_member_that_stops_heartbeating_is_removed(cluster):
    cluster.admin.create_topic("watched", 2)
    stub = groups_pb2_grpc.GroupCoordinatorStub(grpc.insecure_channel(cluster.address))
    silent = stub.JoinGroup(
        groups_pb2.JoinGroupRequest(
            group_id="watchers",
            client_id="silent",
            topics=["watched"],
            session_timeout_ms=500,
            rebalance_timeout_ms=5000,
            assignment_strategies=["range"],
        )
    )
    assert silent.error == 0 and silent.generation_id == 1
    assert sum(len(tp.partitions) for tp in silent.assignment) == 2
    with Consumer(cluster.address, group_id="watchers", **GROUP_CONFIG) as consumer:
        consumer.subscribe(["watched"])
        # The silent member never heartbeats: after its session timeout the group
        # rebalances and the live consumer gets every partition.
        assert wait_until(
            lambda: consumer.poll(timeout_ms=50) is not None and len(consumer.assignment()) == 2,
            timeout_s=20,
        )
        assert consumer.generation >= 2
    answer = stub.Heartbeat(
        groups_pb2.GroupHeartbeatRequest(
            group_id="watchers", member_id=silent.member_id, generation_id=1
        )
    )
    assert common_pb2.ErrorCode.Name(answer.error) == "UNKNOWN_MEMBER_ID"


@BOTH_AUTHORIZER_MODES
def test_a_consumer_that_stops_polling_leaves_the_group_until_it_polls_again(cluster):
    cluster.admin.create_topic("paced", 2)
    config = dict(
        group_id="pacers",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_poll_interval_ms=800,
        **GROUP_CONFIG,
    )
    slow = Consumer(cluster.address, client_id="slow", **config)
    quick = Consumer(cluster.address, client_id="quick", **config)
    stop = threading.Event()

    def keep_polling():
        while not stop.is_set():
            quick.poll(timeout_ms=50)

    try:
        slow.subscribe(["paced"])
        assert wait_until(lambda: slow.poll(timeout_ms=50) is not None and slow.assignment())
        quick.subscribe(["paced"])
        poller = threading.Thread(target=keep_polling)
        poller.start()
        one_each = lambda: len(slow.assignment()) == len(quick.assignment()) == 1  # noqa: E731
        assert wait_until(lambda: slow.poll(timeout_ms=50) is not None and one_each())
        taken = slow.assignment()
        # Heartbeats go on, but no poll for longer than max_poll_interval_ms: the slow
        # consumer leaves, and the quick one is given both partitions without waiting out
        # the slow one's session.
        assert wait_until(lambda: len(quick.assignment()) == 2, timeout_s=10)
        with pytest.raises(CommitFailedError, match="max_poll_interval_ms"):
            slow.commit({tp: 0 for tp in taken})
        # Its next polls join the group again.
        assert wait_until(lambda: slow.poll(timeout_ms=50) is not None and one_each())
        slow.commit({tp: 0 for tp in slow.assignment()})
    finally:
        stop.set()
        if "poller" in locals():
            poller.join(10)
        slow.close()
        quick.close()


@pytest.mark.slow
def test_the_group_rebalances_when_a_subscribed_topic_is_created_or_deleted(cluster):
    cluster.admin.create_topic("present", 1)
    with Consumer(
        cluster.address, group_id="watchers-of-topics", auto_offset_reset="earliest", **GROUP_CONFIG
    ) as consumer:
        consumer.subscribe(["present", "later"])
        assert wait_until(
            lambda: consumer.poll(timeout_ms=50) is not None and consumer.assignment()
        )
        assert consumer.assignment() == {TopicPartition("present", 0)}
        first_generation = consumer.generation

        cluster.admin.create_topic("later", 2)
        produce(cluster.address, "later", [b"new-%d" % i for i in range(4)], partition=1)
        read = drain(consumer, 4)
        assert sorted(r.value for r in read) == [b"new-%d" % i for i in range(4)]
        assert consumer.assignment() == {
            TopicPartition("present", 0),
            TopicPartition("later", 0),
            TopicPartition("later", 1),
        }
        assert consumer.generation > first_generation

        cluster.admin.delete_topic("later")
        assert wait_until(
            lambda: (
                consumer.poll(timeout_ms=50) is not None
                and consumer.assignment() == {TopicPartition("present", 0)}
            )
        )
