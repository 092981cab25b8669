"""The share consumer's and the dead-letter topic's pure parts, without a cluster: the
acknowledgement ranges a consumer sends, what it hands out of a ShareFetch answer (and the
gaps it acknowledges itself), the acknowledgement bookkeeping's refusals, the settings'
checks, and the dead letters' records with Kafka's headers."""

from __future__ import annotations

import pytest

from seglog.client.share_acks import (
    GAP,
    Acknowledgements,
    AcknowledgeType,
    ShareRecord,
    ack_batches,
    decode,
)
from seglog.client.share_config import share_config
from seglog.errors import InvalidConfigError, SeglogError
from seglog.records import RecordBatchBuilder, iter_records
from seglog.v1 import share_groups_pb2
from services.gateway.grpc_services import CLIENT_METHOD_THREADS, SHARE_GROUPS_SERVICE_DESCRIPTOR
from services.gateway.share.dead_letters import _batches
from services.gateway.share.settings import ShareSettings
from services.gateway.share.share_partition import DeadLetter

ACCEPT, RELEASE, REJECT = (int(t) for t in AcknowledgeType)


def test_acknowledgements_go_as_ranges_of_one_type():
    acks = {5: ACCEPT, 6: ACCEPT, 7: REJECT, 9: ACCEPT, 8: REJECT, 12: RELEASE}
    assert [(b.first_offset, b.last_offset, list(b.types)) for b in ack_batches(acks)] == [
        (5, 6, [ACCEPT]),
        (7, 8, [REJECT]),
        (9, 9, [ACCEPT]),
        (12, 12, [RELEASE]),
    ]


def test_a_fetch_answer_hands_out_only_acquired_records_and_names_the_gaps():
    builder = RecordBatchBuilder(base_offset=10)
    for i in range(3):
        builder.append(b"k%d" % i, b"v%d" % i, 1000 + i)
    answer = share_groups_pb2.SharePartitionAnswer(topic="t", partition=1, records=builder.build())
    answer.acquired.add(first_offset=11, last_offset=12, delivery_count=2)
    answer.acquired.add(first_offset=13, last_offset=14, delivery_count=1)  # no records: gaps
    records, gaps = decode(answer, value_deserializer=lambda v: v.decode())
    assert [(r.offset, r.value, r.delivery_count) for r in records] == [
        (11, "v1", 2),
        (12, "v2", 2),
    ]
    assert gaps == [13, 14]


def record(offset: int) -> ShareRecord:
    return ShareRecord("t", 0, offset, 0, None, b"v", (), 1)


def test_acknowledgements_are_kept_until_taken_and_refused_for_records_not_handed_out():
    acks = Acknowledgements()
    acks.delivered([record(1), record(2)], {("t", 0): [3]})
    assert acks.unacknowledged() == 2
    acks.acknowledge(record(1), AcknowledgeType.REJECT)
    acks.acknowledge(record(1), AcknowledgeType.ACCEPT)  # changed before it went
    with pytest.raises(SeglogError, match="not handed out"):
        acks.acknowledge(record(7), AcknowledgeType.ACCEPT)
    acks.accept_delivered()
    taken = acks.take()
    assert taken == {("t", 0): {1: ACCEPT, 2: ACCEPT, 3: GAP}}
    assert acks.take() == {}
    with pytest.raises(SeglogError, match="sent already"):
        acks.acknowledge(record(2), AcknowledgeType.ACCEPT)
    acks.put_back(taken)  # not applied: they go with the next call
    assert acks.take() == taken


def test_share_consumer_settings_are_checked_and_take_kafkas_names():
    config = share_config(
        {"group.id": "g", "share.acknowledgement.mode": "explicit", "max.poll.records": "7"}
    )
    assert config.explicit and config.max_poll_records == 7
    with pytest.raises(InvalidConfigError, match="group_id"):
        share_config({})
    with pytest.raises(InvalidConfigError, match="did you mean 'max_poll_records'"):
        share_config({"group_id": "g", "max_pol_records": 5})
    with pytest.raises(InvalidConfigError, match="fetch_max_wait_ms"):
        share_config({"group_id": "g", "fetch_max_wait_ms": -1})


def test_a_dead_letter_topic_must_carry_the_prefix():
    assert ShareSettings(errors_deadletterqueue_topic_name="dlq.orders")
    with pytest.raises(ValueError, match="must start with"):
        ShareSettings(errors_deadletterqueue_topic_name="orders")
    assert ShareSettings(
        errors_deadletterqueue_topic_name="dead.orders",
        errors_deadletterqueue_topic_name_prefix="dead.",
    )


def test_dead_letters_are_a_record_per_offset_with_kafkas_headers_and_no_copy():
    letters = [DeadLetter(4, 5, 1, True), DeadLetter(9, 9, 5, False)]
    (batch,) = _batches("workers", "jobs", 2, letters)
    records = list(iter_records(batch))
    assert [(r.key, r.value) for r in records] == [(None, None)] * 3
    headers = [dict(r.headers) for r in records]
    assert [h["__dlq.errors.offset"] for h in headers] == [b"4", b"5", b"9"]
    assert headers[0] == {
        "__dlq.errors.topic": b"jobs",
        "__dlq.errors.partition": b"2",
        "__dlq.errors.offset": b"4",
        "__dlq.errors.group": b"workers",
        "__dlq.errors.delivery.count": b"1",
        "__dlq.errors.message": b"Offset rejected by client.",
    }
    assert headers[2]["__dlq.errors.delivery.count"] == b"5"
    assert headers[2]["__dlq.errors.message"] == b"Offset delivery count exceeded the threshold."


def test_many_dead_letters_split_into_batches_that_fit():
    batches = _batches("g", "t" * 100, 0, [DeadLetter(0, 19_999, 1, True)])
    assert len(batches) > 1 and all(len(b) <= (1 << 20) for b in batches)
    assert sum(1 for b in batches for _ in iter_records(b)) == 20_000


def test_share_fetch_long_polls_run_on_a_pool_of_their_own():
    descriptor = SHARE_GROUPS_SERVICE_DESCRIPTOR
    assert "ShareFetch" in descriptor.methods_by_name
    assert CLIENT_METHOD_THREADS[f"/{descriptor.full_name}/ShareFetch"] > 0
