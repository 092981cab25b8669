"""Transactions in one partition's log: open transactions and the last stable offset, ABORT
markers indexed in the segment's `.txnindex` (Kafka's bytes), producer snapshots keeping open
transactions in Kafka's fields, and all of it rebuilt when the index is missing or torn, after
a crash, and after truncation."""

from __future__ import annotations

import shutil
import struct
import time

from seglog.records import RecordBatchBuilder
from seglog.records.batch import read_header
from seglog.records.control import ControlMarker, build_marker, read_marker
from seglog.rpc import wire
from seglog.storage import Log, ManualClock
from seglog.storage.cleaner import Cleaner
from seglog.storage.config import LogConfig
from seglog.storage.txn_index import AbortedTxn
from seglog.v1 import common_pb2


def txn_batch(producer_id: int, count: int, *, epoch: int = 0, sequence: int = 0) -> bytes:
    builder = RecordBatchBuilder(
        producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence, is_transactional=True
    )
    now = time.time_ns() // 1_000_000
    for i in range(count):
        builder.append(b"k%d" % i, b"v", now)
    return builder.build()


def abort(producer_id: int, epoch: int = 0) -> tuple[int, int, ControlMarker]:
    return producer_id, epoch, ControlMarker(False, 4)


def commit(producer_id: int, epoch: int = 0) -> tuple[int, int, ControlMarker]:
    return producer_id, epoch, ControlMarker(True, 4)


def fill(log: Log) -> None:
    """0-2 producer 1, 3-4 producer 2, 5 abort 1, 6 commit 2, 7 producer 3 (left open)."""
    log.append(txn_batch(1, 3), leader_epoch=0)
    log.append(txn_batch(2, 2), leader_epoch=0)
    log.append_marker(*abort(1), leader_epoch=0)
    log.append_marker(*commit(2), leader_epoch=0)
    log.append(txn_batch(3, 1), leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)


def kafka_entry(producer_id: int, first: int, last: int, lso: int) -> bytes:
    """Kafka's AbortedTxn: version int16 0, then four int64s."""
    return struct.pack(">hqqqq", 0, producer_id, first, last, lso)


def test_the_marker_is_kafkas_end_transaction_marker():
    batch = build_marker(77, 3, ControlMarker(False, 9), timestamp_ms=1_000)
    header = read_header(memoryview(batch), 0)
    assert header.attributes == 0x30 and header.record_count == 1 and header.base_sequence == -1
    assert (header.producer_id, header.producer_epoch) == (77, 3)
    assert len(batch) == 78  # Kafka's control batch of one marker record is 78 bytes
    # The record's key (version 0, ABORT 0) and value (version 0, coordinator epoch 9).
    assert batch.endswith(b"\x08\x00\x00\x00\x00\x0c\x00\x00\x00\x00\x00\x09\x00")
    assert read_marker(batch, header) == ControlMarker(False, 9)


