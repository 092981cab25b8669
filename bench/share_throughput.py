"""Share-group throughput, in the `groups` group: RECORDS records of 100 B on a topic of 2
partitions, read and acknowledged by a share group of SHARE_MEMBERS members (KIP-932: several
members per partition, each record acquired by one and accepted), against the same records
read by CLASSIC_MEMBERS classic consumers (one partition each), on seglog.

The members are lightweight protocol clients, threads of this process on connections of their
own, as in groups.py. A share member joins with ShareGroupHeartbeat, then loops ShareFetch
(MAX_RECORDS a fetch), each fetch carrying the ACCEPT of what the one before acquired, as
Kafka's share consumer piggybacks its acknowledgements. A classic member loops Fetch of its
partition from offset 0. The share group is joined and its share partitions started (at the
empty log's end) before the records are written, so it reads all of them without a group
config. Each side's clock runs from its first fetch to the last record accepted (share) or
read (classic): the share group's figure includes its acknowledgements, which a classic group
pays for once per commit rather than once per fetch.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import confluent_kafka
from kafka.protocol.consumer import FetchResponse

from services.gateway.kafka.share_messages import (
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
    ShareFetchRequest,
    ShareFetchResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from services.gateway.share.batch_walk import batch_headers
from tests.kafka_wire import KafkaWire, fetch_request

from .kafka_protocol_rounds import Side

RECORDS = 200_000
VALUE_BYTES = 100
PARTITIONS = 2
SHARE_MEMBERS = 8
CLASSIC_MEMBERS = 2
MAX_RECORDS = 500
TIMEOUT_S = 120.0
ACCEPT = 1
RETRIABLE = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR
# (topic id, partition) -> the acquired (first, last) offset ranges still to accept.
Pending = dict[tuple[Any, int], list[tuple[int, int]]]


def _produce(bootstrap: str, topic: str) -> None:
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"}
    )
    value = b"v" * VALUE_BYTES
    for index in range(RECORDS):
        while True:
            try:
                producer.produce(topic, value, partition=index % PARTITIONS)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.05)
    if producer.flush(TIMEOUT_S) != 0:
        raise TimeoutError("the share throughput bench's records were not all written")


class _Progress:
    """Records done (accepted or read) across the members, and when the last one was."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done = 0
        self.finished = threading.Event()
        self.finished_at = 0.0

    def add(self, count: int) -> None:
        with self.lock:
            self.done += count
            if self.done >= RECORDS and not self.finished.is_set():
                self.finished_at = time.monotonic()
                self.finished.set()


def _joined(bootstrap: str, group_id: str, topic: str) -> dict[str, tuple[int, list[Any]]]:
    """Every member joined and its assignment settled: member id -> (epoch, topic partitions)."""
    members = {str(uuid.uuid4()): (0, []) for _ in range(SHARE_MEMBERS)}
    deadline = time.monotonic() + TIMEOUT_S
    with KafkaWire(bootstrap, timeout_s=TIMEOUT_S) as wire:
        while time.monotonic() < deadline:
            changed = False
            for member_id, (epoch, held) in list(members.items()):
                request = ShareGroupHeartbeatRequest[1](
                    group_id=group_id,
                    member_id=member_id,
                    member_epoch=epoch,
                    rack_id=None,
                    subscribed_topic_names=[topic] if epoch == 0 else None,
                )
                answer = wire.request(request, 1, ShareGroupHeartbeatResponse)
                if answer.error_code in RETRIABLE:
                    changed = True
                    continue
                if answer.error_code:
                    raise RuntimeError(f"share heartbeat error {answer.error_code}")
                now_held = held if answer.assignment is None else answer.assignment.topic_partitions
                changed |= answer.member_epoch != epoch or now_held != held
                members[member_id] = (answer.member_epoch, now_held)
            if not changed and all(held for _, held in members.values()):
                return members
        raise TimeoutError(f"share group {group_id} did not settle")


def _share_fetch(
    wire: KafkaWire,
    group_id: str,
    member_id: str,
    session_epoch: int,
    held: list[Any],
    pending: Pending,
) -> Any:
    fetch = ShareFetchRequest[1]
    topics = [
        fetch.FetchTopic(
            topic_id=assigned.topic_id,
            partitions=[
                fetch.FetchTopic.FetchPartition(
                    partition_index=partition,
                    acknowledgement_batches=[
                        fetch.FetchTopic.FetchPartition.AcknowledgementBatch(
                            first_offset=first, last_offset=last, acknowledge_types=[ACCEPT]
                        )
                        for first, last in pending.get((assigned.topic_id, partition), [])
                    ],
                )
                for partition in assigned.partitions
            ],
        )
        for assigned in held
    ]
    request = fetch(
        group_id=group_id,
        member_id=member_id,
        share_session_epoch=session_epoch,
        max_wait_ms=100,
        min_bytes=1,
        max_bytes=1 << 20,
        max_records=MAX_RECORDS,
        batch_size=MAX_RECORDS,
        topics=topics,
        forgotten_topics_data=[],
    )
    answer = wire.request(request, 1, ShareFetchResponse)
    if answer.error_code:
        raise RuntimeError(f"share fetch error {answer.error_code}")
    return answer


