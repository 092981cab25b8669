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
def scan_append(
    view: bytes | memoryview,
    max_message_bytes: int,
    max_codec: int,
    check_timestamps: bool,
    earliest: int,
    latest: int,
    require_keys: bool,
) -> tuple[bytes, list[int], int, int, int, int]: ...
def scan_follower(
    view: bytes | memoryview, next_offset: int, gaps_allowed: bool, max_codec: int
) -> tuple[bytes, int, int, int]: ...
def index_entries(
    table: bytes,
    first_offset: int,
    segment_base: int,
    position: int,
    since_last_entry: int,
    interval: int,
    max_timestamp: int,
    offset_of_max_timestamp: int,
    last_time_entry_ms: int,
    room: int,
) -> tuple[bytes, bytes, int, int, int]: ...
def write_batches(
    fd: int,
    file_position: int,
    view: bytes | memoryview,
    table: bytes,
    first_offset: int,
    leader_epoch: int | None,
) -> int: ...
def crc32c(
    data: bytes | bytearray | memoryview, force_software: bool = False, fold: bool = True
) -> int: ...
def decode_chunk(
    chunk: bytes | memoryview,
    record_class: type[Any],
    topic: str,
    partition: int,
    position: int,
    check_crcs: bool,
    create_time: int,
    log_append_time: int,
    out: list[Any],
    starts: list[int],
    epochs: list[int],
    skip: set[int] | frozenset[int] | None = None,
) -> tuple[int, int]: ...