def test_last_stable_offset_and_txnindex(tmp_path):
    log = Log.open(tmp_path / "t-0")
    log.append(txn_batch(1, 3), leader_epoch=0)
    log.append(txn_batch(2, 2), leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 0
    log.append_marker(*abort(1), leader_epoch=0)
    # Until the marker is below the high watermark, the transaction is still unstable.
    assert log.last_stable_offset == 0
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 3  # producer 2's transaction is still open
    log.append_marker(*commit(2), leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 7
    path = log.segments[0].txn_index.path
    assert path.name == "00000000000000000000.txnindex"
    assert path.read_bytes() == kafka_entry(1, 0, 5, 3)
    assert log.aborted_transactions(0, 7) == [AbortedTxn(1, 0, 5, 3)]
    assert log.aborted_transactions(6, 7) == []
    log.close()


def test_snapshots_keep_open_transactions_in_kafkas_fields(tmp_path):
    log = Log.open(tmp_path / "t-0")
    fill(log)
    log.close()
    (snapshot,) = (tmp_path / "t-0").glob("*.snapshot")
    data = snapshot.read_bytes()
    entries = {}
    for i in range(struct.unpack_from(">i", data, 6)[0]):
        fields = struct.unpack_from(">qhiqiqiq", data, 10 + 46 * i)
        entries[fields[0]] = (fields[6], fields[7])  # CoordinatorEpoch, CurrentTxnFirstOffset
    assert entries == {1: (4, -1), 2: (4, -1), 3: (-1, 7)}
    reopened = Log.open(tmp_path / "t-0")
    reopened.update_high_watermark(reopened.log_end_offset)
    assert reopened.last_stable_offset == 7
    open_ = {p.producer_id: p.current_txn_start_offset for p in reopened.active_producers()}
    assert open_ == {1: -1, 2: -1, 3: 7}
    reopened.close()


def test_a_missing_or_torn_txnindex_is_rebuilt_byte_for_byte(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=200))
    fill(log)
    log.append_marker(*abort(3), leader_epoch=0)
    log.close()
    indexes = sorted((tmp_path / "t-0").glob("*.txnindex"))
    assert len(indexes) == len(list((tmp_path / "t-0").glob("*.log")))  # one beside each
    before = {p.name: p.read_bytes() for p in indexes}
    assert sum(len(b) for b in before.values()) == 2 * 34
    for path in indexes:
        if path.stat().st_size:
            path.write_bytes(path.read_bytes()[:20])  # torn
        else:
            path.unlink()  # missing
    reopened = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=200))
    assert {p.name: p.read_bytes() for p in sorted((tmp_path / "t-0").glob("*.txnindex"))} == before
    assert reopened.aborted_transactions(0, 9) == [AbortedTxn(1, 0, 5, 3), AbortedTxn(3, 7, 8, 9)]
    reopened.close()


def test_a_crash_rebuilds_the_index_and_open_transactions_from_the_log(tmp_path):
    log = Log.open(tmp_path / "live" / "t-0")
    fill(log)
    log.flush()
    # The files as a crash leaves them: no clean shutdown, no close.
    shutil.copytree(tmp_path / "live", tmp_path / "crashed")
    log.close()
    crashed = Log.open(tmp_path / "crashed" / "t-0")
    crashed.update_high_watermark(crashed.log_end_offset)
    assert crashed.segments[0].txn_index.path.read_bytes() == kafka_entry(1, 0, 5, 3)
    assert crashed.last_stable_offset == 7
    crashed.close()


def test_truncation_cuts_the_index_and_reopens_the_transaction(tmp_path):
    log = Log.open(tmp_path / "t-0")
    fill(log)
    assert log.last_stable_offset == 7
    log.truncate_to(6)  # producer 2's COMMIT is gone: its transaction is open again
    assert log.last_stable_offset == 3
    log.truncate_to(5)  # and producer 1's ABORT: nothing aborted, both open
    assert log.segments[0].txn_index.path.read_bytes() == b""
    assert log.aborted_transactions(0, 5) == []
    assert log.last_stable_offset == 0
    log.close()


def test_followers_index_the_leaders_markers_identically(tmp_path):
    leader = Log.open(tmp_path / "a" / "t-0")
    fill(leader)
    follower = Log.open(tmp_path / "b" / "t-0")
    follower.append_as_follower(leader.read(0, 1 << 20))
    follower.update_high_watermark(follower.log_end_offset)
    assert follower.last_stable_offset == leader.last_stable_offset == 7
    assert (
        follower.segments[0].txn_index.path.read_bytes()
        == leader.segments[0].txn_index.path.read_bytes()
    )
    leader.close()
    follower.close()


