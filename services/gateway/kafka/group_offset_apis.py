"""Kafka's committed offsets: OffsetCommit 2–9, OffsetFetch 1–9, OffsetDelete 0, on the same
store as the gRPC API's (groups/offsets_store.py): a group's offsets are the same whichever
API commits or reads them.

Authorization is Kafka's: the group as a whole (Read to commit, Describe to fetch, Delete to
delete), each topic on its own (Read; Describe to fetch), so a topic the principal may not
use answers TOPIC_AUTHORIZATION_FAILED for its partitions while the others proceed. A commit
with generation -1 is a simple commit, outside any group membership, allowed only while the
group has no members. In a KIP-848 consumer group (consumer_group_apis.py) a member
commits with v9+ at its current member epoch (STALE_MEMBER_EPOCH otherwise, UNSUPPORTED_VERSION
below v9, as Kafka's ConsumerGroup.validateOffsetCommit), and an OffsetFetch v9 naming a
member is checked the same way. RetentionTimeMs (v2–v4) is not honoured: offsets.retention.minutes
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
from .consumer_group_apis import consumer_group_error_code
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
        consumer_groups = groups.consumer_groups
        if consumer_groups is not None and consumer_groups.is_consumer_group(group_id):
            consumer_groups.check_commit(
                group_id,
                request.member_id,
                request.generation_id_or_member_epoch,
                version,
                [(e.topic, e.partition) for e in entries],
            )
        else:
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
            codes[(entry.topic, entry.partition)] = consumer_group_error_code(exc)
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
    if version < 8:
        topic_class = response_class.OffsetFetchResponseTopic
        topics, error = _fetch_group(
            call,
            request.group_id,
            request.topics,
            None,
            -1,
            topic_class,
            topic_class.OffsetFetchResponsePartition,
            version >= 7 and request.require_stable,
        )
        return response_class(throttle_time_ms=0, topics=topics, error_code=error)
    # v8+: several groups at once, each its own answer; v9+ names the member asking
    # (KIP-848: its epoch is checked, STALE_MEMBER_EPOCH when it moved on).
    group_class = response_class.OffsetFetchResponseGroup
    topic_class = group_class.OffsetFetchResponseTopics
    answers = []
    for group in request.groups:
        topics, error = _fetch_group(
            call,
            group.group_id,
            group.topics,
            group.member_id if version >= 9 else None,
            group.member_epoch if version >= 9 else -1,
            topic_class,
            topic_class.OffsetFetchResponsePartitions,
            request.require_stable,
        )
        answers.append(group_class(group_id=group.group_id, topics=topics, error_code=error))
    return response_class(throttle_time_ms=0, groups=answers)


def _fetch_group(
    call: KafkaCall,
    group_id: str,
    asked_topics: Any,
    member_id: str | None,
    member_epoch: int,
    topic_class: Any,
    partition_class: Any,
    require_stable: bool,
) -> tuple[list[Any], int]:
    """One group's committed offsets as OffsetFetch answers them, and the group's error."""
    version = call.version
    every = asked_topics is None  # v2+: null asks for every committed partition
    asked = [] if every else [(t.name, p) for t in asked_topics for p in t.partition_indexes]
    groups = call.core.groups

    def fetch() -> Any:
        consumer_groups = groups.consumer_groups
        if member_id and consumer_groups is not None:
            consumer_groups.check_fetch(group_id, member_id, member_epoch)
        return groups.fetch_offsets(group_id)

    unstable: set[tuple[str, int]] = set()
    try:
        answer, unstable = on_coordinator(call, "FetchOffsets", group_id, fetch)
        group_error = NONE
    except SeglogError as exc:
        answer, group_error = {}, consumer_group_error_code(exc)
    # v7+ require_stable (KIP-447): a partition with transactional offsets pending answers
    # UNSTABLE_OFFSET_COMMIT (the client retries until the transaction ends); without it,
    # the committed offset is answered as if the transaction were not there.
    if not require_stable:
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
    topics = [topic_class(name=name, partitions=parts) for name, parts in by_topic.items()]
    return topics, group_error


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
        if groups.consumer_groups is not None:  # a KIP-848 group's members' topics too
            read |= groups.consumer_groups.subscribed_topics(group_id)
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
    table.register(OffsetCommitRequest, 2, 9, offset_commit)
    table.register(OffsetFetchRequest, 1, 9, offset_fetch)
    table.register(OffsetDeleteRequest, 0, 0, offset_delete)
