"""The `groups` group (`make bench groups`): how long a consumer group of MEMBERS members over
one topic of PARTITIONS partitions takes from its first join to every partition held by
exactly one member, with Kafka's classic protocol and with the consumer protocol (KIP-848),
on seglog and on Apache Kafka 4.3.1 started beside it (one gateway and one storage node;
one KRaft broker), both with group.initial.rebalance.delay.ms 0. Target: seglog's consumer
protocol within Kafka's time (ratio <= 1.0).

The members are lightweight protocol clients, not 50 processes: the protocol's cost is the
coordinator's, and 50 librdkafka or JVM consumers would measure this two-core machine. Each
classic member is a thread on a connection of its own (its JoinGroup waits for the
rebalance): JoinGroup v5, the leader's range assignment in SyncGroup, a Heartbeat every
HEARTBEAT_S that sends it back to JoinGroup on REBALANCE_IN_PROGRESS. The consumer-protocol
members are driven in turns from one connection, each heartbeat carrying what its member
owns (so revocations are acknowledged at the next turn), as fast as the answers come.

ROUNDS rounds (SEGLOG_BENCH_GROUPS_ROUNDS, default 2), a new group each; each figure is its
best round. Measured on a shared two-core machine: indicative, the load is printed.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment
from kafka.protocol.metadata.find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)

from services.gateway.groups.offsets_formats import encode_assignment, encode_subscription
from services.gateway.kafka.consumer_group_apis import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from tests.kafka_wire import KafkaWire

from . import share_throughput
from .kafka_protocol import apache_kafka, both_started, seglog
from .kafka_protocol_rounds import Side

MEMBERS = 50
PARTITIONS = 500
ROUNDS = max(1, int(os.environ.get("SEGLOG_BENCH_GROUPS_ROUNDS", 2)))
HEARTBEAT_S = 0.1
TIMEOUT_S = 120.0
# Kafka's retriable coordinator answers: COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_.
RETRIABLE = {14, 15, 16}
MEMBER_ID_REQUIRED, REBALANCE_IN_PROGRESS = 79, 27


def _coordinator_ready(bootstrap: str, group_id: str) -> None:
    """FindCoordinator until the group's coordinator answers (it makes __consumer_offsets)."""
    deadline = time.monotonic() + TIMEOUT_S
    with KafkaWire(bootstrap) as wire:
        while True:
            request = FindCoordinatorRequest[1](key=group_id, key_type=0)
            if wire.request(request, 1, FindCoordinatorResponse).error_code == 0:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"no coordinator for {group_id}")
            time.sleep(0.2)


# -- the classic protocol ---------------------------------------------------------------------


