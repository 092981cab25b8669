# Types of the C module _scan.c.
def scan_records(
    section: bytes | memoryview, record_count: int, require_keys: bool
) -> tuple[int, int]: ...
