"""Kafka's remote segment metadata as tiered storage keeps it (remote_metadata.py) and what the
copier derives from a log for it (remote_copier.py): pure functions, no store."""

from __future__ import annotations

import pytest

from seglog.errors import SeglogError
from seglog.storage.leader_epoch_cache import EpochEntry, read_epoch_entries
from seglog.storage.remote_metadata import (
    COPY_SEGMENT_FINISHED,
    COPY_SEGMENT_STARTED,
    DELETE_SEGMENT_FINISHED,
    RemoteSegment,
    _visible,
)
from services.storage_node.remote_copier import epoch_checkpoint_text, segment_epochs


def seg(base: int, end: int, state: str = COPY_SEGMENT_FINISHED, sid: str = "") -> RemoteSegment:
    return RemoteSegment(
        topic_id="id",
        partition=0,
        segment_id=sid or f"s{base}-{end}",
        base_offset=base,
        end_offset=end,
        max_timestamp_ms=0,
        size_bytes=100,
        leader_epochs=((0, base),),
        state=state,
        topic="t",
    )


def test_readers_see_finished_copies_only_in_offset_order_without_duplicates():
    records = [
        seg(0, 9),
        seg(10, 19, COPY_SEGMENT_STARTED),  # may lack objects
        seg(10, 19),
        seg(10, 19, sid="late"),  # a deposed leader's duplicate: adds nothing
        seg(15, 29),  # a new leader's straddling copy: adds 20-29
        seg(30, 39, DELETE_SEGMENT_FINISHED),
    ]
    visible = _visible(records)
    assert [(s.base_offset, s.end_offset, s.segment_id) for s in visible] == [
        (0, 9, "s0-9"),
        (10, 19, "s10-19"),
        (15, 29, "s15-29"),
    ]


def test_a_record_round_trips_and_bad_ones_are_refused():
    record = seg(5, 9)
    assert RemoteSegment.from_json(record.to_json()) == record
    assert record.key.segment_id == "s5-9" and record.key.topic == "t"
    with pytest.raises(SeglogError, match="malformed"):
        RemoteSegment.from_json(b"{}")
    with pytest.raises(SeglogError, match="unknown remote segment state"):
        RemoteSegment.from_json(record.to_json().replace(b"COPY_SEGMENT_FINISHED", b"GONE"))


def test_a_segments_leader_epochs_are_those_its_offsets_may_carry():
    entries = [EpochEntry(0, 0), EpochEntry(3, 40), EpochEntry(5, 70)]
    assert segment_epochs(entries, 0, 39) == ((0, 0),)
    assert segment_epochs(entries, 20, 59) == ((0, 20), (3, 40))
    assert segment_epochs(entries, 40, 99) == ((3, 40), (5, 70))
    assert segment_epochs(entries, 80, 99) == ((5, 80),)


def test_the_copied_checkpoint_is_kafkas_format_cut_after_the_segment(tmp_path):
    entries = [EpochEntry(0, 0), EpochEntry(3, 40), EpochEntry(5, 70)]
    assert epoch_checkpoint_text(entries, 59) == b"0\n2\n0 0\n3 40\n"
    assert epoch_checkpoint_text(entries, 99) == b"0\n3\n0 0\n3 40\n5 70\n"
    # What a node reads back when it rebuilds from the store (the leader epoch cache's reader).
    path = tmp_path / "leader-epoch.checkpoint"
    path.write_bytes(epoch_checkpoint_text(entries, 59))
    assert read_epoch_entries(path) == entries[:2]
