"""The remote index cache and lookups (remote_indexes.py): positions and timestamps found as
the local indexes find them, zero padding of an untrimmed copy ignored, and the cache held
to its byte bound, least recently used first out."""

from __future__ import annotations

import struct

from seglog.storage.remote_indexes import RemoteIndexCache, RemoteIndexes


def _offset_index(entries) -> bytes:
    return b"".join(struct.pack(">ii", rel, pos) for rel, pos in entries)


def _time_index(entries) -> bytes:
    return b"".join(struct.pack(">qi", ts, rel) for ts, rel in entries)


def test_positions_are_the_last_indexed_batch_at_or_before_the_offset():
    indexes = RemoteIndexes(
        100, _offset_index([(5, 4096), (12, 8200), (30, 12300)]), _time_index([])
    )
    assert indexes.position_at_or_before(100) == 0  # before the first entry: the start
    assert indexes.position_at_or_before(104) == 0
    assert indexes.position_at_or_before(105) == 4096
    assert indexes.position_at_or_before(111) == 4096
    assert indexes.position_at_or_before(112) == 8200
    assert indexes.position_at_or_before(10_000) == 12300


def test_untrimmed_zero_entries_are_padding():
    padded = _offset_index([(5, 4096), (12, 8200)]) + bytes(8 * 50)
    indexes = RemoteIndexes(0, padded, _time_index([(1000, 5)]) + bytes(12 * 10))
    assert indexes.position_at_or_before(10_000) == 8200
    assert indexes.offset_at_or_before_timestamp(5000) == 5


def test_timestamps_start_at_the_last_entry_below_the_target():
    indexes = RemoteIndexes(50, _offset_index([]), _time_index([(1000, 3), (2000, 9), (3000, 20)]))
    assert indexes.offset_at_or_before_timestamp(500) == 50  # none below: the base
    assert indexes.offset_at_or_before_timestamp(1000) == 50  # an entry AT it may hide earlier
    assert indexes.offset_at_or_before_timestamp(1500) == 53
    assert indexes.offset_at_or_before_timestamp(2500) == 59
    assert indexes.offset_at_or_before_timestamp(9999) == 70


def test_the_cache_keeps_its_byte_bound_evicting_the_least_recently_used():
    cache = RemoteIndexCache(total_size_bytes=100)
    loads: list[str] = []

    def loader(name: str, size: int):
        def load() -> RemoteIndexes:
            loads.append(name)
            return RemoteIndexes(0, bytes(size), b"")

        return load

    cache.get("a", loader("a", 40))
    cache.get("b", loader("b", 40))
    cache.get("a", loader("a", 40))  # a hit: "a" is now the most recently used
    cache.get("c", loader("c", 40))  # 120 > 100: "b" goes
    assert cache.size_bytes == 80
    cache.get("a", loader("a", 40))
    cache.get("b", loader("b", 40))
    assert loads == ["a", "b", "c", "b"]
    assert (cache.hits, cache.misses) == (2, 4)
    cache.get("huge", loader("huge", 1000))  # larger than the bound: answered, not kept
    assert cache.size_bytes <= 100
    cache.remove("b")
    assert cache.size_bytes <= 60
