"""LogAppending: a log's write path, the leader's append and the follower's, and segment rolls.

Append path (no per-record work, and no Python object per batch): validate every batch of
the input (header, lengths, CRC-32C, count, size, timestamps: one C scan) before writing a
byte; recompress the batches whose codec is not the topic's compression.type
(recompression.py; none with `producer`, Kafka's default); assign offsets by rewriting each
batch's first 16 bytes (baseOffset, batchLength, partitionLeaderEpoch: outside the CRC) as
it is written, all batches with one vectored write (records/_scan.c: write_batches); add the
sparse index entries computed for the whole input in one call, in one write per index.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..errors import InvalidRecordError, OutOfOrderSequenceError, StorageError
from ..records import batch_table
from ..records.batch import NO_TIMESTAMP
from ..records.control import ControlMarker, build_marker
from ..semconv import PARTITION, TOPIC
from .config import LOG_APPEND_TIME
from .log_flushing import LogFlushing
from .log_state import LogState, tracer
from .producer_entry import BatchMetadata
from .producer_state import producer_batches
from .recompression import rebody_for, recompress
from .segment import LogSegment
from .validation import (
    ValidatedRecords,
    assign_offsets,
    scan_follower_records,
    validate_records,
)

# Kafka's producer.id.expiration.ms: a producer silent this long is forgotten (checked at rolls).
PRODUCER_ID_EXPIRATION_MS = 24 * 60 * 60 * 1000


@dataclass(frozen=True)
class LogAppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time_ms: int  # -1 unless the log stamps LogAppendTime
    log_start_offset: int
    batch_count: int
    valid_bytes: int


class LogAppending:
    def __init__(self, state: LogState, flushing: LogFlushing) -> None:
        self._state = state
        self._flushing = flushing

    def validate(
        self, records: bytes | bytearray | memoryview, *, client: bool = False
    ) -> ValidatedRecords:
        """Check the whole input against this log's config without writing anything, so a
        caller holding several partitions' inputs can check them all before appending any.
        A `client`'s control batches are refused (Kafka's LogValidator: markers come from
        the leader's `append_marker` alone)."""
        state = self._state
        with tracer.start_as_current_span("seglog.log.validate") as span:
            validated = validate_records(
                records,
                state.config,
                state.clock.now_ms(),
                rebody_for(state.config),
            )
            if client and validated.flags & batch_table.HAS_CONTROL:
                raise InvalidRecordError("control batches are written by brokers, not clients")
            # Only where the topic's compression.type differs from a batch's codec: else
            # `validated` itself, with no copy.
            validated = recompress(validated, state.config)
            span.set_attribute("seglog.bytes", len(validated.view))
            span.set_attribute("seglog.batch_count", validated.batch_count)
            return validated

    def append(
        self,
        records: bytes | bytearray | memoryview | ValidatedRecords,
        *,
        leader_epoch: int | None = None,
    ) -> LogAppendInfo:
        """Validate the whole input (unless it comes from `validate`), then append it with
        offsets from the log end offset. A client's control batches are refused before
        this (the node's append: ValidatedRecords.flags has HAS_CONTROL)."""
        with tracer.start_as_current_span("seglog.log.append") as span:
            span.set_attribute(TOPIC, self._state.topic)
            span.set_attribute(PARTITION, self._state._partition_id)
            validated = records if isinstance(records, ValidatedRecords) else self.validate(records)
            info = self._append_validated(validated, leader_epoch)
            span.set_attribute("seglog.bytes", info.valid_bytes)
            span.set_attribute("seglog.batch_count", info.batch_count)
            span.set_attribute("seglog.first_offset", info.first_offset)
            span.set_attribute("seglog.last_offset", info.last_offset)
            return info

    def _append_validated(
        self, validated: ValidatedRecords, leader_epoch: int | None
    ) -> LogAppendInfo:
        state = self._state
        view, table, now_ms = validated.view, validated.table, validated.validated_at_ms
        stamp_ms = (
            now_ms if state.config.message_timestamp_type == LOG_APPEND_TIME else NO_TIMESTAMP
        )
        batch_count = validated.batch_count
        with state._lock:
            state._check_open()
            first_offset = state._log_end_offset
            idempotent = bool(validated.flags & batch_table.HAS_PRODUCER)
            if idempotent:
                duplicate = self._check_sequences(validated)
                if duplicate is not None:  # a retry: answered, not written again
                    return LogAppendInfo(
                        duplicate.first_offset,
                        duplicate.last_offset,
                        duplicate.timestamp_ms,
                        NO_TIMESTAMP,
                        state._log_start_offset,
                        0,
                        0,
                    )
            next_offset = first_offset + validated.offsets
            max_timestamp = validated.max_timestamp if stamp_ms == NO_TIMESTAMP else stamp_ms
            total_bytes = len(view)  # the batches tile the validated input
            # Rolled before the epochs are recorded: a roll that fails leaves none behind.
            try:
                segment = self._maybe_roll(total_bytes, max_timestamp, next_offset - 1, now_ms)
            except BaseException:
                state._write_failed = True
                raise
            if leader_epoch is not None:  # the node stamps its epoch: one check per append
                state.leader_epochs.assign_from_batches([(leader_epoch, first_offset)])
            elif not validated.flags & batch_table.EPOCHS_VARY:  # one epoch: its first offset
                epoch = batch_table.entry(table, 0).partition_leader_epoch
                state.leader_epochs.assign_from_batches([(epoch, first_offset)])
            else:  # the batches keep theirs
                state.leader_epochs.assign_from_batches(
                    zip(
                        (h.partition_leader_epoch for _, h in validated.batches),
                        _bases(validated, first_offset),
                        strict=True,
                    )
                )
            if stamp_ms == NO_TIMESTAMP:  # offsets written into the prefixes, in C
                self._write(
                    lambda: segment.append_table(
                        view,
                        table,
                        first_offset=first_offset,
                        next_offset=next_offset,
                        leader_epoch=leader_epoch,
                        keep_offsets=False,
                    ),
                    first_offset,
                    next_offset,
                    segment,
                )
            else:  # LogAppendTime: timestamps under the CRC change, batches are copied
                buffers, appended, _ = assign_offsets(
                    view, validated.batches, first_offset, leader_epoch, stamp_ms
                )
                self._write(
                    lambda: segment.append(buffers, appended), first_offset, next_offset, segment
                )
            if idempotent:
                bases = _bases(validated, first_offset)
                aborted = state.producer_state.update(
                    producer_batches(
                        (
                            (h, base, base + h.last_offset_delta)
                            for (_, h), base in zip(validated.batches, bases, strict=True)
                        ),
                        validated.view,
                        (position for position, _ in validated.batches),
                    )
                )
                for entry in aborted:  # Kafka's segment.updateTxnIndex
                    segment.txn_index.append(entry)
            return LogAppendInfo(
                first_offset,
                next_offset - 1,
                max_timestamp,
                stamp_ms,
                state._log_start_offset,
                batch_count,
                total_bytes,
            )

    def append_marker(
        self, producer_id: int, producer_epoch: int, marker: ControlMarker, *, leader_epoch: int
    ) -> LogAppendInfo:
        """The leader's COMMIT/ABORT for one producer (WriteTxnMarkers): one control batch
        through the normal append; InvalidProducerEpochError for an epoch older than the
        producer's."""
        state = self._state
        with state._lock:
            state._check_open()
            state.producer_state.check_marker(producer_id, producer_epoch)
            batch = build_marker(
                producer_id, producer_epoch, marker, timestamp_ms=state.clock.now_ms()
            )
            return self.append(batch, leader_epoch=leader_epoch)

    def append_as_follower(
        self, records: bytes | bytearray | memoryview, *, segment_base_offset: int | None = None
    ) -> LogAppendInfo:
        """Append the leader's batches as they are, offsets, timestamps and epochs kept (Kafka's
        appendAsFollower): nothing is re-encoded, so the bytes on disk are the leader's.
        `segment_base_offset`, the base offset of the leader's segment the bytes were read
        from, rolls a new segment there when it is past the active one and not below the
        log end, so segment files match the leader's one for one where they can. A leader
        segment that starts below this log's end (this replica holds those offsets in its
        active segment: it took them from another leader, or rolled elsewhere) is not
        mirrored: a segment named below offsets the one before it holds makes offset lookups
        pick it for offsets it lacks, truncation cut only it, and recovery cut the segment
        before it at that name and delete the rest."""
        state = self._state
        with state._lock:
            state._check_open()
            scanned = scan_follower_records(
                records, state._log_end_offset, gaps_allowed=state.config.compact
            )
            view, table = scanned.view, scanned.table
            first_offset, last_offset = scanned.first_offset, scanned.last_offset
            max_timestamp = scanned.max_timestamp
            active = state._segments.active
            if (
                segment_base_offset is not None
                and max(active.base_offset + 1, state._log_end_offset)
                <= segment_base_offset
                <= first_offset
            ):
                self._roll_at(segment_base_offset)
            else:
                self._maybe_roll(len(view), max_timestamp, last_offset, state.clock.now_ms())
            headers = positions = None
            if scanned.flags & (batch_table.EPOCHS_VARY | batch_table.HAS_PRODUCER):
                positions, headers = zip(*batch_table.headers(view, table), strict=True)
            if headers is not None and scanned.flags & batch_table.EPOCHS_VARY:
                state.leader_epochs.assign_from_batches(
                    (h.partition_leader_epoch, h.base_offset) for h in headers
                )
            else:
                epoch = batch_table.entry(table, 0).partition_leader_epoch
                state.leader_epochs.assign_from_batches([(epoch, first_offset)])
            segment = state._segments.active
            self._write(
                lambda: segment.append_table(
                    view,
                    table,
                    first_offset=first_offset,
                    next_offset=last_offset + 1,
                    leader_epoch=None,
                    keep_offsets=True,
                ),
                first_offset,
                last_offset + 1,
                segment,
            )
            if headers is not None and scanned.flags & batch_table.HAS_PRODUCER:
                aborted = state.producer_state.update(
                    producer_batches(
                        ((h, h.base_offset, h.last_offset) for h in headers), view, positions
                    )
                )
                for entry in aborted:  # the leader's entries, computed the same way
                    segment.txn_index.append(entry)
            return LogAppendInfo(
                first_offset,
                last_offset,
                max_timestamp,
                NO_TIMESTAMP,
                state._log_start_offset,
                batch_table.batch_count(table),
                len(view),
            )

    def _check_sequences(self, validated: ValidatedRecords) -> BatchMetadata | None:
        """The duplicate this idempotent input repeats (None: new), or why it may not be
        written. A sequence gap right after an append that failed on the disk is that
        failure's, not a lost batch: answered KAFKA_STORAGE_ERROR (retriable), as Kafka's
        broker answers every append once a write has failed and taken its log dir offline.
        Answered OUT_OF_ORDER_SEQUENCE_NUMBER, it made librdkafka bump its producer epoch
        and send again from sequence 0 what it had not had acknowledged, which can write a
        batch twice (librdkafka issue 4953; seen in the Streams fault campaign)."""
        state = self._state
        try:
            return state.producer_state.check_append(
                producer_batches((h, 0, 0) for _, h in validated.batches),
                validated.batch_count,
            )
        except OutOfOrderSequenceError as exc:
            if not state._write_failed:
                raise
            raise StorageError(
                f"{exc}: the append before it failed on this log's disk and none has "
                "succeeded since"
            ) from exc

    def _write(
        self,
        append: Callable[[], None],
        first_offset: int,
        next_offset: int,
        segment: LogSegment,
    ) -> None:
        """The end of every append, leader's or follower's: `append` writes to `segment`;
        then move the log end offset, flush when `flush_messages` says so (the lock is
        held)."""
        state = self._state
        try:
            append()
        except BaseException:
            state._write_failed = True
            # The append's epochs were recorded before its bytes, as Kafka orders them; one
            # that failed (a full disk: retriable here) must not leave an epoch the log does
            # not hold, or this replica would name it as its last fetched epoch and the
            # leader could not see the logs diverge.
            state.leader_epochs.truncate_from_end(state._log_end_offset)
            raise
        state._write_failed = False
        state._changed_since_flush = state._snapshot_due = True
        state._log_end_offset = next_offset
        state._log_end_position = (next_offset, segment, segment.size)
        state._unflushed_messages += next_offset - first_offset
        if state._unflushed_messages >= state.config.flush_messages:
            self._flushing.flush()
        state.mark_dirty()

    def _maybe_roll(
        self, messages_bytes: int, max_timestamp: int, max_offset: int, now_ms: int
    ) -> LogSegment:
        state = self._state
        segment = state._segments.active
        if segment.should_roll(
            messages_bytes=messages_bytes,
            max_timestamp=max_timestamp,
            max_offset=max_offset,
            segment_bytes=state.config.segment_bytes,
            segment_ms=state.config.max_segment_ms,
            now_ms=now_ms,
        ):
            return self.roll()
        return segment

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end offset (a no-op on an empty one)."""
        state = self._state
        with state._lock:
            state._check_open()
            return self._roll_at(state._log_end_offset)

    def _roll_at(self, base_offset: int) -> LogSegment:
        state = self._state
        active = state._segments.active
        if active.size == 0 and active.base_offset == base_offset:
            return active
        if active.size == 0:
            # An empty active segment is replaced rather than left between two others.
            active.delete_files()
            state._segments.remove([active])
        else:
            active.on_become_inactive()
        segment = state.segment_factory.open(base_offset)
        state._make_active(segment)
        state._segments.add(segment)
        state._rolled_up_to = segment.base_offset
        state._changed_since_flush = state._snapshot_due = True
        # Kafka's roll: the producer state as of the new segment's base, so a later load
        # replays from here; fsynced with the rolled segment by the scheduled flush.
        state.producer_state.remove_expired(state.clock.now_ms(), PRODUCER_ID_EXPIRATION_MS)
        state.producer_state.take_snapshot(base_offset, sync=False)
        return segment


def _bases(validated: ValidatedRecords, first_offset: int) -> Iterator[int]:
    """Each batch's base offset once the append gives the first `first_offset` (the rare
    paths that need them one by one)."""
    base = first_offset
    for _, header in validated.batches:
        yield base
        base += header.last_offset_delta + 1
