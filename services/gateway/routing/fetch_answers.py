"""What a routed fetch yields, one piece of one partition's answer at a time, in the form its
source had it, converted only where a reader needs the other form:

- `bytes`: a FetchResponse message in protobuf wire form, as a node's gRPC stream sends it
  (the relay's fallback) — the gRPC adapter's fetch (relayed_calls.py) forwards these
  unchanged;
- `FetchPiece`: the fields of a chunk the node's bulk listener sent (fetch_relay.py), its
  records a view of the buffer they were received into — the broker core's Kafka fetch
  reads these unchanged.

Both forms are cut to the request's limits by the core (fetch_budget.py), a piece by slicing
its records. Each reader converts the other form: a relayed chunk costs the gRPC adapter one
encoding, as it always did; a gRPC message costs the core one decoding, as it always did.
Before, every relayed chunk was encoded to wire form (a copy of its records) and, for the
Kafka listener, decoded again (another copy, and a third when its records field was read):
4 MB answers copied three more times than they needed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from seglog.rpc import wire
from seglog.v1 import common_pb2

# A fixed allowance for a piece's non-record fields when sizing it for quotas: its topic name,
# partition, watermarks and error as the wire form would hold them (about 30 bytes with a
# short topic name; a piece's records are kilobytes to megabytes, so this is a rounding).
PIECE_HEADER_BYTES = 32


class FetchPiece(NamedTuple):
    """A partition's answer piece as the node sent it: whole batches (or none), its
    watermarks, its error (a wire error code, 0 for none), its last stable offset (-1:
    unknown) and, for a read_committed fetch, the transactions aborted in its range
    ((producer id, first offset) each)."""

    topic: str
    partition: int
    high_watermark: int
    log_start_offset: int
    records: memoryview | bytes
    error: int = 0
    error_message: str = ""
    last_stable_offset: int = -1
    aborted_transactions: tuple[tuple[int, int], ...] = ()


FetchAnswer = bytes | FetchPiece


def wire_of(answer: FetchAnswer) -> bytes:
    """The answer as a FetchResponse message's wire bytes (the gRPC servicer's form)."""
    if isinstance(answer, bytes):
        return answer
    return wire.encode_fetch_response(
        answer.topic,
        answer.partition,
        answer.high_watermark,
        answer.log_start_offset,
        answer.records,
        answer.error,
        answer.error_message,
        suffix=wire.fetch_response_suffix(
            last_stable_offset=answer.last_stable_offset, aborted=answer.aborted_transactions
        ),
    )


def piece_of(answer: FetchAnswer) -> FetchPiece:
    """The answer's fields (the broker core's form)."""
    if isinstance(answer, FetchPiece):
        return answer
    fetched = common_pb2.FetchResponse.FromString(answer)
    return FetchPiece(
        fetched.topic,
        fetched.partition,
        fetched.high_watermark,
        fetched.log_start_offset,
        fetched.records,
        fetched.error,
        fetched.error_message,
        fetched.last_stable_offset,
        tuple((a.producer_id, a.first_offset) for a in fetched.aborted_transactions),
    )


def size_of(answer: FetchAnswer) -> int:
    """The answer's size as a quota counts it: its wire bytes, or a piece's records and
    PIECE_HEADER_BYTES."""
    if isinstance(answer, bytes):
        return len(answer)
    return len(answer.records) + PIECE_HEADER_BYTES


def wires(answers: Iterator[FetchAnswer]) -> Iterator[bytes]:
    """`answers` in wire form; closing this closes `answers` (which ends the nodes' calls)."""
    try:
        for answer in answers:
            yield wire_of(answer)
    finally:
        close = getattr(answers, "close", None)
        if close is not None:
            close()
