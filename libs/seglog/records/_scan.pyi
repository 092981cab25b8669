# Types of the C module _scan.c.
from typing import Any

def scan_records(
    section: bytes | bytearray | memoryview, record_count: int, require_keys: bool
) -> tuple[int, int]: ...
def scan_input(
    view: bytes | memoryview,
    header_class: type[tuple[int, ...]],
    max_message_bytes: int,
    max_codec: int,
    check_timestamps: bool,
    earliest: int,
    latest: int,
    require_keys: bool,
) -> tuple[list[tuple[int, Any]], list[int], int]: ...
def decode_section(
    section: bytes | memoryview,
    record_class: type[Any],
    base_offset: int,
    base_timestamp: int,
    record_count: int,
    last_offset_delta: int,
    topic: str,
    partition: int,
    timestamp_type: int,
    stamp: int,
) -> list[Any]: ...
def decode_columns(
    section: bytes | memoryview,
    base_offset: int,
    base_timestamp: int,
    record_count: int,
    last_offset_delta: int,
    stamp: int,
    min_offset: int,
    end_offset: int,
    columns: list[bytearray],
    used: list[int],
) -> int: ...