class _ClassicGroup:
    """Members' last synced (generation, partitions), under one lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.synced: dict[int, tuple[int, int]] = {}
        self.done = threading.Event()
        self.stop = threading.Event()

    def record(self, index: int, generation: int, partitions: int) -> None:
        with self.lock:
            self.synced[index] = (generation, partitions)
            generations = {g for g, _ in self.synced.values()}
            total = sum(p for _, p in self.synced.values())
            if len(self.synced) == MEMBERS and len(generations) == 1 and total == PARTITIONS:
                self.done.set()


def _range(member_ids: list[str], topic: str) -> dict[str, bytes]:
    ordered = sorted(member_ids)
    share, extra = divmod(PARTITIONS, len(ordered))
    out, start = {}, 0
    for position, member_id in enumerate(ordered):
        count = share + (position < extra)
        out[member_id] = encode_assignment({topic: list(range(start, start + count))})
        start += count
    return out


def _classic_member(bootstrap: str, group_id: str, topic: str, index: int, group: _ClassicGroup):
    member_id = ""
    protocol = JoinGroupRequest[5].JoinGroupRequestProtocol(
        name="range", metadata=encode_subscription([topic])
    )
    with KafkaWire(bootstrap, timeout_s=TIMEOUT_S) as wire:
        while not group.stop.is_set():
            join = JoinGroupRequest[5](
                group_id=group_id,
                session_timeout_ms=30_000,
                rebalance_timeout_ms=30_000,
                member_id=member_id,
                group_instance_id=None,
                protocol_type="consumer",
                protocols=[protocol],
            )
            joined = wire.request(join, 5, JoinGroupResponse)
            if joined.error_code == MEMBER_ID_REQUIRED or joined.error_code in RETRIABLE:
                member_id = joined.member_id or member_id
                continue
            if joined.error_code:
                raise RuntimeError(f"JoinGroup: error {joined.error_code}")
            member_id, generation = joined.member_id, joined.generation_id
            assignments = []
            if joined.leader == member_id:
                plan = _range([m.member_id for m in joined.members], topic)
                assignments = [
                    SyncGroupRequest[3].SyncGroupRequestAssignment(member_id=m, assignment=a)
                    for m, a in plan.items()
                ]
            sync = SyncGroupRequest[3](
                group_id=group_id,
                generation_id=generation,
                member_id=member_id,
                group_instance_id=None,
                assignments=assignments,
            )
            synced = wire.request(sync, 3, SyncGroupResponse)
            if synced.error_code:
                continue  # a rebalance began meanwhile: join again
            held = ConsumerProtocolAssignment.decode(synced.assignment)
            group.record(
                index, generation, sum(len(a.partitions) for a in held.assigned_partitions)
            )
            while not group.stop.wait(HEARTBEAT_S):
                beat = HeartbeatRequest[3](
                    group_id=group_id,
                    generation_id=generation,
                    member_id=member_id,
                    group_instance_id=None,
                )
                if wire.request(beat, 3, HeartbeatResponse).error_code:
                    break  # REBALANCE_IN_PROGRESS (or fenced): join again


def classic_seconds(side: Side, topic: str) -> float:
    group_id = f"classic-{uuid.uuid4().hex[:8]}"
    _coordinator_ready(side.bootstrap, group_id)
    group = _ClassicGroup()
    threads = [
        threading.Thread(
            target=_classic_member,
            args=(side.bootstrap, group_id, topic, index, group),
            daemon=True,
        )
        for index in range(MEMBERS)
    ]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    finished = group.done.wait(TIMEOUT_S)
    elapsed = time.monotonic() - started
    group.stop.set()
    for thread in threads:
        thread.join(TIMEOUT_S)
    if not finished:
        raise TimeoutError(f"{side.name}: classic group of {MEMBERS} did not settle")
    return elapsed


# -- the consumer protocol --------------------------------------------------------------------


def consumer_seconds(side: Side, topic: str) -> float:
    group_id = f"consumer-{uuid.uuid4().hex[:8]}"
    _coordinator_ready(side.bootstrap, group_id)
    members = [str(uuid.uuid4()) for _ in range(MEMBERS)]
    epochs = dict.fromkeys(members, 0)
    owned: dict[str, dict[object, list[int]]] = {m: {} for m in members}
    request_class = ConsumerGroupHeartbeatRequest[1]
    started = time.monotonic()
    with KafkaWire(side.bootstrap, timeout_s=TIMEOUT_S) as wire:
        while time.monotonic() - started < TIMEOUT_S:
            changed = False
            for member_id in members:
                joining = epochs[member_id] == 0
                request = request_class(
                    group_id=group_id,
                    member_id=member_id,
                    member_epoch=epochs[member_id],
                    instance_id=None,
                    rack_id=None,
                    rebalance_timeout_ms=30_000 if joining else -1,
                    subscribed_topic_names=[topic] if joining else None,
                    subscribed_topic_regex=None,
                    server_assignor="range" if joining else None,
                    topic_partitions=[
                        request_class.TopicPartitions(topic_id=t, partitions=p)
                        for t, p in owned[member_id].items()
                    ],
                )
                answer = wire.request(request, 1, ConsumerGroupHeartbeatResponse)
                if answer.error_code in RETRIABLE:
                    changed = True
                    continue
                if answer.error_code:
                    raise RuntimeError(f"{side.name}: heartbeat error {answer.error_code}")
                changed |= answer.member_epoch != epochs[member_id]
                epochs[member_id] = answer.member_epoch
                if answer.assignment is not None:
                    held = {
                        t.topic_id: sorted(t.partitions) for t in answer.assignment.topic_partitions
                    }
                    changed |= held != owned[member_id]
                    owned[member_id] = held
            counts = [sum(len(p) for p in held.values()) for held in owned.values()]
            if not changed and sum(counts) == PARTITIONS and min(counts) > 0:
                return time.monotonic() - started
    raise TimeoutError(f"{side.name}: consumer group of {MEMBERS} did not settle")


def run(report: Callable[..., None]) -> None:
    with tempfile.TemporaryDirectory(prefix="seglog-bench-groups-") as tmp:
        root = Path(tmp)
        with both_started(
            [lambda: seglog(root / "seglog", 1), lambda: apache_kafka(root / "kafka", 1)]
        ) as sides:
            best: dict[tuple[str, str], float] = {}
            for side in sides:
                side.create_topic("rebalance", PARTITIONS)
            for turn in range(ROUNDS):
                order = sides if turn % 2 == 0 else list(reversed(sides))
                for side in order:
                    for protocol, measure in (
                        ("classic", classic_seconds),
                        ("consumer", consumer_seconds),
                    ):
                        seconds = measure(side, "rebalance")
                        print(f"  {side.name}: {protocol} protocol {seconds:.2f} s", flush=True)
                        key = (side.name, protocol)
                        best[key] = min(best.get(key, seconds), seconds)
            ours, kafka = sides[0].name, sides[1].name
            what = f"{MEMBERS} members over {PARTITIONS} partitions"
            report(
                f"groups: consumer-protocol rebalance, {what}, vs Kafka",
                best[(ours, "consumer")],
                best[(kafka, "consumer")],
                "s",
                1.0,
                higher_is_better=False,
            )
            report(
                f"groups: classic rebalance, {what}, vs Kafka",
                best[(ours, "classic")],
                best[(kafka, "classic")],
                "s",
                None,
                higher_is_better=False,
            )
            share_rate, classic_rate = share_throughput.records_per_s(sides[0])
            report(
                f"groups: share group of {share_throughput.SHARE_MEMBERS} on "
                f"{share_throughput.PARTITIONS} partitions vs a classic group of "
                f"{share_throughput.CLASSIC_MEMBERS}, seglog (rec/s)",
                share_rate,
                classic_rate,
                "rec/s",
                None,
            )
            report(
                f"groups: seglog consumer protocol vs its classic, {what}",
                best[(ours, "consumer")],
                best[(ours, "classic")],
                "s",
                None,
                higher_is_better=False,
            )
