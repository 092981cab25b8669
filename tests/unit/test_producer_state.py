"""Idempotent producers' state in a log (Kafka's ProducerStateManager): retries answered with
their original offsets and not written twice, gaps and stale epochs refused with nothing
written, the state rebuilt after restarts and truncation, built by followers, and Kafka's
`.snapshot` file format. Batches come from kafka-python's builder, an independent codec."""

from __future__ import annotations

import struct
import time

import crc32c
import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from seglog.errors import InvalidProducerEpochError, InvalidRecordError, OutOfOrderSequenceError
from seglog.storage import Log, LogConfig
from seglog.storage.producer_state import SNAPSHOT_SUFFIX


def idempotent_batch(pid: int, epoch: int, sequence: int, count: int = 2) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=sequence,
        batch_size=1 << 20,
    )
    now = time.time_ns() // 1_000_000
    for i in range(count):
        builder.append(i, timestamp=now, key=None, value=b"v%d" % (sequence + i), headers=[])
    return bytes(builder.build())


def test_a_retried_batch_gets_its_original_offsets_and_is_not_written_again(tmp_path):
    log = Log.open(tmp_path / "t-0")
    first = log.append(idempotent_batch(7, 0, 0))
    second = log.append(idempotent_batch(7, 0, 2))
    size = log.size_in_bytes
    retry = log.append(idempotent_batch(7, 0, 0))
    assert (retry.first_offset, retry.last_offset) == (first.first_offset, first.last_offset)
    assert retry.batch_count == 0 and log.size_in_bytes == size
    assert log.log_end_offset == second.last_offset + 1 == 4
    # Another producer is independent; a producer the log never saw may start anywhere.
    assert log.append(idempotent_batch(8, 3, 41)).first_offset == 4


def test_a_gap_or_an_older_epoch_is_refused_and_nothing_is_written(tmp_path):
    log = Log.open(tmp_path / "t-0")
    log.append(idempotent_batch(7, 1, 0))
    end = log.log_end_offset
    with pytest.raises(OutOfOrderSequenceError, match="does not follow 1"):
        log.append(idempotent_batch(7, 1, 5))
    with pytest.raises(InvalidProducerEpochError, match="older"):
        log.append(idempotent_batch(7, 0, 2))
    with pytest.raises(OutOfOrderSequenceError, match="must start at sequence 0"):
        log.append(idempotent_batch(7, 2, 3))
    assert log.log_end_offset == end
    # A new epoch starting at 0 is taken and forgets the old epoch's batches.
    assert log.append(idempotent_batch(7, 2, 0)).first_offset == end
    with pytest.raises(OutOfOrderSequenceError):
        log.append(idempotent_batch(7, 2, 9))


def test_sequences_wrap_after_int32_max(tmp_path):
    log = Log.open(tmp_path / "t-0")
    log.append(idempotent_batch(7, 0, 2**31 - 2, count=2))  # 2^31-2 .. 2^31-1
    assert log.append(idempotent_batch(7, 0, 0)).first_offset == 2


def test_the_state_survives_restarts_clean_or_not(tmp_path, now_ms):
    directory = tmp_path / "t-0"
    log = Log.open(directory, LogConfig(segment_bytes=300))
    offsets = []
    for sequence in range(0, 20, 2):
        offsets.append(log.append(idempotent_batch(7, 0, sequence)).first_offset)
    log.close()  # clean: a snapshot at the log end
    assert (directory / f"{log.log_end_offset:020d}{SNAPSHOT_SUFFIX}").exists()
    reopened = Log.open(directory, LogConfig(segment_bytes=300))
    assert reopened.append(idempotent_batch(7, 0, 18)).first_offset == offsets[-1]  # dedup
    assert reopened.append(idempotent_batch(7, 0, 20)).first_offset == 20
    # Unclean: the close snapshot is gone; the roll snapshots and the headers after them
    # rebuild the same state.
    end = reopened.log_end_offset
    reopened.close()
    (directory / f"{end:020d}{SNAPSHOT_SUFFIX}").unlink()
    again = Log.open(directory, LogConfig(segment_bytes=300))
    assert again.append(idempotent_batch(7, 0, 20)).first_offset == 20  # still a duplicate
    with pytest.raises(OutOfOrderSequenceError):
        again.append(idempotent_batch(7, 0, 30))
    again.close()


def test_a_corrupt_snapshot_is_deleted_and_an_older_one_used(tmp_path):
    directory = tmp_path / "t-0"
    log = Log.open(directory, LogConfig(segment_bytes=300))
    for sequence in range(0, 20, 2):
        log.append(idempotent_batch(7, 0, sequence))
    end = log.log_end_offset
    log.close()
    newest = directory / f"{end:020d}{SNAPSHOT_SUFFIX}"
    data = bytearray(newest.read_bytes())
    data[-1] ^= 0xFF
    newest.write_bytes(bytes(data))
    reopened = Log.open(directory, LogConfig(segment_bytes=300))
    assert not newest.exists() or newest.read_bytes() != bytes(data)
    assert reopened.append(idempotent_batch(7, 0, 18)).first_offset == end - 2  # dedup
    reopened.close()


def test_snapshots_are_kafkas_format(tmp_path):
    directory = tmp_path / "t-0"
    log = Log.open(directory)
    log.append(idempotent_batch(7, 3, 0, count=4))  # offsets 0-3, sequences 0-3
    log.close()
    data = (directory / f"{4:020d}{SNAPSHOT_SUFFIX}").read_bytes()
    version, crc, count = struct.unpack_from(">hIi", data)
    assert (version, count, len(data)) == (1, 1, 10 + 46)
    assert crc == crc32c.crc32c(data[6:])
    pid, epoch, last_seq, last_offset, delta, _timestamp, coordinator, txn = struct.unpack_from(
        ">qhiqiqiq", data, 10
    )
    assert (pid, epoch, last_seq, last_offset, delta, coordinator, txn) == (7, 3, 3, 3, 3, -1, -1)


