"""Kafka's committed offsets: OffsetCommit 2–8, OffsetFetch 1–7, OffsetDelete 0, on the same
store as the gRPC API's (groups/offsets_store.py): a group's offsets are the same whichever
API commits or reads them.

Authorization is Kafka's: the group as a whole (Read to commit, Describe to fetch, Delete to
delete), each topic on its own (Read; Describe to fetch), so a topic the principal may not
use answers TOPIC_AUTHORIZATION_FAILED for its partitions while the others proceed. A commit
with generation -1 is a simple commit, outside any group membership, allowed only while the
group has no members. RetentionTimeMs (v2–v4) is not honoured: offsets.retention.minutes
applies to every offset, as for Kafka's v5+ commits. OffsetFetch v7's require_stable answers
UNSTABLE_OFFSET_COMMIT for partitions with transactional offsets pending (KIP-447).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from kafka import errors as kafka_errors
from kafka.protocol.consumer.group import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)

from seglog.errors import GroupIdNotFoundError, GroupSubscribedToTopicError, SeglogError

from ..groups.group_state import OffsetToCommit
from .api_table import ApiTable
from .error_codes import NONE, TOPIC_AUTHORIZATION_FAILED, kafka_error_code
from .group_apis import group_error_code, on_coordinator
from .kafka_call import KafkaCall

NO_OFFSET = -1
UNSTABLE_OFFSET_COMMIT: int = kafka_errors.UnstableOffsetCommitError.errno
NO_LEADER_EPOCH = -1


def _topics_allowed(call: KafkaCall, operation: str, topics: set[str]) -> set[str]:
    return {topic for topic in topics if call.allowed(operation, "topic", topic)}


# -- OffsetCommit ----------------------------------------------------------------------------


def offset_commit(call: KafkaCall, request: Any) -> Any:
    version = call.version
    response_class = OffsetCommitResponse[version]
    group_id = request.group_id
    asked = [(t.name, p) for t in request.topics for p in t.partitions]
    allowed = _topics_allowed(call, "Read", {topic for topic, _ in asked})
    entries = [
        OffsetToCommit(
            topic=topic,
            partition=p.partition_index,
            offset=p.committed_offset,
            leader_epoch=p.committed_leader_epoch if version >= 6 else NO_LEADER_EPOCH,
            metadata=p.committed_metadata or "",
        )
        for topic, p in asked
        if topic in allowed
    ]
    groups = call.core.groups
    coordinator = call.core.coordinator

    def commit() -> list[SeglogError | None]:
        coordinator.check_commit(
            group_id,
            request.member_id,
            request.generation_id_or_member_epoch,
            request.group_instance_id if version >= 7 else None,
        )
        return groups.commit_offsets(group_id, entries)

    codes: dict[tuple[str, int], int] = {}
    try:
        problems = on_coordinator(call, "CommitOffsets", group_id, commit)
        for entry, problem in zip(entries, problems, strict=True):
            codes[(entry.topic, entry.partition)] = (
                NONE if problem is None else kafka_error_code(problem)
            )
    except SeglogError as exc:  # the group, the member, or the coordinator: every partition
        for entry in entries:
            codes[(entry.topic, entry.partition)] = group_error_code(exc)
    by_topic: dict[str, list[Any]] = defaultdict(list)
    topic_class = response_class.OffsetCommitResponseTopic
    for topic, p in asked:
        code = codes.get((topic, p.partition_index), TOPIC_AUTHORIZATION_FAILED)
        by_topic[topic].append(
            topic_class.OffsetCommitResponsePartition(
                partition_index=p.partition_index, error_code=code
            )
        )
    return response_class(
        throttle_time_ms=0,
        topics=[topic_class(name=name, partitions=parts) for name, parts in by_topic.items()],
    )


# -- OffsetFetch -----------------------------------------------------------------------------


def offset_fetch(call: KafkaCall, request: Any) -> Any:
    version = call.version
    response_class = OffsetFetchResponse[version]
    topic_class = response_class.OffsetFetchResponseTopic
    partition_class = topic_class.OffsetFetchResponsePartition
    group_id = request.group_id
    every = request.topics is None  # v2+: null asks for every committed partition
    asked = [] if every else [(t.name, p) for t in request.topics for p in t.partition_indexes]
    groups = call.core.groups
    unstable: set[tuple[str, int]] = set()
    try:
        answer, unstable = on_coordinator(
            call, "FetchOffsets", group_id, lambda: groups.fetch_offsets(group_id)
        )
        group_error = NONE
    except SeglogError as exc:
        answer, group_error = {}, group_error_code(exc)
    # v7+ require_stable (KIP-447): a partition with transactional offsets pending answers
    # UNSTABLE_OFFSET_COMMIT (the client retries until the transaction ends); without it,
    # the committed offset is answered as if the transaction were not there.
    if not (version >= 7 and request.require_stable):
        unstable = set()
    if every:
        asked = sorted(answer)
    allowed = _topics_allowed(call, "Describe", {topic for topic, _ in asked})
    if every:
        asked = [(topic, p) for topic, p in asked if topic in allowed]
    by_topic: dict[str, list[Any]] = defaultdict(list)
    for topic, partition in asked:
        entry = answer.get((topic, partition))
        code = group_error if version < 2 else NONE  # v2+: the group's error is top-level
        if topic not in allowed:
            code = TOPIC_AUTHORIZATION_FAILED
        elif code == NONE and (topic, partition) in unstable:
            code = UNSTABLE_OFFSET_COMMIT
        by_topic[topic].append(
            partition_class(
                partition_index=partition,
                committed_offset=entry.offset if entry and code == NONE else NO_OFFSET,
                committed_leader_epoch=(
                    entry.leader_epoch if entry and code == NONE else NO_LEADER_EPOCH
                ),
                metadata=entry.metadata if entry and code == NONE else "",
                error_code=code,
            )
        )
    return response_class(
        throttle_time_ms=0,
        topics=[topic_class(name=name, partitions=parts) for name, parts in by_topic.items()],
        error_code=group_error,
    )


# -- OffsetDelete ----------------------------------------------------------------------------


def offset_delete(call: KafkaCall, request: Any) -> Any:
    response_class = OffsetDeleteResponse[call.version]
    topic_class = response_class.OffsetDeleteResponseTopic
    group_id = request.group_id
    asked = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    allowed = _topics_allowed(call, "Read", {topic for topic, _ in asked})
    groups = call.core.groups
    coordinator = call.core.coordinator
    codes: dict[tuple[str, int], int] = {}

    def delete() -> None:
        if not groups.offsets.committed(group_id) and coordinator.snapshot(group_id) is None:
            raise GroupIdNotFoundError(f"group {group_id!r} not found")
        read = coordinator.subscribed_topics(group_id)
        doomed = []
        for topic, partition in asked:
            if topic not in allowed:
                codes[(topic, partition)] = TOPIC_AUTHORIZATION_FAILED
            elif topic in read:
                codes[(topic, partition)] = kafka_error_code(
                    GroupSubscribedToTopicError(f"group {group_id} reads {topic}")
                )
            else:
                codes[(topic, partition)] = NONE
                doomed.append((topic, partition))
        groups.offsets.delete_offsets(group_id, doomed)

    try:
        on_coordinator(call, "DeleteOffsets", group_id, delete)
        error = NONE
    except SeglogError as exc:
        error = group_error_code(exc)
    by_topic: dict[str, list[Any]] = defaultdict(list)
    for topic, partition in asked:
        by_topic[topic].append(
            topic_class.OffsetDeleteResponsePartition(
                partition_index=partition,
                error_code=codes.get((topic, partition), NONE),
            )
        )
    return response_class(
        error_code=error,
        throttle_time_ms=0,
        topics=[topic_class(name=name, partitions=parts) for name, parts in by_topic.items()],
    )


def register(table: ApiTable) -> None:
    table.register(OffsetCommitRequest, 2, 8, offset_commit)
    table.register(OffsetFetchRequest, 1, 7, offset_fetch)
    table.register(OffsetDeleteRequest, 0, 0, offset_delete)
