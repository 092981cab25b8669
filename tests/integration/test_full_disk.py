"""A log on a filesystem that fills up: a real ext4 of a few MiB, loop-mounted.

A full disk is answered with a clear retriable StorageError, leaves no partial batch, keeps
reads working, and once space is freed appends go on at the right offsets; closing on a full
disk does not raise and simply leaves no clean-shutdown marker, so the next start recovers.
"""

from __future__ import annotations

import contextlib
import os
import time

import pytest

from seglog.client.gateway import FetchPosition
from seglog.errors import OutOfOrderSequenceError, SeglogError, StorageError
from seglog.records import RecordBatchBuilder, iter_records
from seglog.rpc.status import error_from_code
from seglog.storage import Log, LogConfig
from seglog.storage.checkpoint import CLEAN_SHUTDOWN_MARKER
from seglog.storage.file_records import FileRecords
from tests.batches import make_batch
from tests.small_filesystem import fill_with_ballast, mounted_ext4

FILESYSTEM_BYTES = 4 * 1024 * 1024
BALLAST_BYTES = 768 * 1024
CONFIG = LogConfig(segment_bytes=256 * 1024)
RECORDS_PER_BATCH = 8
MAX_BATCHES = 2000  # far more than fits: the loop ends at the first full-disk error


def values_for(batch_index: int) -> list[bytes]:
    return [b"%06d-%d-" % (batch_index, i) + os.urandom(1000) for i in range(RECORDS_PER_BATCH)]


def fill(log: Log) -> tuple[dict[int, bytes], StorageError]:
    acknowledged: dict[int, bytes] = {}
    for batch_index in range(MAX_BATCHES):
        values = values_for(batch_index)
        try:
            info = log.append(make_batch(values))
        except StorageError as exc:
            return acknowledged, exc
        acknowledged.update(
            zip(range(info.first_offset, info.last_offset + 1), values, strict=True)
        )
    raise AssertionError(f"{MAX_BATCHES} batches fit on a {FILESYSTEM_BYTES}-byte filesystem")


def read_all(log: Log) -> dict[int, bytes]:
    records: dict[int, bytes] = {}
    offset = log.log_start_offset
    for _ in range(MAX_BATCHES * RECORDS_PER_BATCH):
        if offset >= log.log_end_offset:
            break
        chunk = list(iter_records(log.read(offset, 1 << 20)))
        assert chunk, f"nothing at {offset} below the log end {log.log_end_offset}"
        records.update((r.offset, r.value) for r in chunk)
        offset = chunk[-1].offset + 1
    return records


def assert_whole_batches_only(directory) -> None:
    for path in sorted(directory.glob("*.log")):
        records = FileRecords.open(path, create=False)
        try:
            prefix = records.scan_valid_prefix(int(path.name[:20]))
            assert prefix.damage is None, prefix.damage
        finally:
            records.close()


@pytest.fixture
def small_disk(tmp_path):
    with mounted_ext4(tmp_path / "disk.img", tmp_path / "disk", FILESYSTEM_BYTES) as mount:
        yield mount


@pytest.mark.parametrize("close_while_full", [False, True])
def test_a_full_disk_refuses_cleanly_and_appends_resume_once_space_is_freed(
    small_disk, close_while_full
):
    ballast = fill_with_ballast(small_disk, BALLAST_BYTES)
    log = Log.open(small_disk / "t-0", CONFIG)
    try:
        acknowledged, error = fill(log)
        assert error.retriable and error.reason == "KAFKA_STORAGE_ERROR"
        assert "No space left on device" in str(error)
        assert len(acknowledged) > 100
        end = log.log_end_offset
        assert end == max(acknowledged) + 1
        assert_whole_batches_only(small_disk / "t-0")
        assert read_all(log) == acknowledged  # reads go on
        with pytest.raises(StorageError):  # still full: the same clean refusal, no change
            log.append(make_batch(values_for(-1)))
        assert log.log_end_offset == end
        assert_whole_batches_only(small_disk / "t-0")
        if close_while_full:
            log.close()  # checkpoints cannot be written: no raise, no clean marker
            assert not (small_disk / CLEAN_SHUTDOWN_MARKER).exists()
            ballast.unlink()
            log = Log.open(small_disk / "t-0", CONFIG)
            assert log.log_end_offset == end
        else:
            ballast.unlink()
        values = values_for(MAX_BATCHES)
        info = log.append(make_batch(values))
        assert info.first_offset == end
        acknowledged.update(zip(range(end, end + len(values)), values, strict=True))
    finally:
        log.close()
    reopened = Log.open(small_disk / "t-0", CONFIG)
    try:
        assert read_all(reopened) == acknowledged
    finally:
        reopened.close()


def idempotent_batch(sequence: int, values: list[bytes]) -> bytes:
    builder = RecordBatchBuilder(producer_id=42, producer_epoch=0, base_sequence=sequence)
    for value in values:
        builder.append(None, value, 0, None)
    return builder.build()


