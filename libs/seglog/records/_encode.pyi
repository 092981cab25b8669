# Types of the C module _encode.c.
from collections.abc import Iterable, Sequence
from typing import Any

class RecordsWriter:
    def __init__(self, max_records_bytes: int) -> None: ...
    @property
    def record_count(self) -> int: ...
    @property
    def records_bytes(self) -> int: ...
    @property
    def base_timestamp(self) -> int: ...
    @property
    def max_timestamp(self) -> int: ...
    @property
    def max_records_bytes(self) -> int: ...
    def append(
        self,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> int: ...
    def append_value(self, value: bytes, timestamp_ms: int) -> int: ...
    def append_many(
        self,
        values: Iterable[bytes | None],
        keys: Iterable[bytes | None] | None = None,
        timestamp_ms: int | None = None,
    ) -> int: ...
    def section(self) -> bytes: ...

def murmur2(data: bytes) -> int: ...
def partition_for_key(key: bytes, num_partitions: int) -> int: ...
def use_future_type(future_type: type[tuple[object, ...]]) -> None: ...
def send_value(
    sticky_entries: dict[str, tuple[object, ...]],
    topic: str,
    value: bytes,
    timestamp_ms: int | None,
    callback: object,
) -> Any: ...
def send_keyed(
    open_entries: dict[str, list[tuple[object, ...] | None]],
    topic: str,
    key: bytes,
    value: bytes | None,
    num_partitions: int,
    timestamp_ms: int | None,
    callback: object,
) -> Any: ...
