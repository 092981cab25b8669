"""One copied segment read back from a real S3 store (SeaweedFS) by RemoteLogReader, as the
copier lays it out: the bytes the local read answers."""

from __future__ import annotations

from seglog.storage import Log
from seglog.storage.config import LogConfig
from seglog.storage.remote_chunks import RemoteChunks
from seglog.storage.remote_indexes import RemoteIndexCache
from seglog.storage.remote_layout import (
    OFFSET_INDEX,
    SEGMENT_LOG,
    TIME_INDEX,
    SegmentKey,
    segment_object,
)
from seglog.storage.remote_metadata import COPY_SEGMENT_FINISHED, RemoteSegment
from seglog.storage.remote_reads import RemoteLogReader
from seglog.storage.remote_store import RemoteStore
from tests.batches import make_batch

PREFIX = "tiered-reads"


def test_remote_segment_reads_answer_the_local_reads_bytes(tmp_path, seaweedfs):
    """RemoteLogReader over one segment uploaded as the copier lays it out: from every batch
    start and from inside batches, the bytes the local read answers (cut to max_bytes at
    whole batches); a batch larger than the first GET's window whole; bounded by max_offset;
    none when min_one_message is off and the first batch is too large."""
    store = RemoteStore(seaweedfs.storage_config(f"{PREFIX}-reader"))
    log = Log.open(tmp_path / "reader-0", LogConfig(index_interval_bytes=300))
    sizes = [1, 3, 40, 2, 900, 5, 1, 7]  # records per batch; the 900's batch is ~100 KiB
    for i, count in enumerate(sizes * 3):
        log.append(make_batch([b"%d-%d-" % (i, j) + b"y" * 100 for j in range(count)]))
    segment = log.segments[0]
    log.roll()  # trims the indexes to their entries, as a copied segment's are
    key = SegmentKey("reader", "id-reader", 0, 0, "segment-one")
    store.put_file(segment_object(key, SEGMENT_LOG), segment.log.path)
    store.put_bytes(segment_object(key, OFFSET_INDEX), segment.offset_index.path.read_bytes())
    store.put_bytes(segment_object(key, TIME_INDEX), segment.time_index.path.read_bytes())
    remote = RemoteSegment(
        topic_id="id-reader",
        partition=0,
        segment_id="segment-one",
        base_offset=0,
        end_offset=log.log_end_offset - 1,
        max_timestamp_ms=segment.max_timestamp_so_far,
        size_bytes=segment.size,
        leader_epochs=(),
        state=COPY_SEGMENT_FINISHED,
        topic="reader",
    )
    reader = RemoteLogReader(store, RemoteIndexCache())
    end = log.log_end_offset
    for offset in range(0, end, 41):  # batch starts and insides, each size of batch
        for max_bytes in (1, 3000, 200_000):
            local = bytes(log.read(offset, max_bytes))
            got = reader.read("reader", remote, offset, max_bytes)
            assert got.data == local, (offset, max_bytes)
    big = sum(sizes[:4])  # the first ~100 KiB batch: wider than one GET's window
    whole = reader.read("reader", remote, big + 10, 10)
    assert whole.data == bytes(log.read(big + 10, 10)) and len(whole.data) > 90_000
    assert whole.next_offset == big + 900
    assert reader.read("reader", remote, big, 10, min_one_message=False).data == b""
    # A consumer reading forward: its next read starts where this one ended (no index), from
    # chunks fetched ahead, each GET once.
    reader = RemoteLogReader(store, RemoteIndexCache(), RemoteChunks(store, chunk_bytes=4096))
    first = reader.read("reader", remote, 0, 2000)
    claimed = reader.fetch_ahead("reader", remote, first.next_position, 3, 3)
    assert first.next_position < 4096 and claimed == [1, 2]  # chunk 0 is held: read from
    for index in claimed:
        reader.fill("reader", remote, index)
    gets = reader.chunks.gets
    following = reader.read("reader", remote, first.next_offset, 9000)  # across 3 chunks
    assert reader.chunks.gets == gets  # all of it from chunks fetched ahead
    assert following.data == bytes(log.read(first.next_offset, 9000))
    assert reader.fetch_ahead("reader", remote, first.next_position, 3, 3) == []  # held already
    bounded = reader.read("reader", remote, 0, 1 << 20, max_offset=big)
    assert bounded.next_offset == big and bounded.data == bytes(log.read(0, len(bounded.data)))
    log.close()