def _share_member(
    bootstrap: str, group_id: str, member_id: str, held: list[Any], progress: _Progress
) -> None:
    pending: Pending = {}
    session_epoch = 1  # its share session opened by the first fetch (records_per_s)
    with KafkaWire(bootstrap, timeout_s=TIMEOUT_S) as wire:
        while not progress.finished.is_set():
            answer = _share_fetch(wire, group_id, member_id, session_epoch, held, pending)
            session_epoch += 1
            accepted = sum(last - first + 1 for spans in pending.values() for first, last in spans)
            pending = {}
            for topic in answer.responses:
                for part in topic.partitions:
                    if part.error_code or part.acknowledge_error_code:
                        raise RuntimeError(
                            f"share fetch of partition {part.partition_index}: errors "
                            f"{part.error_code}/{part.acknowledge_error_code}"
                        )
                    pending[(topic.topic_id, part.partition_index)] = [
                        (r.first_offset, r.last_offset) for r in part.acquired_records
                    ]
            progress.add(accepted)
        if any(pending.values()):  # acquired after the count was reached: given back accepted
            _acknowledge(wire, group_id, member_id, session_epoch, pending)


def _acknowledge(
    wire: KafkaWire, group_id: str, member_id: str, session_epoch: int, pending: Pending
) -> None:
    ack = ShareAcknowledgeRequest[1]
    topics: dict[Any, list[Any]] = {}
    for (topic_id, partition), ranges in pending.items():
        topics.setdefault(topic_id, []).append(
            ack.AcknowledgeTopic.AcknowledgePartition(
                partition_index=partition,
                acknowledgement_batches=[
                    ack.AcknowledgeTopic.AcknowledgePartition.AcknowledgementBatch(
                        first_offset=first, last_offset=last, acknowledge_types=[ACCEPT]
                    )
                    for first, last in ranges
                ],
            )
        )
    request = ack(
        group_id=group_id,
        member_id=member_id,
        share_session_epoch=session_epoch,
        topics=[ack.AcknowledgeTopic(topic_id=t, partitions=p) for t, p in topics.items()],
    )
    wire.request(request, 1, ShareAcknowledgeResponse)


def _classic_member(bootstrap: str, topic: str, partition: int, progress: _Progress) -> None:
    offset = 0
    with KafkaWire(bootstrap, timeout_s=TIMEOUT_S) as wire:
        while not progress.finished.is_set():
            request = fetch_request(11, {topic: [partition]}, fetch_offset=offset, max_wait_ms=100)
            answer = wire.request(request, 11, FetchResponse)
            (records,) = [p.records for t in answer.responses for p in t.partitions]
            read = 0
            for _, header in batch_headers(records or b""):
                read += header.next_offset - max(offset, header.base_offset)
                offset = header.next_offset
            progress.add(read)


def _timed(members: list[Callable[[_Progress], None]]) -> float:
    progress = _Progress()
    failures: list[BaseException] = []

    def member(run: Callable[[_Progress], None]) -> None:
        try:
            run(progress)
        except BaseException as exc:  # ends the round: the others stop at the event
            failures.append(exc)
            progress.finished.set()

    threads = [threading.Thread(target=member, args=(m,), daemon=True) for m in members]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    if not progress.finished.wait(TIMEOUT_S):
        raise TimeoutError(f"only {progress.done} of {RECORDS} records done")
    for thread in threads:
        thread.join(TIMEOUT_S)
    if failures:
        raise failures[0]
    return progress.finished_at - started


def records_per_s(side: Side) -> tuple[float, float]:
    """(share group's, classic group's) records per second on `side`."""
    topic = f"queue-{uuid.uuid4().hex[:8]}"
    group_id = f"share-{uuid.uuid4().hex[:8]}"
    side.create_topic(topic, PARTITIONS)
    members = _joined(side.bootstrap, group_id, topic)
    for member_id, (_, held) in members.items():  # share partitions start at the log's end
        with KafkaWire(side.bootstrap, timeout_s=TIMEOUT_S) as wire:
            _share_fetch(wire, group_id, member_id, 0, held, {})
    _produce(side.bootstrap, topic)
    share_s = _timed(
        [
            lambda p, m=member_id, h=held: _share_member(side.bootstrap, group_id, m, h, p)
            for member_id, (_, held) in members.items()
        ]
    )
    classic_s = _timed(
        [
            lambda p, n=partition: _classic_member(side.bootstrap, topic, n, p)
            for partition in range(CLASSIC_MEMBERS)
        ]
    )
    return RECORDS / share_s, RECORDS / classic_s
