"""Kafka's TxnOffsetCommit 0–5: a transactional producer's offsets for a consumer group, held
pending until its transaction ends (groups/txn_offsets.py).

Errors are Kafka's, on every partition of the answer (KafkaApis puts a whole-request error
there, the response has no top-level code): TRANSACTIONAL_ID_AUTHORIZATION_FAILED without
Write on the transactional id, GROUP_AUTHORIZATION_FAILED without Read on the group, then
NOT_COORDINATOR, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID or ILLEGAL_GENERATION (v3+, the
request's group metadata); per partition TOPIC_AUTHORIZATION_FAILED (Read on the topic) and
UNKNOWN_TOPIC_OR_PARTITION. Versions 0–2 name no member: their commits are accepted whatever
the group's generation, as Kafka does.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from kafka.protocol.producer.transaction import TxnOffsetCommitRequest, TxnOffsetCommitResponse

from seglog.errors import SeglogError

from ..groups.group_state import OffsetToCommit
from ..groups.txn_offsets import TransactionalIdDeniedError, TxnOffsetCommit
from .api_table import ApiTable
from .error_codes import (
    NONE,
    TOPIC_AUTHORIZATION_FAILED,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    kafka_error_code,
)
from .group_apis import group_error_code
from .kafka_call import KafkaCall

NO_LEADER_EPOCH = -1


def txn_offset_commit(call: KafkaCall, request: Any) -> Any:
    version = call.version
    response_class = TxnOffsetCommitResponse[version]
    topic_class = response_class.TxnOffsetCommitResponseTopic
    asked = [(t.name, p) for t in request.topics for p in t.partitions]
    allowed = {topic for topic in {t for t, _ in asked} if call.allowed("Read", "topic", topic)}
    entries = tuple(
        OffsetToCommit(
            topic=topic,
            partition=p.partition_index,
            offset=p.committed_offset,
            leader_epoch=p.committed_leader_epoch if version >= 2 else NO_LEADER_EPOCH,
            metadata=p.committed_metadata or "",
        )
        for topic, p in asked
        if topic in allowed
    )
    commit = TxnOffsetCommit(
        transactional_id=request.transactional_id,
        group_id=request.group_id,
        producer_id=request.producer_id,
        producer_epoch=request.producer_epoch,
        offsets=entries,
        generation=request.generation_id if version >= 3 else -1,
        member_id=(request.member_id or "") if version >= 3 else "",
        group_instance_id=request.group_instance_id if version >= 3 else None,
    )
    codes: dict[tuple[str, int], int] = {}
    whole: int | None = None
    try:
        problems = call.core.groups.transactional.commit(call.caller, commit)
        for entry, problem in zip(entries, problems, strict=True):
            codes[(entry.topic, entry.partition)] = (
                NONE if problem is None else kafka_error_code(problem)
            )
    except TransactionalIdDeniedError:
        # The transactional id is checked first, then the group (KafkaApis' order).
        whole = TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    except SeglogError as exc:
        whole = group_error_code(exc)
    by_topic: dict[str, list[Any]] = defaultdict(list)
    for topic, p in asked:
        if whole is not None:
            code = whole
        else:
            code = codes.get((topic, p.partition_index), TOPIC_AUTHORIZATION_FAILED)
        by_topic[topic].append(
            topic_class.TxnOffsetCommitResponsePartition(
                partition_index=p.partition_index, error_code=code
            )
        )
    return response_class(
        throttle_time_ms=0,
        topics=[topic_class(name=name, partitions=parts) for name, parts in by_topic.items()],
    )


def register(table: ApiTable) -> None:
    table.register(TxnOffsetCommitRequest, 0, 5, txn_offset_commit)
