"""acks=all (Kafka's DelayedProduce): an append answered only once every in-sync replica has
copied it, which the leader learns when its high watermark passes the append's last offset.
The wait is woken by its partitions' waiters (fetch_waits.py), never by polling, and ends
early for a partition whose leadership moved or whose node was fenced."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from seglog.errors import (
    NotEnoughReplicasAfterAppendError,
    NotLeaderError,
    RequestTimedOutError,
    SeglogError,
)
from seglog.storage.log import LogAppendInfo

from .fetch_waits import PartitionWaiters, Waiter
from .partition import Partition

NO_EPOCH = -1


@dataclass(frozen=True)
class AppendResult:
    partition: int
    info: LogAppendInfo | None
    error: SeglogError | None = None
    leader_epoch: int = NO_EPOCH  # the term the append was made in


def wait_for_replication(
    partition_if_hosted: Callable[[str, int], Partition | None],
    waiters: PartitionWaiters,
    is_stopping: Callable[[], bool],
    topic: str,
    results: list[AppendResult],
    timeout_ms: int,
) -> list[AppendResult]:
    """acks=all (Kafka's DelayedProduce): wait until the high watermark passes each
    partition's batches; then NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below
    min.insync.replicas meanwhile, REQUEST_TIMED_OUT if the time ran out, and
    NOT_LEADER_OR_FOLLOWER if the leadership moved before that (as Kafka's
    checkEnoughReplicasReachOffset: a deposed leader's log may be truncated and refilled
    by the new leader, so its high watermark no longer says anything about these
    batches; the producer retries at the new leader, which dedupes what it has)."""
    deadline = time.monotonic() + timeout_ms / 1000
    waiting = {r.partition: r for r in results if r.info is not None}
    deposed: set[int] = set()

    def replicated(result: AppendResult) -> bool:
        assert result.info is not None
        held = partition_if_hosted(topic, result.partition)
        if (
            held is None
            or not held.is_leader
            or held.leader_epoch != result.leader_epoch
            or held.fenced is not None
        ):
            deposed.add(result.partition)
            return True
        return held.log.high_watermark > result.info.last_offset

    waiter = Waiter(wakes_on_records=False)  # the high watermark passing is what it waits for
    watched = [(topic, number) for number in waiting]
    waiters.register(waiter, watched)
    try:
        while not is_stopping():
            waiter.event.clear()
            waiting = {p: r for p, r in waiting.items() if not replicated(r)}
            remaining = deadline - time.monotonic()
            if not waiting or remaining <= 0:
                break
            waiter.event.wait(remaining)
    finally:
        waiters.unregister(waiter, watched)
    out = []
    for result in results:
        if result.info is None:
            out.append(result)
        elif result.partition in deposed:
            out.append(
                AppendResult(
                    result.partition,
                    None,
                    NotLeaderError(
                        f"{topic}-{result.partition}: leadership moved, or this node was "
                        f"fenced (epoch {result.leader_epoch}), before the in-sync "
                        "replicas had offsets "
                        f"{result.info.first_offset}-{result.info.last_offset}; retry"
                    ),
                )
            )
        elif result.partition in waiting:
            out.append(
                AppendResult(
                    result.partition,
                    None,
                    RequestTimedOutError(
                        f"{topic}-{result.partition}: the in-sync replicas did not all "
                        f"copy offsets {result.info.first_offset}-{result.info.last_offset} "
                        f"within {timeout_ms} ms"
                    ),
                )
            )
        else:
            held = partition_if_hosted(topic, result.partition)
            if held is not None and not held.enough_replicas_after_append():
                out.append(
                    AppendResult(
                        result.partition,
                        None,
                        NotEnoughReplicasAfterAppendError(
                            f"{topic}-{result.partition}: written, but the ISR "
                            f"{list(held.isr)} fell below min.insync.replicas"
                        ),
                    )
                )
            else:
                out.append(result)
    return out