def test_a_producers_batch_after_one_the_full_disk_refused_is_refused_retriably_too(small_disk):
    """A producer pipelines batches: the one after a batch the full disk refused misses that
    batch's sequence. Answered OUT_OF_ORDER_SEQUENCE_NUMBER (not retriable), librdkafka
    bumped its epoch and sent again what it had in flight, which can write a batch twice;
    answered KAFKA_STORAGE_ERROR as Kafka does once a write failed, both are sent again, in
    order, and written once. A gap with no failed write before it is still out of order."""
    ballast = fill_with_ballast(small_disk, BALLAST_BYTES)
    log = Log.open(small_disk / "t-0", CONFIG)
    try:
        sequence = 0
        for _ in range(MAX_BATCHES):  # one producer's batches until the disk refuses one
            values = values_for(sequence)
            try:
                log.append(idempotent_batch(sequence * RECORDS_PER_BATCH, values))
            except StorageError:
                break
            sequence += 1
        else:
            raise AssertionError("the disk never filled")
        refused, behind = sequence, sequence + 1
        with pytest.raises(StorageError, match="failed on this log's disk"):
            log.append(idempotent_batch(behind * RECORDS_PER_BATCH, values_for(behind)))
        ballast.unlink()
        end = log.log_end_offset
        for batch in (refused, behind):  # the client's retries, in order
            log.append(idempotent_batch(batch * RECORDS_PER_BATCH, values_for(batch)))
        assert log.log_end_offset == end + 2 * RECORDS_PER_BATCH
        gap = behind + 2  # a batch lost for another reason than the disk
        with pytest.raises(OutOfOrderSequenceError):
            log.append(idempotent_batch(gap * RECORDS_PER_BATCH, values_for(gap)))
    finally:
        log.close()


# -- a cluster whose nodes' disks fill up ---------------------------------------------------

NODE_FILESYSTEM_BYTES = 8 * 1024 * 1024
NODE_BALLAST_BYTES = 3 * 1024 * 1024
CLUSTER_TIMEOUT_S = 60.0


def produce_until_refused(cluster, topic: str) -> tuple[dict[int, bytes], SeglogError]:
    """acks=all batches until the cluster refuses one; the acknowledged records by offset,
    and the refusal (a batch whose outcome is unknown is not counted as acknowledged)."""
    acknowledged: dict[int, bytes] = {}
    for batch_index in range(MAX_BATCHES):
        values = values_for(batch_index)
        try:
            [result] = cluster.client.produce(
                topic, {0: make_batch(values)}, acks=-1, timeout_ms=3000
            )
        except SeglogError as exc:
            return acknowledged, exc
        if result.error:
            return acknowledged, error_from_code(result.error, result.error_message)
        acknowledged.update(
            zip(range(result.base_offset, result.last_offset + 1), values, strict=True)
        )
    raise AssertionError("the disks never filled")


@pytest.mark.slow
def test_a_cluster_whose_disks_fill_refuses_retriably_and_recovers_once_space_is_freed(tmp_path):
    """Three node processes, each data dir on its own 8 MiB ext4 (RF 3, min ISR 2): produce
    until refused; the refusal is retriable, reads go on, no node stores a partial batch, and
    once the ballast is deleted produces succeed again with every acknowledged record kept."""
    from tests.faults.cluster import TOPIC, Cluster
    from tests.waiting import wait_for

    with contextlib.ExitStack() as mounts:
        ballasts = []
        for node_id in (1, 2, 3):
            mount = mounts.enter_context(
                mounted_ext4(
                    tmp_path / f"node-{node_id}.img",
                    tmp_path / f"node-{node_id}",
                    NODE_FILESYSTEM_BYTES,
                )
            )
            ballasts.append(fill_with_ballast(mount, NODE_BALLAST_BYTES))
        cluster = Cluster(tmp_path)
        try:
            cluster.admin.create_topic(TOPIC, 1, 3, {"segment.bytes": str(256 * 1024)})
            wait_for(cluster.healed, CLUSTER_TIMEOUT_S, "replicas in sync", cluster.state)
            acknowledged, refusal = produce_until_refused(cluster, TOPIC)
            assert len(acknowledged) > 100
            assert refusal.retriable, refusal
            assert_cluster_reads(cluster, TOPIC, acknowledged)
            for ballast in ballasts:
                ballast.unlink()
            deadline = time.monotonic() + CLUSTER_TIMEOUT_S
            while True:
                values = values_for(MAX_BATCHES)
                try:
                    [result] = cluster.client.produce(
                        TOPIC, {0: make_batch(values)}, acks=-1, timeout_ms=3000
                    )
                except SeglogError as exc:
                    assert exc.retriable, exc
                else:
                    if result.error == 0:
                        break
                assert time.monotonic() < deadline, cluster.state()
                time.sleep(0.2)  # retriable refusals while followers catch up
            acknowledged.update(
                zip(range(result.base_offset, result.last_offset + 1), values, strict=True)
            )
            wait_for(cluster.caught_up, CLUSTER_TIMEOUT_S, "replicas caught up", cluster.state)
            assert_cluster_reads(cluster, TOPIC, acknowledged)
        finally:
            cluster.close()
        for node_id in (1, 2, 3):
            assert_whole_batches_only(tmp_path / f"node-{node_id}" / f"{TOPIC}-0")


def assert_cluster_reads(cluster, topic: str, acknowledged: dict[int, bytes]) -> None:
    records: dict[int, bytes] = {}
    offset, end = 0, max(acknowledged) + 1
    deadline = time.monotonic() + CLUSTER_TIMEOUT_S
    while offset < end:
        assert time.monotonic() < deadline, f"read stuck at {offset} of {end}"
        try:
            for response in cluster.client.fetch(
                [FetchPosition(topic, 0, offset)], max_wait_ms=200
            ):
                for record in iter_records(response.records):
                    records[record.offset] = record.value
                    offset = max(offset, record.offset + 1)
        except SeglogError as exc:  # leadership moved under the read
            assert exc.retriable, exc
            time.sleep(0.1)
    assert {o: records.get(o) for o in acknowledged} == acknowledged