def test_truncation_rebuilds_the_state_and_followers_build_it_from_copies(tmp_path):
    leader = Log.open(tmp_path / "leader" / "t-0")
    for sequence in range(0, 10, 2):
        leader.append(idempotent_batch(7, 0, sequence))
    leader.truncate_to(6)  # the batches of sequences 6 and 8 are gone
    with pytest.raises(OutOfOrderSequenceError):
        leader.append(idempotent_batch(7, 0, 8))
    assert leader.append(idempotent_batch(7, 0, 6)).first_offset == 6  # not a duplicate now
    follower = Log.open(tmp_path / "follower" / "t-0")
    follower.append_as_follower(leader.read(0, 1 << 20))
    assert follower.append(idempotent_batch(7, 0, 6)).first_offset == 6  # dedup on a copy


def test_a_request_repeating_a_written_batch_with_a_new_one_is_refused_whole(tmp_path):
    """The loss on retry (issue 26): A written, then A + B in one append. Answering with A's
    offsets and writing nothing of B acknowledged B at offsets that hold other records."""
    log = Log.open(tmp_path / "t-0")
    a, b = idempotent_batch(7, 0, 0), idempotent_batch(7, 0, 2)
    log.append(a)
    with pytest.raises(InvalidRecordError, match="already written"):
        log.append(a + b)
    assert log.log_end_offset == 2
    # B alone is the next batch in sequence and is written; A + B again is all duplicates,
    # written contiguously, so it is answered with the span of both.
    assert (log.append(b).first_offset, log.log_end_offset) == (2, 4)
    retry = log.append(a + b)
    assert (retry.first_offset, retry.last_offset, retry.batch_count) == (0, 3, 0)
    assert log.log_end_offset == 4


def test_duplicates_written_apart_cannot_be_answered_as_one_span(tmp_path):
    log = Log.open(tmp_path / "t-0")
    a, b = idempotent_batch(7, 0, 0), idempotent_batch(7, 0, 2)
    log.append(a)
    log.append(idempotent_batch(8, 0, 0))  # another producer's records between them
    log.append(b)
    with pytest.raises(InvalidRecordError, match="not contiguous"):
        log.append(a + b)
    assert log.log_end_offset == 6
    assert log.append(b).first_offset == 4  # each alone is answered with its own offsets


def test_new_batches_of_one_producer_in_one_request_are_checked_in_order(tmp_path):
    log = Log.open(tmp_path / "t-0")
    info = log.append(idempotent_batch(7, 0, 0) + idempotent_batch(7, 0, 2))
    assert (info.first_offset, info.last_offset, info.batch_count) == (0, 3, 2)
    with pytest.raises(OutOfOrderSequenceError, match="same request"):
        log.append(idempotent_batch(7, 0, 4) + idempotent_batch(7, 0, 9))
    assert log.log_end_offset == 4


def test_every_batch_of_a_long_request_is_recognised_when_retried_alone(tmp_path):
    """Kafka's window is five batches; ours is five runs, so a request of twenty batches
    (our producer's shape) is covered whole, on the leader and on a follower that copied it
    in other chunks, and each retried batch gets its own original offsets."""
    leader = Log.open(tmp_path / "leader" / "t-0")
    batches = [idempotent_batch(7, 0, 3 * i, count=3) for i in range(20)]
    leader.append(idempotent_batch(8, 0, 0))  # another producer first: offsets 0-1
    info = leader.append(b"".join(batches))
    assert (info.first_offset, info.last_offset) == (2, 61)
    follower = Log.open(tmp_path / "follower" / "t-0")
    data = bytes(leader.read(0, 1 << 20))
    cut = len(idempotent_batch(8, 0, 0)) + sum(map(len, batches[:7]))  # ends mid-request
    follower.append_as_follower(data[:cut])
    follower.append_as_follower(data[cut:])
    for log in (leader, follower):
        end = log.log_end_offset
        for i, batch in enumerate(batches):
            retry = log.append(batch)
            assert (retry.first_offset, retry.last_offset, retry.batch_count) == (
                2 + 3 * i,
                4 + 3 * i,
                0,
            )
        assert log.log_end_offset == end
        # A batch straddling what was written is not a duplicate, and not in sequence.
        with pytest.raises(OutOfOrderSequenceError):
            log.append(idempotent_batch(7, 0, 58, count=4))
        assert log.append(idempotent_batch(7, 0, 60)).first_offset == end


def test_a_coordinators_batches_without_sequence_are_never_duplicates(tmp_path):
    """A group coordinator writes a transaction's offsets with the producer's id and epoch
    and no sequence (Kafka's AppendOrigin.COORDINATOR): each is written, in any epoch order
    up, and only an older epoch is refused."""
    log = Log.open(tmp_path / "__consumer_offsets-0")
    first = log.append(idempotent_batch(7, 0, -1))
    again = log.append(idempotent_batch(7, 0, -1))
    assert again.batch_count == 1 and again.first_offset == first.last_offset + 1
    assert log.append(idempotent_batch(7, 2, -1)).batch_count == 1
    with pytest.raises(InvalidProducerEpochError):
        log.append(idempotent_batch(7, 1, -1))