def test_a_producer_with_an_open_transaction_never_expires(tmp_path):
    log = Log.open(tmp_path / "t-0")
    fill(log)
    state = log.producer_state
    state.remove_expired(now_ms=time.time_ns() // 1_000_000 + 10**9, expiration_ms=1)
    assert set(state.producers) == {3}
    log.close()


def test_a_deleted_segment_takes_its_txnindex_with_it(tmp_path):
    config = LogConfig(segment_bytes=200, file_delete_delay_ms=0)
    log = Log.open(tmp_path / "t-0", config)
    fill(log)
    log.roll()
    log.flush()
    doomed = log.segments[:-1]
    indexes = [s.txn_index.path for s in doomed]
    assert b"".join(p.read_bytes() for p in indexes) == kafka_entry(1, 0, 5, 3)
    log.delete_segments(doomed)
    assert not any(p.exists() for p in indexes)
    assert not list((tmp_path / "t-0").glob("*.txnindex.deleted"))
    assert log.aborted_transactions(0, log.log_end_offset) == []
    log.close()


def test_compaction_keeps_the_aborted_transactions_listed(tmp_path):
    clock = ManualClock(time.time_ns() // 1_000_000)
    config = LogConfig(cleanup_policy="compact", min_cleanable_dirty_ratio=0.0)
    log = Log.open(tmp_path / "c-0", config, clock=clock)
    fill(log)
    log.roll()
    Cleaner(clock=clock).clean(log, 0, log.active_segment.base_offset)
    assert log.aborted_transactions(0, log.log_end_offset) == [AbortedTxn(1, 0, 5, 3)]
    log.close()


def test_compaction_drops_aborted_data_and_never_lets_it_supersede_committed(tmp_path):
    clock = ManualClock(time.time_ns() // 1_000_000)
    config = LogConfig(cleanup_policy="compact", min_cleanable_dirty_ratio=0.0)
    log = Log.open(tmp_path / "c-0", config, clock=clock)
    committed = RecordBatchBuilder()
    committed.append(b"k0", b"committed", clock.now_ms())
    log.append(committed.build(), leader_epoch=0)  # 0: k0 committed
    log.append(txn_batch(1, 1), leader_epoch=0)  # 1: k0 aborted below
    log.append_marker(*abort(1), leader_epoch=0)  # 2
    log.append(txn_batch(2, 1), leader_epoch=0)  # 3: k0, still open
    log.update_high_watermark(log.log_end_offset)
    log.roll()
    Cleaner(clock=clock).clean(log, 0, log.active_segment.base_offset)
    kept = []
    for segment in log.segments:
        for found in segment.log.batches():
            h = found.header
            kept.append((h.base_offset, h.is_control, h.record_count))
    # The aborted k0 went and did not take the committed one with it (its batch stays
    # empty: producer 1's last batch keeps its state, Kafka's RETAIN_EMPTY); the open
    # transaction's batch is past the first unstable offset, not cleaned.
    assert kept == [(0, False, 1), (1, False, 0), (2, True, 1), (3, False, 1)]
    assert log.aborted_transactions(0, 4) == [AbortedTxn(1, 1, 2, 3)]
    assert log.cleaned_up_to_offset <= 3
    log.close()


def test_the_nodes_fetch_answer_bytes_are_protobufs_own():
    """The node writes FetchResponse's wire bytes itself (rpc/wire.py): with the LSO and the
    aborted transactions they must equal protobuf's serialization."""
    expected = common_pb2.FetchResponse(
        topic="t",
        partition=3,
        high_watermark=9,
        log_start_offset=1,
        records=b"xyz",
        segment_base_offset=2,
        last_stable_offset=7,
        aborted_transactions=[
            common_pb2.AbortedTransaction(producer_id=5, first_offset=0),
            common_pb2.AbortedTransaction(producer_id=0, first_offset=4),
        ],
    )
    suffix = wire.fetch_response_suffix(None, 0, 2, 7, [(5, 0), (0, 4)])
    assert wire.encode_fetch_response("t", 3, 9, 1, b"xyz", suffix=suffix) == (
        expected.SerializeToString()
    )
    unknown = common_pb2.FetchResponse(topic="t", error=6, last_stable_offset=-1)
    suffix = wire.fetch_response_suffix(last_stable_offset=-1)
    assert wire.encode_fetch_response("t", 0, 0, 0, b"", 6, suffix=suffix) == (
        unknown.SerializeToString()
    )


def test_the_lso_never_falls_below_the_log_start(tmp_path):
    log = Log.open(tmp_path / "t-0")
    fill(log)  # producer 3's transaction is open at 7
    log.append(txn_batch(4, 2), leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    log.delete_records_before(9)
    assert log.last_stable_offset == 9  # as Kafka clamps its first unstable offset
    log.close()
