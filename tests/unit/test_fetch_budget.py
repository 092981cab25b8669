"""The core's fetch budget (routing/fetch_budget.py): an answer cut at batch boundaries to
max_bytes and partition_max_bytes, its first batch kept whatever its size, as Kafka's broker
reads; the nodes' messages relayed as they are when they fit, and a relayed chunk's records
(fetch_answers.FetchPiece) cut by slicing the buffer they came in, never copied."""

from __future__ import annotations

import struct

from seglog.rpc import wire
from seglog.v1 import common_pb2
from services.gateway.routing.fetch_answers import FetchPiece, wire_of
from services.gateway.routing.fetch_budget import FetchBudget, whole_batches_within, within_budget


def batch(size: int) -> bytes:
    """A batch's framing: baseOffset, batchLength (bytes after it), then that many bytes."""
    return struct.pack(">qi", 0, size - 12) + bytes(size - 12)


def request(max_bytes: int, partition_max_bytes: int = 10_000) -> common_pb2.FetchRequest:
    asked = common_pb2.FetchRequest(max_bytes=max_bytes)
    for p in (0, 1, 2):
        asked.partitions.add(topic="t", partition=p, partition_max_bytes=partition_max_bytes)
    return asked


def message(partition: int, records: bytes) -> bytes:
    return wire.encode_fetch_response("t", partition, 7, 3, records)


def answered(messages: list[bytes]) -> list[tuple[int, int, int]]:
    parsed = [common_pb2.FetchResponse.FromString(m) for m in messages]
    return [(m.partition, len(m.records), m.high_watermark) for m in parsed]


def test_messages_that_fit_are_relayed_unchanged():
    sent = [message(0, batch(100)), message(1, batch(200)), message(0, batch(50))]
    assert list(within_budget(iter(sent), request(1000))) == sent


def test_a_second_leaders_batch_past_max_bytes_is_left_out_but_its_watermark_kept():
    sent = [message(0, batch(900)), message(1, batch(900)), message(2, batch(60) + batch(60))]
    assert answered(list(within_budget(iter(sent), request(1000)))) == [
        (0, 900, 7),
        (1, 0, 7),
        (2, 60, 7),
    ]


def test_a_partition_cut_short_sends_nothing_after():
    sent = [message(0, batch(600) + batch(600)), message(0, batch(20)), message(1, batch(20))]
    assert answered(list(within_budget(iter(sent), request(10_000, 1000)))) == [
        (0, 600, 7),
        (1, 20, 7),
    ]


def test_the_first_batch_whatever_its_size_unless_the_answer_already_holds_data():
    sent = [message(0, batch(1500) + batch(20))]
    assert answered(list(within_budget(iter(sent), request(1000)))) == [(0, 1500, 7)]
    later = within_budget(iter(sent), request(1000), keep_first=False)
    assert answered(list(later)) == [(0, 0, 7)]


def test_no_max_bytes_is_no_limit_in_all_and_errors_pass():
    error = wire.encode_fetch_response("t", 2, -1, -1, b"", common_pb2.NOT_LEADER_OR_FOLLOWER)
    sent = [message(0, batch(5000)), message(1, batch(5000)), error]
    assert list(within_budget(iter(sent), request(0))) == sent


def test_closing_the_answer_closes_the_nodes_messages():
    closed = []

    def messages():
        try:
            yield message(0, batch(20))
            yield message(1, batch(20))
        finally:
            closed.append(True)

    answer = within_budget(messages(), request(1000))
    next(answer)
    answer.close()
    assert closed == [True]


def test_whole_batches_only_and_the_first_whatever_its_size():
    records = memoryview(batch(100) + batch(50) + batch(70))
    assert len(whole_batches_within(records, 160, keep_first=False)) == 150
    assert len(whole_batches_within(records, 149, keep_first=False)) == 100
    assert len(whole_batches_within(records, 10, keep_first=False)) == 0
    assert len(whole_batches_within(records, 10, keep_first=True)) == 100
    assert len(whole_batches_within(records, 1000, keep_first=False)) == 220


def test_the_answer_keeps_within_max_bytes_after_its_first_batch():
    budget = FetchBudget(1000)
    kept, whole = budget.take(("t", 0), 10_000, batch(900))
    assert (len(kept), whole) == (900, True)
    kept, whole = budget.take(("t", 1), 10_000, batch(900))
    assert (len(kept), whole) == (0, False)
    kept, whole = budget.take(("t", 2), 10_000, batch(60) + batch(60))
    assert (len(kept), whole) == (60, False)
    assert budget.remaining == 40


def test_a_first_batch_past_the_limit_is_kept_alone():
    budget = FetchBudget(1000)
    kept, whole = budget.take(("t", 0), 10_000, batch(1500) + batch(20))
    assert (len(kept), whole) == (1500, False)
    assert budget.exhausted


def test_partition_max_bytes_bounds_each_partition():
    budget = FetchBudget(10_000)
    budget.take(("t", 0), 500, batch(100))
    kept, whole = budget.take(("t", 0), 500, batch(300) + batch(300))
    assert (len(kept), whole) == (300, False)
    # Another partition's first batch past its own limit is not the answer's first: left out.
    kept, whole = budget.take(("t", 1), 500, batch(600))
    assert (len(kept), whole) == (0, False)


def piece(partition: int, records: bytes) -> FetchPiece:
    return FetchPiece("t", partition, 7, 3, memoryview(bytearray(records)))


def test_relayed_pieces_are_cut_as_views_of_the_buffers_they_came_in():
    sent = [piece(0, batch(900)), piece(1, batch(900)), piece(2, batch(60) + batch(60))]
    kept = list(within_budget(iter(sent), request(1000)))
    assert kept[0] is sent[0]  # whole: passed on as it came
    assert all(isinstance(k, FetchPiece) for k in kept)
    assert [(k.partition, len(k.records), k.high_watermark) for k in kept] == [
        (0, 900, 7),
        (1, 0, 7),
        (2, 60, 7),
    ]
    # The cut piece's records are a slice of the buffer the chunk was received into.
    assert kept[2].records.obj is sent[2].records.obj
    # Its wire form is what the gRPC adapter sends, as a cut message would have been.
    assert answered([wire_of(k) for k in kept]) == answered(
        list(within_budget(iter([wire_of(s) for s in sent]), request(1000)))
    )


def test_pieces_and_messages_share_one_budget_and_errors_pass():
    error = FetchPiece("t", 1, -1, -1, b"", common_pb2.NOT_LEADER_OR_FOLLOWER, "moved")
    sent = [message(0, batch(700)), error, piece(2, batch(200) + batch(200))]
    kept = list(within_budget(iter(sent), request(1000)))
    assert kept[0] is sent[0] and kept[1] is error
    assert len(kept[2].records) == 200
