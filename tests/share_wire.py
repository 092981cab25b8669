"""A raw ShareFetch v1 of one partition, as the tests' lightweight share members send it
(kafka-python's codec over a socket): acknowledging `acks` (ranges, ACCEPT) and acquiring up
to `max_records`, without waiting."""

from __future__ import annotations

from typing import Any

from services.gateway.kafka.share_messages import ShareFetchRequest

ACCEPT = 1


def share_fetch_request(
    group_id: str,
    member_id: str,
    session_epoch: int,
    topic_id: Any,
    acks: list[tuple[int, int]] | tuple[()] = (),
    max_records: int = 10,
    partition_index: int = 0,
) -> Any:
    request_class = ShareFetchRequest[1]
    partition = request_class.FetchTopic.FetchPartition(
        partition_index=partition_index,
        acknowledgement_batches=[
            request_class.FetchTopic.FetchPartition.AcknowledgementBatch(
                first_offset=first, last_offset=last, acknowledge_types=[ACCEPT]
            )
            for first, last in acks
        ],
    )
    return request_class(
        group_id=group_id,
        member_id=member_id,
        share_session_epoch=session_epoch,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=1 << 20,
        max_records=max_records,
        batch_size=max(max_records, 1),
        topics=[request_class.FetchTopic(topic_id=topic_id, partitions=[partition])],
        forgotten_topics_data=[],
    )
