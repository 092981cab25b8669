"""A deleted share partition's next start must go on past the state epoch its tombstone was
written at: the partition's leader holds the state writer (one producer id per share
partition, its epoch the state epoch) to that epoch, and a restart at epoch 0 was refused as
fenced, so a group's partition never started again after `kafka-share-groups
--delete-offsets` (state_store.py)."""

from __future__ import annotations

import uuid

from seglog.records.builder import RecordBatchBuilder
from services.gateway.share.state_formats import (
    SNAPSHOT_TYPE,
    ShareState,
    StateKey,
    encode_key,
    encode_snapshot,
)
from services.gateway.share.state_store import _replay, state_producer_id

KEY = StateKey("g", uuid.UUID(int=7), 0)


def _batch(base_offset: int, epoch: int, value: bytes | None) -> bytes:
    builder = RecordBatchBuilder(producer_id=state_producer_id(KEY), producer_epoch=epoch)
    builder.append(encode_key(KEY, SNAPSHOT_TYPE), value, 1)
    batch = bytearray(builder.build())
    batch[0:8] = base_offset.to_bytes(8, "big")
    return bytes(batch)


def test_a_tombstone_read_back_leaves_no_state_and_its_epoch():
    snapshot = encode_snapshot(ShareState(0, 3, -1, 10, 1, 1, ()))
    log = _batch(0, 3, snapshot) + _batch(1, 4, None)
    contents: dict = {}
    deleted: dict = {}
    assert _replay(contents, deleted, log) == 2
    assert contents == {} and deleted == {KEY: 4}


def test_a_state_written_again_after_its_tombstone_is_read_back():
    again = encode_snapshot(ShareState(0, 5, -1, 0, 1, 1, ()))
    log = _batch(0, 4, None) + _batch(1, 5, again)
    contents: dict = {}
    deleted: dict = {}
    _replay(contents, deleted, log)
    assert contents[KEY].state_epoch == 5
