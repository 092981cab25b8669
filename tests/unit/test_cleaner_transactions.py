"""Compaction and transaction markers on a compacted log (the real engine, a manual clock),
as Kafka's LogCleaner treats them: a COMMIT marker goes once its transaction's data is gone
and the delete horizon its first removable clean stamped has passed; an ABORT marker stays
(its `.txnindex` entry with it) for the pass that drops its data, then goes the same way; a
producer's last batch keeps its state (emptied, not removed)."""

from __future__ import annotations

import time

from seglog.records import RecordBatchBuilder
from seglog.records.batch import DELETE_HORIZON_MASK
from seglog.records.control import ControlMarker
from seglog.storage import Log, ManualClock
from seglog.storage.cleaner import Cleaner
from seglog.storage.config import LogConfig
from seglog.storage.txn_index import AbortedTxn

HORIZON_MS = 1000
COMMIT, ABORT = ControlMarker(True, 4), ControlMarker(False, 4)


def batch(key: bytes, value: bytes, *, producer_id: int = -1, sequence: int = 0) -> bytes:
    transactional = producer_id >= 0
    builder = RecordBatchBuilder(
        producer_id=producer_id,
        producer_epoch=0 if transactional else -1,
        base_sequence=sequence if transactional else -1,
        is_transactional=transactional,
    )
    builder.append(key, value, time.time_ns() // 1_000_000)
    return builder.build()


def headers(log: Log) -> dict[int, tuple[bool, int, int | None]]:
    """base offset -> (control, records, delete horizon) of every batch."""
    out = {}
    for segment in log.segments:
        for found in segment.log.batches():
            h = found.header
            out[h.base_offset] = (h.is_control, h.record_count, h.delete_horizon_ms)
    return out


def clean(log: Log, cleaner: Cleaner) -> None:
    cleaner.clean(log, log.log_start_offset, log.active_segment.base_offset)


def test_markers_go_after_their_data_and_the_delete_horizon(tmp_path):
    clock = ManualClock(time.time_ns() // 1_000_000)
    config = LogConfig(
        cleanup_policy="compact", delete_retention_ms=HORIZON_MS, file_delete_delay_ms=0
    )
    log = Log.open(tmp_path / "c-0", config, clock=clock)
    log.append(batch(b"k0", b"old", producer_id=1), leader_epoch=0)  # 0
    log.append_marker(1, 0, COMMIT, leader_epoch=0)  # 1
    log.append(batch(b"k1", b"aborted", producer_id=2), leader_epoch=0)  # 2
    log.append_marker(2, 0, ABORT, leader_epoch=0)  # 3
    # Each producer's last data batch comes later (it stays, holding the producer's state).
    log.append(batch(b"k2", b"kept", producer_id=1, sequence=1), leader_epoch=0)  # 4
    log.append_marker(1, 0, COMMIT, leader_epoch=0)  # 5
    log.append(batch(b"k3", b"kept", producer_id=2, sequence=1), leader_epoch=0)  # 6
    log.append_marker(2, 0, COMMIT, leader_epoch=0)  # 7
    log.append(batch(b"k0", b"new"), leader_epoch=0)  # 8: supersedes offset 0
    log.update_high_watermark(log.log_end_offset)
    log.roll()
    cleaner = Cleaner(clock=clock)

    # Pass 1: the superseded and the aborted data go; the markers stay (their transactions'
    # batches were seen in this pass), the ABORT's entry with it.
    clean(log, cleaner)
    found = headers(log)
    assert 0 not in found and 2 not in found
    assert found[1] == (True, 1, None) and found[3] == (True, 1, None)
    assert log.aborted_transactions(0, log.log_end_offset) == [AbortedTxn(2, 2, 3, 4)]

    # Pass 2: no data of either transaction left: their markers get a delete horizon, and the
    # aborted transaction, with nothing left to skip, leaves the index.
    clean(log, cleaner)
    found = headers(log)
    horizon = clock.now_ms() + HORIZON_MS
    assert found[1] == (True, 1, horizon) and found[3] == (True, 1, horizon)
    assert log.aborted_transactions(0, log.log_end_offset) == []
    with open(log.segments[0].log.path, "rb") as f:
        f.seek(21)  # the attributes of the first batch (the marker at offset 1)
        assert int.from_bytes(f.read(2), "big") & DELETE_HORIZON_MASK

    # Until the horizon they stay; from it they go. The markers of transactions whose data
    # is still there (5, 7) stay throughout.
    clock.advance(HORIZON_MS - 1)
    clean(log, cleaner)
    assert {1, 3} <= set(headers(log))
    clock.advance(1)
    clean(log, cleaner)
    found = headers(log)
    assert 1 not in found and 3 not in found
    assert found[5] == (True, 1, None) and found[7] == (True, 1, None)
    assert {o: v[1] for o, v in found.items() if not v[0]} == {4: 1, 6: 1, 8: 1}
    log.close()
    reopened = Log.open(tmp_path / "c-0", config, clock=clock)
    assert set(headers(reopened)) == {4, 5, 6, 7, 8}
    reopened.close()


def test_a_producers_last_batch_stays_empty_when_its_records_go(tmp_path):
    clock = ManualClock(time.time_ns() // 1_000_000)
    config = LogConfig(cleanup_policy="compact", file_delete_delay_ms=0)
    log = Log.open(tmp_path / "c-0", config, clock=clock)
    log.append(batch(b"k", b"first", producer_id=5), leader_epoch=0)  # 0: producer 5's last
    log.append_marker(5, 0, COMMIT, leader_epoch=0)  # 1
    log.append(batch(b"k", b"second"), leader_epoch=0)  # 2: supersedes it
    log.append(batch(b"other", b"x"), leader_epoch=0)  # 3
    log.update_high_watermark(log.log_end_offset)
    log.roll()
    clean(log, Cleaner(clock=clock))
    found = headers(log)
    assert found[0] == (False, 0, None)  # emptied, kept: producer 5's sequence is in it
    assert found[1] == (True, 1, None)  # its transaction's (empty) batch is still there
    assert log.producer_state.producers[5].last_sequence == 0
    log.close()
