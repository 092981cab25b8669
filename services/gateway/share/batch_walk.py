"""Whole record batches in a fetch's bytes, by their 61-byte headers alone (the records are
never decoded here): what a ShareFetch acquires is decided from each batch's offsets."""

from __future__ import annotations

from collections.abc import Iterator

from seglog.records.batch import HEADER_BYTES, LOG_OVERHEAD, BatchHeader, read_header


def batch_headers(records: bytes | memoryview) -> Iterator[tuple[int, BatchHeader]]:
    """Each whole batch's position and header, in order; a torn last batch (a fetch ends at
    its byte budget) is left out, as clients leave it."""
    pos = 0
    size = len(records)
    while size - pos >= HEADER_BYTES:
        header = read_header(records, pos)
        if header.batch_length < HEADER_BYTES - LOG_OVERHEAD:
            return
        end = pos + LOG_OVERHEAD + header.batch_length
        if end > size:
            return
        yield pos, header
        pos = end
