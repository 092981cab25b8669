"""Where recent appends ended (append_ends.py, the reads' shortcut for a caught-up follower or
consumer): every read finds exactly what the indexes and headers alone find, through appends
of one and of many batches, segment rolls, truncations and refills, at every offset, with and
without a high-watermark bound."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.storage import Log
from seglog.storage.config import LogConfig
from tests.batches import make_batch

# (batches in one append, records per batch, record bytes) or a truncation to a fraction of
# the log end.
STEPS = st.lists(
    st.one_of(
        st.tuples(st.integers(1, 4), st.integers(1, 5), st.integers(1, 300)),
        st.floats(0, 1),
    ),
    min_size=1,
    max_size=25,
)


def _place(found):
    piece = found.segment_slice
    if piece is None:
        return (None, found.next_offset)
    return (
        piece.segment.base_offset,
        piece.position,
        piece.size,
        piece.first_batch_base_offset,
        piece.next_offset,
        found.next_offset,
    )


def _reads(log: Log, bound: int | None) -> list:
    out = []
    for offset in range(log.log_start_offset, log.log_end_offset + 1):
        for max_bytes in (1, 200, 1 << 20):
            found = log.locate_records(offset, max_bytes, max_offset=bound)
            out.append((offset, max_bytes, _place(found)))
    return out


@settings(max_examples=60, deadline=None)
@given(STEPS)
def test_reads_find_what_the_indexes_alone_find(steps):
    with tempfile.TemporaryDirectory() as tmp:
        log = Log.open(Path(tmp) / "t-0", LogConfig(segment_bytes=2048, index_interval_bytes=256))
        try:
            for step in steps:
                if isinstance(step, float):
                    log.truncate_to(int(log.log_end_offset * step))
                    continue
                batches, records, size = step
                payload = b"".join(make_batch([b"v" * size] * records) for _ in range(batches))
                log.append(payload, leader_epoch=0)
            bound = log.log_end_offset // 2
            remembered = (_reads(log, None), _reads(log, bound))
            for segment in log._state._segments.snapshot().segments:
                segment.append_ends.forget()
            assert (_reads(log, None), _reads(log, bound)) == remembered
        finally:
            log.close()


def test_a_caught_up_readers_offset_is_found_where_the_last_append_ended(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(index_interval_bytes=1 << 20))
    try:
        for i in range(5):
            log.append(make_batch([b"r%d" % i]), leader_epoch=0)
        segment = log._state._segments.active
        end = segment.log.size
        assert segment.append_ends.offset_after(end) == 5
        position = segment.translate_offset(4).position
        # Found without the index (which has no entry: the interval is larger than the log).
        assert segment.offset_index.entries == 0 and position == dict(segment.append_ends._ends)[4]
        log.truncate_to(2)  # the file is cut: nothing remembered survives it
        assert segment.append_ends.offset_after(end) is None and not segment.append_ends._ends
        log.append(make_batch([b"again"]), leader_epoch=0)
        assert segment.append_ends.offset_after(segment.log.size) == 3
        log.roll()  # no longer active: a reader still there is behind, the index finds it
        assert segment.append_ends.offset_after(segment.log.size) is None
    finally:
        log.close()
