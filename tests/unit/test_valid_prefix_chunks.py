"""Recovery's walk reads a segment in chunks, reading again from a batch cut by a chunk's end
and reading a batch larger than a chunk alone (valid_prefix.py). Whatever the chunk size, the
walk must keep the same batches and report the same damage as a walk that sees the whole file
in one chunk."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog.storage import valid_prefix
from seglog.storage.file_records import FileRecords
from tests.batches import make_batch


def _log_bytes(sizes: list[int]) -> bytearray:
    """Batches one after another, offsets 0.., each of one record of `size` bytes."""
    out = bytearray()
    for offset, size in enumerate(sizes):
        batch = bytearray(make_batch([b"v" * size], timestamp_ms=1))
        batch[0:8] = offset.to_bytes(8, "big")
        out += batch
    return out


def _scan(path: Path, chunk_bytes: int, patch) -> valid_prefix.ValidPrefix:  # type: ignore[no-untyped-def]
    patch.setattr(valid_prefix, "SCAN_CHUNK_BYTES", chunk_bytes)
    records = FileRecords.open(path, create=False)
    try:
        return valid_prefix.scan_valid_prefix(records, 0)
    finally:
        records.close()


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    sizes=st.lists(st.integers(1, 3000), min_size=1, max_size=40),
    chunk_bytes=st.sampled_from([128, 500, 1024, 4096]),
    damage=st.one_of(st.none(), st.tuples(st.floats(0, 1), st.sampled_from(["crc", "cut"]))),
)
def test_any_chunk_size_keeps_what_one_chunk_keeps(monkeypatch, sizes, chunk_bytes, damage):
    data = _log_bytes(sizes)
    if damage is not None:
        where, kind = damage
        at = min(int(len(data) * where), len(data) - 1)
        if kind == "crc":
            data[at] ^= 0xFF
        else:
            del data[at:]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "00000000000000000000.log"
        path.write_bytes(bytes(data))
        with monkeypatch.context() as patch:
            whole = _scan(path, len(data) + 1, patch)
            chunked = _scan(path, chunk_bytes, patch)
    assert chunked.batches == whole.batches
    assert chunked.damage == whole.damage
    if damage is None:
        assert chunked.damage is None and len(chunked.batches) == len(sizes)


def test_a_batch_larger_than_a_chunk_gets_the_header_checks_too(tmp_path, monkeypatch):
    """Such a batch used to be checked by its CRC alone (it is read by itself), so one whose
    base offset went back, which the CRC does not cover, was kept."""
    data = _log_bytes([10, 5000])
    second = len(make_batch([b"v" * 10], timestamp_ms=1))
    data[second : second + 8] = (0).to_bytes(8, "big")  # offset 0 again: behind the first
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(bytes(data))
    found = _scan(path, 1024, monkeypatch)
    assert len(found.batches) == 1
    assert found.damage is not None and found.damage.position == second
