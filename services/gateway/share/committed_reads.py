"""share.isolation.level=read_committed (a group config, cluster/group_configs.py): a share
group then reads below the last stable offset (the fetch's READ_COMMITTED), and the batches of
aborted transactions are never delivered: they are archived as control batches are, as
Kafka's share partition archives them.

Which batches are aborted is told by the fetch's aborted transactions, (producer id, first
offset) pairs, as a read_committed consumer tells it: walking the batches in offset order, a
producer's transaction is aborted from its first offset on until that producer's next control
batch (its abort marker). Batch headers alone are read, never the records.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from seglog.records.batch import BatchHeader

from .share_partition import FetchedBatch


def committed_batches(
    headers: Iterable[BatchHeader], aborted: Sequence[tuple[int, int]]
) -> list[FetchedBatch]:
    """Each batch's offsets, an aborted transaction's batches marked as control (skipped)."""
    pending = sorted(aborted, key=lambda a: a[1])  # (producer id, first offset)
    next_abort = 0
    open_aborts: set[int] = set()
    out = []
    for header in headers:
        while next_abort < len(pending) and pending[next_abort][1] <= header.base_offset:
            open_aborts.add(pending[next_abort][0])
            next_abort += 1
        aborted_batch = header.is_transactional and header.producer_id in open_aborts
        if header.is_control:
            open_aborts.discard(header.producer_id)
        out.append(
            FetchedBatch(header.base_offset, header.last_offset, header.is_control or aborted_batch)
        )
    return out
