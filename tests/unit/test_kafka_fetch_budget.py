"""FetchBudget (kafka/fetch_budget.py): a Fetch answer cut at batch boundaries to max_bytes and
partition_max_bytes, its first batch kept whatever its size, as Kafka's broker reads."""

from __future__ import annotations

import struct

from services.gateway.kafka.fetch_budget import FetchBudget, whole_batches_within


def batch(size: int) -> bytes:
    """A batch's framing: baseOffset, batchLength (bytes after it), then that many bytes."""
    return struct.pack(">qi", 0, size - 12) + bytes(size - 12)


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
