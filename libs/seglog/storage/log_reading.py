"""LogReading: a log's reads. Fetch's bytes (where they lie, bounded by the log start and,
for consumers, the high watermark), the bytes available from an offset, the cut of a range
into pieces, and ListOffsets' offset for a timestamp; the lookups themselves are
log_reads' and segment_reads'."""

from __future__ import annotations

from ..errors import InvalidOffsetError, OffsetOutOfRangeError
from ..records.batch import NO_TIMESTAMP
from ..semconv import PARTITION, TOPIC
from . import log_reads, segment_reads
from .log_reads import LogReadResult, LogSlice, ReadPosition, TimestampAndOffset
from .log_segments import SegmentsSnapshot
from .log_state import LogState, tracer
from .segment import LogSegment
from .txn_index import AbortedTxn

# ListOffsets' special timestamps, as Kafka's.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3  # the record with the largest timestamp (KIP-734)
# KIP-405's: the log start kept locally, and the last offset in remote storage. The log alone
# knows only its local segments, so the first is its log start and the second has no answer
# (offset -1), as Kafka's UnifiedLog.fetchOffsetByTimestamp answers on a log without remote
# storage; a tiered topic's leader answers both from the object store's metadata
# (services/storage_node/tiered_offsets.py).
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5


class LogReading:
    def __init__(self, state: LogState) -> None:
        self._state = state

    def _bound_at(self, offset: int, snapshot: SegmentsSnapshot) -> tuple[LogSegment, int]:
        """The segment and file position where a read bounded at `offset` stops: where the
        batch holding it starts, or the segment's end when no batch holds it yet. A batch an
        append has written but whose offsets the log end does not cover yet is past that
        position, and never read. The log end's position is kept by each append (followers'
        reads stop there); the HW's is cached here (consumers'), as it moves far less often
        than reads happen."""
        state = self._state
        for cached in (state._log_end_position, state._high_watermark_position):
            if cached is not None and cached[0] == offset and snapshot.contains(cached[1]):
                return cached[1], cached[2]
        segment, position = log_reads.position_of(snapshot, offset)
        if offset == state._high_watermark:
            state._high_watermark_position = (offset, segment, position)
        return segment, position

    def read(
        self, offset: int, max_bytes: int, *, min_one_message: bool = True
    ) -> bytes | memoryview:
        """Raw bytes (bytes, or a memoryview of them) of whole batches from the batch holding
        `offset`, up to `max_bytes` (at least one batch when `min_one_message`), exactly as
        stored.

        As in Kafka, one read serves one segment: a read that reaches a segment's end returns
        what that segment holds, and the caller continues from the next offset.
        The first batch may start before `offset` (offsets inside a batch are not split)."""
        return self.read_records(offset, max_bytes, min_one_message=min_one_message).data

    def read_records(
        self, offset: int, max_bytes: int, *, min_one_message: bool = True
    ) -> LogReadResult:
        """`read`, with the offset to continue from and the watermarks seen by the read."""
        found = self.locate_records(offset, max_bytes, min_one_message=min_one_message)
        return LogReadResult(
            found.read(), found.next_offset, found.high_watermark, found.log_start_offset
        )

    def locate_records(
        self,
        offset: int,
        max_bytes: int,
        *,
        min_one_message: bool = True,
        max_offset: int | None = None,
    ) -> LogSlice:
        """Where `read`'s bytes lie (segment, position, size: Kafka's FetchDataInfo), found
        from the indexes and a few batch headers without reading the batches, so a caller
        can send them from the file or read them once. `max_offset` (a consumer's read: the
        high watermark) bounds the read: nothing at or past it is returned, and a fetch
        offset between it and the log end finds nothing rather than an error, as in Kafka."""
        state = self._state
        if offset < 0 or max_bytes < 0:
            raise InvalidOffsetError(f"read at offset {offset} for {max_bytes} bytes: negative")
        log_end = state._log_end_offset
        start = state._log_start_offset
        if offset < start or offset > log_end:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{start}, {log_end}] of {state.directory.name}"
            )
        upper = log_end if max_offset is None else min(max_offset, log_end)
        if offset >= upper:
            return LogSlice(None, offset, upper, start)
        with tracer.start_as_current_span("seglog.log.read") as span:
            span.set_attribute(TOPIC, state.topic)
            span.set_attribute(PARTITION, state._partition_id)
            span.set_attribute("seglog.fetch_offset", offset)
            snapshot = state._segments.snapshot()
            # Always bounded, the log end too: reads take no lock, and an append writes its
            # batch to the file before it moves the log end (Kafka bounds every read by the
            # position of its max offset, LogOffsetMetadata, for the same reason).
            bound = self._bound_at(upper, snapshot)
            for segment in snapshot.segments[snapshot.floor_index(offset) :]:
                max_position = bound[1] if segment is bound[0] else None
                found = segment_reads.locate(
                    segment,
                    offset,
                    max_bytes,
                    min_one_message=min_one_message,
                    max_position=max_position,
                )
                if found is not None:
                    span.set_attribute("seglog.bytes", found.size)
                    span.set_attribute("seglog.next_offset", found.next_offset)
                    return LogSlice(found, found.next_offset, upper, start)
                if max_position is not None:
                    break  # the bound's segment ends the read
            return LogSlice(None, offset, upper, start)

    def aborted_transactions(self, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [start, end) (a read_committed fetch's
        answer, Kafka's collectAbortedTransactions): from the segment holding `start` on,
        until a segment's `.txnindex` shows no later marker can concern the range."""
        if end <= start:
            return []
        snapshot = self._state._segments.snapshot()
        found: list[AbortedTxn] = []
        for segment in snapshot.segments[snapshot.floor_index(start) :]:
            search = segment.txn_index.collect(start, end)
            found.extend(search.aborted)
            if search.complete:
                break
        return found

    def bytes_from(
        self, offset: int, hint: ReadPosition | None = None, *, max_offset: int | None = None
    ) -> ReadPosition:
        """How many bytes lie from the batch holding `offset` to the log end (or to
        `max_offset`, the high watermark of a consumer's read), counted from file positions
        and segment sizes (a waiting fetch's `min_bytes`), never by reading the data.
        `hint`, a result of an earlier call for the same offset, skips the index lookup
        while its segment is still in the log."""
        snapshot = self._state._segments.snapshot()
        found = log_reads.bytes_from(snapshot, offset, hint)
        if max_offset is None or max_offset >= self._state._log_end_offset:
            return found
        if max_offset <= offset:
            return ReadPosition(found.segment, found.position, 0)
        bound_segment, bound_position = self._bound_at(max_offset, snapshot)
        past_bound = log_reads.bytes_from(
            snapshot, max_offset, ReadPosition(bound_segment, bound_position, 0)
        ).available_bytes
        return ReadPosition(
            found.segment, found.position, max(found.available_bytes - past_bound, 0)
        )

    def split_points(
        self, start_offset: int, end_offset: int, target_bytes: int
    ) -> tuple[int, int, list[log_reads.Split]]:
        """[start, end) clamped to [log start, high watermark] (an end < 0: the high
        watermark), and that range cut into pieces of about `target_bytes` at batch starts
        (log_reads.split_points): (start, end, pieces)."""
        state = self._state
        upper = state._high_watermark
        end = upper if end_offset < 0 else min(end_offset, upper)
        start = min(max(start_offset, state._log_start_offset), end)
        pieces = log_reads.split_points(state._segments.snapshot(), start, end, target_bytes)
        return start, end, pieces

    def offset_for_timestamp(
        self, timestamp_ms: int, *, max_offset: int | None = None
    ) -> TimestampAndOffset | None:
        """The first record whose timestamp >= `timestamp_ms` (Kafka's ListOffsets); also
        LATEST_TIMESTAMP (-1), EARLIEST_TIMESTAMP (-2), MAX_TIMESTAMP (-3),
        EARLIEST_LOCAL_TIMESTAMP (-4) and LATEST_TIERED_TIMESTAMP (-5). None when no
        record qualifies. `max_offset` (a consumer's: the high watermark) hides the offsets
        at or past it: LATEST answers it, and a record found past it is not an answer."""
        state = self._state
        upper = (
            state._log_end_offset if max_offset is None else min(max_offset, state._log_end_offset)
        )
        if timestamp_ms == LATEST_TIMESTAMP:
            return TimestampAndOffset(NO_TIMESTAMP, upper)
        if timestamp_ms in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return TimestampAndOffset(NO_TIMESTAMP, state._log_start_offset)
        if timestamp_ms == LATEST_TIERED_TIMESTAMP:
            return TimestampAndOffset(NO_TIMESTAMP, -1)
        snapshot, start = state._segments.snapshot(), state._log_start_offset
        if timestamp_ms == MAX_TIMESTAMP:
            found = log_reads.offset_of_max_timestamp(snapshot, start)
        elif timestamp_ms < 0:
            raise InvalidOffsetError(f"timestamp {timestamp_ms} is neither >= 0 nor -1 to -5")
        else:
            found = log_reads.offset_for_timestamp(snapshot, timestamp_ms, start)
        return None if found is None or found.offset >= upper else found
