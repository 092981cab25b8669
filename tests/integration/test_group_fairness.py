"""Clients looping JoinGroup on a group they may join cannot starve its other members: a
legitimate consumer reads its records within a bound while 16 clients join without pause
(before the fix: not one of 10 records in 125 s, 554,270 COORDINATOR_NOT_AVAILABLE answers)."""

from __future__ import annotations

import threading
import time
from collections import Counter

import grpc
import pytest

from seglog.client.consumer import Consumer
from seglog.client.producer import Producer
from seglog.v1 import common_pb2, groups_pb2, groups_pb2_grpc
from tests.cluster import LocalCluster

ATTACKERS = 16
RECORDS = 10
READ_BOUND_S = 20.0


@pytest.fixture(scope="module")
def one_node(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("fairness"), nodes=1)
    yield cluster
    cluster.close()


class JoinLoop:
    """`ATTACKERS` clients, each on its own connection, calling JoinGroup without pause: as
    a new member, then with the id it was given; an answer's member id is kept, even one
    that came with an error."""

    def __init__(self, address: str, group_id: str, topic: str) -> None:
        self.address, self.group_id, self.topic = address, group_id, topic
        self.answers: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._loop, args=(n,), daemon=True) for n in range(ATTACKERS)
        ]

    def __enter__(self) -> JoinLoop:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)
        assert not any(t.is_alive() for t in self._threads)

    def _loop(self, n: int) -> None:
        channel = grpc.insecure_channel(self.address)
        stub = groups_pb2_grpc.GroupCoordinatorStub(channel)
        member_id = ""
        try:
            while not self._stop.is_set():
                request = groups_pb2.JoinGroupRequest(
                    group_id=self.group_id,
                    member_id=member_id,
                    client_id=f"looper-{n}",
                    topics=[self.topic],
                    session_timeout_ms=6000,
                    rebalance_timeout_ms=60_000,
                    assignment_strategies=["range"],
                )
                try:
                    answer = stub.JoinGroup(request, timeout=5)
                except grpc.RpcError as exc:
                    with self._lock:
                        self.answers[exc.code().name] += 1
                    continue
                reason = common_pb2.ErrorCode.Name(answer.error)
                with self._lock:
                    self.answers[reason] += 1
                if reason == "UNKNOWN_MEMBER_ID":
                    member_id = ""
                elif answer.member_id:
                    member_id = answer.member_id
        finally:
            channel.close()


def _records_read(address: str, group_id: str, topic: str) -> tuple[int, float]:
    """Records a new consumer of the group reads, and the seconds it took (it gives up at
    three times the bound)."""
    started = time.monotonic()
    read = 0
    with Consumer(
        address,
        group_id=group_id,
        auto_offset_reset="earliest",
        session_timeout_ms=6000,
        heartbeat_interval_ms=100,
    ) as consumer:
        consumer.subscribe([topic])
        while read < RECORDS and time.monotonic() - started < READ_BOUND_S * 3:
            read += len(consumer.poll_records(timeout_ms=200))
    return read, time.monotonic() - started


def test_looping_joiners_do_not_starve_a_legitimate_consumer(one_node):
    topic = group_id = "contested"
    # The loopers subscribe to another topic, so the partition is the consumer's to read
    # once it holds a generation: what delays it is only the loopers' joins.
    one_node.admin.create_topic(topic, 1, 1)
    one_node.admin.create_topic("decoy", 1, 1)
    with Producer(one_node.address, linger_ms=0) as producer:
        for future in [producer.send(topic, b"%d" % i) for i in range(RECORDS)]:
            future.get(timeout=10)
    with JoinLoop(one_node.address, group_id, "decoy") as loop:
        read, seconds = _records_read(one_node.address, group_id, topic)
    # Before: 0 of 10 records in 60 s, the consumer's joins answered COORDINATOR_NOT_AVAILABLE.
    print(
        f"{read} records read in {seconds:.1f} s beside {ATTACKERS} looping joiners: {loop.answers}"
    )
    assert read == RECORDS and seconds < READ_BOUND_S, (read, seconds, loop.answers)
    assert "COORDINATOR_NOT_AVAILABLE" not in loop.answers
