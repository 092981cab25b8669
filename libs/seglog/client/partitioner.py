"""Kafka's default partitioner for keyed records: `(murmur2(key) & 0x7fffffff) % partitions`,
with murmur2 exactly as Kafka's `Utils.murmur2` (seed 0x9747b28c, 32-bit signed result), so a
key lands on the same partition number it would in Kafka.

The producer's hot path takes the C version (records/_encode.c, ~40 ns a key); the Python
one here is its reference (the tests compare them) and the fallback where it is not built.
"""

from __future__ import annotations

import struct

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF
_WORD = struct.Struct("<I")


def py_murmur2(data: bytes) -> int:
    """Kafka's murmur2 of `data`, as a signed 32-bit int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length & ~3
    for (k,) in _WORD.iter_unpack(memoryview(data)[:whole]):
        k = (k * _M) & _MASK
        k ^= k >> 24
        h = ((h * _M) & _MASK) ^ ((k * _M) & _MASK)
    tail = length & 3
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def py_partition_for_key(key: bytes, num_partitions: int) -> int:
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
    return (py_murmur2(key) & 0x7FFFFFFF) % num_partitions


class PyKeyPartitioner:
    """`partition_for_key`, remembering the hashes of the keys it saw last: keys repeat
    (customer, device, account ids) and murmur2 in Python costs ~1 us for a 12-byte key,
    more than the rest of `send`. At most `max_keys` are kept; past that the memory starts
    over."""

    def __init__(self, max_keys: int = 65_536) -> None:
        self._hashes: dict[bytes, int] = {}
        self._max_keys = max_keys

    def partition(self, key: bytes, num_partitions: int) -> int:
        positive_hash = self._hashes.get(key)
        if positive_hash is None:
            if len(self._hashes) >= self._max_keys:
                self._hashes.clear()
            positive_hash = self._hashes[key] = py_murmur2(key) & 0x7FFFFFFF
        return positive_hash % num_partitions


class CKeyPartitioner:
    """`partition_for_key` in C: faster than a memory of hashes, so none is kept."""

    __slots__ = ("partition",)

    def __init__(self, max_keys: int = 65_536) -> None:
        del max_keys  # nothing to remember
        self.partition = c_partition_for_key


KeyPartitioner: type[PyKeyPartitioner] | type[CKeyPartitioner]
try:
    from ..records._encode import murmur2 as c_murmur2
    from ..records._encode import partition_for_key as c_partition_for_key
except ImportError:  # the C module is not built
    murmur2, partition_for_key = py_murmur2, py_partition_for_key
    KeyPartitioner = PyKeyPartitioner
else:
    murmur2, partition_for_key = c_murmur2, c_partition_for_key
    KeyPartitioner = CKeyPartitioner
