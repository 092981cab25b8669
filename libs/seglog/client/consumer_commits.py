"""A consumer's offset commits (Kafka's commitSync, commitAsync, committed and the
auto-commit from `poll`), through its group membership; a part of Consumer, in its own
module to keep each one job."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..errors import SeglogError
from .config import ConsumerConfig
from .fetcher import Fetcher
from .membership import GroupMembership
from .structs import OffsetAndMetadata, TopicPartition

CommitCallback = Callable[[Mapping[TopicPartition, OffsetAndMetadata], BaseException | None], Any]


class OffsetCommits:
    """Mixed into Consumer, whose state it reads."""

    config: ConsumerConfig
    _group: GroupMembership | None
    _fetcher: Fetcher
    _assigned: set[TopicPartition]
    _subscription: tuple[str, ...]
    _commit_executor: concurrent.futures.ThreadPoolExecutor | None
    _next_auto_commit: float

    # -- committing --------------------------------------------------------------------------

    def _group_or_raise(self) -> GroupMembership:
        if self._group is None:
            raise SeglogError("committing offsets needs a group_id")
        return self._group

    def _current_offsets(self) -> dict[TopicPartition, OffsetAndMetadata]:
        # As Kafka's consumer, a commit carries the leader epoch of the last record read.
        return {
            tp: OffsetAndMetadata(position, "", epoch)
            for tp, (position, epoch) in self._fetcher.positions_with_epochs().items()
            if tp in self._assigned
        }

    def commit(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None
    ) -> None:
        """Commit `offsets` (default: the current positions) and wait for the answer.
        Raises CommitFailedError when the group rebalanced in between."""
        group = self._group_or_raise()
        chosen = self._current_offsets() if offsets is None else _normalize(offsets)
        if chosen:
            group.commit(chosen, as_member=bool(self._subscription))

    def commit_async(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
        callback: CommitCallback | None = None,
    ) -> concurrent.futures.Future[None]:
        """Commit on a background thread (one at a time, in order); `callback(offsets,
        exception)` runs when it completes."""
        group = self._group_or_raise()
        chosen = self._current_offsets() if offsets is None else _normalize(offsets)
        as_member = bool(self._subscription)
        if self._commit_executor is None:
            self._commit_executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix=f"{self.config.client_id}-commit"
            )

        def run() -> None:
            error: BaseException | None = None
            try:
                if chosen:
                    group.commit(chosen, as_member=as_member)
            except BaseException as exc:  # handed to the callback and future
                error = exc
            if callback is not None:
                callback(chosen, error)
            if error is not None:
                raise error

        return self._commit_executor.submit(run)

    def committed(
        self, partitions: TopicPartition | Iterable[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        group = self._group_or_raise()
        if isinstance(partitions, TopicPartition):
            partitions = [partitions]
        return group.committed([TopicPartition(*tp) for tp in partitions])

    def _maybe_auto_commit(self) -> None:
        if not self.config.auto_commit or not self._assigned:
            return
        now = time.monotonic()
        if now < self._next_auto_commit:
            return
        self._next_auto_commit = now + self.config.auto_commit_interval_ms / 1000
        self.commit_async()


def _normalize(
    offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
) -> dict[TopicPartition, OffsetAndMetadata]:
    return {
        TopicPartition(*tp): meta
        if isinstance(meta, OffsetAndMetadata)
        else OffsetAndMetadata(meta)
        for tp, meta in offsets.items()
    }
