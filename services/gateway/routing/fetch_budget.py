"""What a fetch's answer may hold, for every adapter: the request's `max_bytes` in all and each
partition's `partition_max_bytes`, except that the answer's very first batch is kept whatever
its size, as Kafka's broker reads with minOneMessage only until it has data
(ReplicaManager.readFromLog).

A fetch spanning leader nodes gives each node a share of the budget (fetch_fanout.py), and
each node keeps its own first batch whatever its size: two nodes whose next batches are
900 KB each would answer a 1,000,000-byte fetch with 1.8 MB, which librdkafka refuses
("Invalid response size") and then never makes progress, and which a gRPC client never asked
to hold. So the answer is cut here, at batch boundaries: a batch that would take the answer or
its partition past the limit is left out (with the rest of that partition's records), and
the client asks for it again from the same offset.

A node's records are whole batches (RecordBatch v2, or legacy message sets: the same 8-byte
offset and 4-byte length first), so a cut reads only each batch's 12-byte prefix:

    baseOffset int64 | batchLength int32 (bytes after this field) | ...

The answer's pieces come in the form the node sent them (fetch_answers.py). A relayed chunk's
records are a view of the buffer it was received into: cutting it is slicing that view, and a
piece that fits is passed on as it is. A FetchResponse message (a node's gRPC stream) is
scanned for its partition and records (seglog.rpc.wire, nothing copied) and relayed as it is
when it fits; only a message that is cut is encoded again.
"""

from __future__ import annotations

from collections.abc import Iterator

from seglog.rpc import wire
from seglog.v1 import common_pb2

from .fetch_answers import FetchAnswer, FetchPiece

_LENGTH_AT = 8
_PREFIX_BYTES = 12
_NO_LIMIT = 1 << 62


def whole_batches_within(records: memoryview, limit: int, *, keep_first: bool) -> memoryview:
    """The longest run of whole batches from the start of `records` within `limit` bytes (the
    first batch whatever its size when `keep_first`)."""
    end = 0
    total = len(records)
    while end + _PREFIX_BYTES <= total:
        size = _PREFIX_BYTES + int.from_bytes(
            records[end + _LENGTH_AT : end + _PREFIX_BYTES], "big"
        )
        if end + size > limit and not (end == 0 and keep_first):
            break
        end += size
    return records[: min(end, total)]


class FetchBudget:
    """The bytes one fetch answer has left, in all and per partition. `keep_first`: the
    answer may still take its first batch whatever its size (False for a second read whose
    answer already holds data)."""

    def __init__(self, max_bytes: int, *, keep_first: bool = True) -> None:
        self.remaining = max_bytes
        self._taken_any = not keep_first
        self._by_partition: dict[tuple[str, int], int] = {}

    @property
    def exhausted(self) -> bool:
        return self.remaining <= 0

    def take(
        self, key: tuple[str, int], partition_max_bytes: int, records: bytes | memoryview
    ) -> tuple[memoryview, bool]:
        """The part of a partition's next records the answer keeps, and whether all of it
        was kept (once a batch is left out, nothing later of that partition may follow)."""
        view = memoryview(records)
        used = self._by_partition.get(key, 0)
        room = min(self.remaining, partition_max_bytes - used)
        kept = (
            view
            if len(view) <= room
            else whole_batches_within(view, max(room, 0), keep_first=not self._taken_any)
        )
        if len(kept):
            self._taken_any = True
            self.remaining -= len(kept)
            self._by_partition[key] = used + len(kept)
        return kept, len(kept) == len(view)


def within_budget(
    messages: Iterator[FetchAnswer], request: common_pb2.FetchRequest, *, keep_first: bool = True
) -> Iterator[FetchAnswer]:
    """The fetch's answers (fetch_answers.py) cut to the request's max_bytes (0: no limit in
    all) and partition_max_bytes, each in the form it came in. A partition cut short keeps its
    high watermark and log start in the answer; its later pieces are left out. Closing this
    closes `messages` (which ends the nodes' calls)."""
    limits = {(p.topic, p.partition): p.partition_max_bytes for p in request.partitions}
    budget = FetchBudget(request.max_bytes or _NO_LIMIT, keep_first=keep_first)
    cut: set[tuple[str, int]] = set()
    try:
        for message in messages:
            if isinstance(message, FetchPiece):
                topic, partition, records = message.topic, message.partition, message.records
            else:
                scanned = wire.scan_fetch_response(message)
                topic, partition, records = scanned.topic, scanned.partition, scanned.records
            if not len(records):
                yield message  # an error, or a partition with nothing to read
                continue
            key = (topic, partition)
            if key in cut:
                continue
            kept, whole = budget.take(key, limits.get(key, _NO_LIMIT), records)
            if whole:
                yield message
                continue
            cut.add(key)
            yield _shortened(message, kept)
    finally:
        close = getattr(messages, "close", None)
        if close is not None:
            close()


def _shortened(message: FetchAnswer, kept: memoryview) -> FetchAnswer:
    """`message` holding only the records `kept` (a prefix of its own)."""
    if isinstance(message, FetchPiece):
        return message._replace(records=kept)  # a slice of the same buffer, nothing copied
    shortened = common_pb2.FetchResponse.FromString(message)
    shortened.records = bytes(kept)
    return bytes(shortened.SerializeToString())
