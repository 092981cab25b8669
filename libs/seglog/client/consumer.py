"""The consumer: Kafka's, in shape and settings.

    consumer = Consumer(bootstrap="127.0.0.1:7070", group_id="billing",
                        auto_offset_reset="earliest")
    consumer.subscribe(["orders"])       # or pattern="orders-.*", listener=...
    for record in consumer:
        handle(record.key, record.value)

`poll(timeout_ms=1000)` answers as kafka-python's does, a dict TopicPartition -> records;
`poll_records(timeout_ms=1000)` answers the same records as one list, in fetch order.

Records are `seglog.records.Record` tuples: topic, partition, offset, timestamp_ms,
timestamp_type, key, value, headers. Fetching runs ahead on a background thread
(fetcher.py); decoding (and CRC checks, with `check_crcs`) happen in `poll`.

Starting positions: the group's committed offset when there is one, else `auto_offset_reset`
(earliest, latest, or none: NoOffsetForPartitionError). With `enable_auto_commit`, positions
are committed every `auto_commit_interval_ms` from `poll`, before a rebalance hands the
partitions away, and on `close` — at-least-once, as in Kafka.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import logging
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ..errors import OffsetOutOfRangeError, SeglogError
from ..records import Record
from . import offset_queries
from .config import ConsumerConfig, client_security, from_kwargs, pop_bootstrap
from .consumer_commits import CommitCallback as CommitCallback
from .consumer_commits import OffsetCommits
from .consumer_membership import ConsumerProtocolMembership
from .coordinators import GroupCoordinators
from .deserializing import deserialized
from .fetcher import Fetcher
from .gateway import EARLIEST, LATEST, GatewayClient, default_bootstrap, partition_offsets
from .membership import CommitFailedError, GroupMembership
from .metadata import Metadata
from .position_resets import NoOffsetForPartitionError as NoOffsetForPartitionError
from .position_resets import PositionResets
from .structs import ConsumerGroupMetadata, OffsetAndMetadata, OffsetAndTimestamp, TopicPartition
from .subscriptions import (
    MissingTopics,
    TopicPattern,
    check_listener,
    notify,
    requested_topics,
)

logger = logging.getLogger(__name__)


class Consumer(OffsetCommits):
    def __init__(self, bootstrap: str | None = None, **config: Any) -> None:
        bootstrap = pop_bootstrap(bootstrap, config)
        self.config = from_kwargs(ConsumerConfig, config)
        self.bootstrap = bootstrap or default_bootstrap()
        self._client = GatewayClient(
            self.bootstrap,
            timeout_s=self.config.request_timeout_ms / 1000,
            security=client_security(self.config),
            client_id=self.config.client_id,
        )
        self._metadata = Metadata(self._client, max_age_ms=self.config.metadata_max_age_ms)
        self._fetcher = Fetcher(self.config, self._client._stub, self._client.security)
        self._resets = PositionResets(
            self._fetcher,
            self._client,
            self.config.auto_offset_reset,
            self.config.retry_backoff_ms / 1000,
        )
        self._group: GroupMembership | None = None
        if self.config.group_id is not None:
            self._group = _membership(self.config, self._client.group_coordinators)
        self._subscription: tuple[str, ...] = ()
        self._pattern: TopicPattern | None = None
        self._listener: Any = None
        self._missing_topics = MissingTopics()
        self._assigned: set[TopicPartition] = set()
        self._join_pending = False  # partitions revoked for a join not answered yet
        self._manual = False
        self._next_auto_commit = time.monotonic() + self.config.auto_commit_interval_ms / 1000
        self._commit_executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._closed = False
        self._lock = threading.RLock()

    # -- what to read ------------------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Read exactly these partitions; no group membership (commits still go to the group
        when `group_id` is set, as Kafka allows)."""
        if self._subscription:
            raise SeglogError("assign() after subscribe(): call unsubscribe() first")
        wanted = {TopicPartition(*tp) for tp in partitions}
        for tp in wanted:
            info = self._metadata.topic(tp.topic)
            if not 0 <= tp.partition < info.num_partitions:
                raise SeglogError(
                    f"{tp.topic} has partitions 0..{info.num_partitions - 1}, not {tp.partition}"
                )
        self._manual = True
        self._set_assignment(wanted)

    def subscribe(
        self,
        topics: Iterable[str] | str = (),
        pattern: str | re.Pattern[str] | None = None,
        listener: Any = None,
    ) -> None:
        """Join the group and read whatever share of these topics (or of the topics matching
        `pattern`, see subscriptions.py) it assigns; `listener`, a ConsumerRebalanceListener,
        hears of each rebalance. kafka-python's signature."""
        if self._group is None:
            raise SeglogError("subscribe() needs a group_id; use assign() without one")
        if self._manual:
            raise SeglogError("subscribe() after assign(): call unsubscribe() first")
        names = requested_topics(topics)
        if names and pattern is not None:
            raise SeglogError("subscribe() takes topics or a pattern, not both")
        if not names and pattern is None:
            raise SeglogError("subscribe() needs at least one topic or a pattern")
        if listener is not None:
            check_listener(listener)
        matcher = None
        if pattern is not None:
            matcher = TopicPattern(pattern, self.config.metadata_max_age_ms)
        self._listener = listener
        self._pattern = matcher
        if matcher is None and names != self._subscription:
            self._subscription = names
            self._group.request_rejoin()

    def unsubscribe(self) -> None:
        self._leave_group()
        self._subscription = ()
        self._pattern = None
        self._listener = None
        self._manual = False
        self._set_assignment(set())

    def _leave_group(self) -> None:
        if self._group is not None and self._subscription:
            self._maybe_commit_before_revoke()
            notify(self._listener, "on_partitions_revoked", self._assigned)
            self._group.leave()
            self._group = _membership(self.config, self._client.group_coordinators)

    def partitions_for(self, topic: str) -> list[int]:
        return list(range(self._metadata.topic(topic).num_partitions))

    def assignment(self) -> set[TopicPartition]:
        return set(self._assigned)

    def subscription(self) -> set[str]:
        """The subscribed topics; with a pattern, the topics it matched at the last refresh."""
        return set(self._subscription)

    def paused(self) -> set[TopicPartition]:
        """The partitions `pause` stopped (kafka-python's `paused()`)."""
        return self._fetcher.paused()

    def highwater(self, partition: TopicPartition | tuple[str, int]) -> int | None:
        """The partition's high watermark as the last fetch answer gave it, or None before
        any answer (kafka-python's `highwater`: no request is made)."""
        tp = TopicPartition(*partition)
        if tp not in self._assigned:
            raise SeglogError(f"{tp.topic}-{tp.partition} is not assigned to this consumer")
        return self._fetcher.high_watermark(tp)

    @property
    def generation(self) -> int:
        """The group generation of the current assignment (-1 without a group)."""
        return self._group.generation if self._group is not None else -1

    def _set_assignment(self, partitions: set[TopicPartition]) -> None:
        self._assigned = set(partitions)
        self._fetcher.assign(self._assigned)

    # -- reading -----------------------------------------------------------------------------

    def poll(
        self,
        positional_timeout_ms: float | None = None,
        /,
        max_records: int | None = None,
        *,
        timeout_ms: float | None = None,
    ) -> dict[TopicPartition, list[Record]]:
        """kafka-python's `poll(timeout_ms=0, max_records=None)`: the records fetched since
        the last poll, at most `max_records` (default `max_poll_records`), by partition, each
        list in offset order; waits up to `timeout_ms` for some to arrive.

        The timeout is in milliseconds, as kafka-python's. A positional float (`poll(1.0)`)
        is refused: it is confluent-kafka's timeout in seconds, which waited 1 ms here; a
        ported confluent program also expects one message back, not a dict, so it must be
        rewritten anyway (`poll(timeout_ms=1000)`, or `poll_records`)."""
        if positional_timeout_ms is not None:
            if timeout_ms is not None:
                raise TypeError("poll() got the timeout twice (positionally and as timeout_ms)")
            if isinstance(positional_timeout_ms, float):
                raise TypeError(
                    f"poll({positional_timeout_ms!r}): the timeout is in milliseconds "
                    "(kafka-python's poll), and a positional float looks like "
                    "confluent-kafka's seconds; write poll(timeout_ms="
                    f"{int(positional_timeout_ms * 1000)}) if seconds were meant"
                )
            timeout_ms = positional_timeout_ms
        records = self.poll_records(timeout_ms=timeout_ms or 0, max_records=max_records)
        # Records come in runs of one partition (a fetch answer each): one group per run.
        by_partition: dict[TopicPartition, list[Record]] = {}
        for (topic, partition), run in itertools.groupby(records, _record_partition):
            tp = TopicPartition(topic, partition)
            found = by_partition.get(tp)
            if found is None:
                by_partition[tp] = list(run)
            else:
                found.extend(run)
        return by_partition

    def poll_records(
        self, *, timeout_ms: float = 0, max_records: int | None = None
    ) -> list[Record]:
        """seglog's own `poll`: the same records as one list in fetch order, at most
        `max_records` (default `max_poll_records`); waits up to `timeout_ms` for some."""
        if self._closed:
            raise SeglogError("poll after close")
        if timeout_ms < 0:
            raise SeglogError(f"poll timeout_ms must not be negative, got {timeout_ms}")
        limit = max_records or self.config.max_poll_records
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            if self._group is not None:
                self._group.polled()
            self._ensure_assignment(deadline)
            self._update_positions()
            self._raise_fetch_errors()
            records = self._fetcher.collect(limit)
            self._maybe_auto_commit()
            if records:
                if (
                    self.config.key_deserializer is not None
                    or self.config.value_deserializer is not None
                ):
                    return deserialized(records, self.config)
                return records
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return records
            # Wake at least every heartbeat interval to react to a rebalance.
            self._fetcher.wait_for_data(min(remaining, self.config.heartbeat_interval_ms / 1000))

    def __iter__(self) -> Iterator[Record]:
        """Records as they come; with `consumer_timeout_ms` the iteration ends that long after
        the last record (kafka-python's behaviour), else it follows the log until close."""
        idle_limit_s = self.config.consumer_timeout_ms / 1000
        last_record = time.monotonic()
        while not self._closed:
            wait_ms = self.config.fetch_max_wait_ms
            if idle_limit_s >= 0:
                left_ms = int((idle_limit_s - (time.monotonic() - last_record)) * 1000)
                wait_ms = max(0, min(wait_ms, left_ms))
            records = self.poll_records(timeout_ms=wait_ms)
            if records:
                last_record = time.monotonic()
                yield from records
            elif idle_limit_s >= 0 and time.monotonic() - last_record >= idle_limit_s:
                return

    def _ensure_assignment(self, deadline_s: float | None = None) -> None:
        if self._pattern is not None and self._pattern.due():
            self._match_pattern(self._pattern)
        group = self._group
        if group is None or not self._subscription or not group.rejoin_needed:
            return
        if not self._join_pending:
            self._maybe_commit_before_revoke()
            revoked = set(self._assigned)
            self._set_assignment(set())  # nothing is read while the group decides
            notify(self._listener, "on_partitions_revoked", revoked)
            self._join_pending = True
        assigned = group.join(self._subscription, deadline_s)
        if assigned is None:
            return  # the coordinator was not reached within the poll: the next one tries again
        self._join_pending = False
        self._set_assignment(assigned)
        notify(self._listener, "on_partitions_assigned", self._assigned)
        self._missing_topics.check(self._client.describe_topics, self._subscription)

    def _match_pattern(self, pattern: TopicPattern) -> None:
        matched = pattern.match(lambda: (t.name for t in self._client.list_topics()))
        if matched is None or matched == self._subscription:
            return
        logger.info("pattern %r now matches %s", pattern.regex.pattern, list(matched))
        if not matched:
            self._leave_group()  # nothing left to read: give the partitions back
            self._subscription = ()
            self._set_assignment(set())
            return
        self._subscription = matched
        assert self._group is not None
        self._group.request_rejoin()

    def _maybe_commit_before_revoke(self) -> None:
        if self.config.auto_commit and self._assigned:
            try:
                self.commit()
            except CommitFailedError:
                pass  # the group moved on already; the next owner reads from the last commit
            except SeglogError as exc:
                # As Kafka's auto-commit on rebalance: a failure (a partition whose topic was
                # just deleted, the coordinator briefly away) is logged, not raised from poll.
                logger.warning("auto-commit before the rebalance failed: %s", exc)

    def _update_positions(self) -> None:
        missing = self._fetcher.missing_positions()
        if not missing:
            return
        committed: dict[TopicPartition, OffsetAndMetadata | None] = {}
        unstable: set[TopicPartition] = set()
        if self._group is not None:
            # Partitions whose offsets a transaction has pending get no position yet (a
            # later poll asks again), as Kafka's read_committed consumer.
            committed, unstable = self._group.committed_for_positions(list(missing))
        reset: list[TopicPartition] = []
        for tp in missing:
            if tp in unstable:
                continue
            entry = committed.get(tp)
            if entry is not None:
                self._fetcher.seek(tp, entry.offset)
            else:
                reset.append(tp)
        if reset:
            self._resets.reset(reset)

    def _raise_fetch_errors(self) -> None:
        for tp, error in self._fetcher.errors():
            if isinstance(error, OffsetOutOfRangeError) and self._resets.out_of_range(tp, error):
                continue
            raise error

    # -- positions ---------------------------------------------------------------------------

    def seek(self, partition: TopicPartition | tuple[str, int], offset: int) -> None:
        if offset < 0:
            raise SeglogError(f"seek to a negative offset ({offset})")
        self._fetcher.seek(TopicPartition(*partition), offset)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        targets = [TopicPartition(*tp) for tp in partitions] or sorted(self._assigned)
        for tp, (offset, _) in self._list_offsets(dict.fromkeys(targets, EARLIEST)).items():
            self._fetcher.seek(tp, offset)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        targets = [TopicPartition(*tp) for tp in partitions] or sorted(self._assigned)
        for tp, (offset, _) in self._list_offsets(dict.fromkeys(targets, LATEST)).items():
            self._fetcher.seek(tp, offset)

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The consumer's group, generation and member id, for a transactional producer's
        send_offsets_to_transaction (Kafka's groupMetadata(), KIP-447)."""
        if self.config.group_id is None:
            raise SeglogError("group_metadata() needs a group_id")
        group = self._group
        if group is None or not group.member_id:
            return ConsumerGroupMetadata(self.config.group_id)
        return ConsumerGroupMetadata(group.group_id, group.generation, group.member_id)

    def position(self, partition: TopicPartition | tuple[str, int]) -> int:
        """The offset of the next record `poll` will return for the partition."""
        tp = TopicPartition(*partition)
        if tp not in self._assigned:
            raise SeglogError(f"{tp.topic}-{tp.partition} is not assigned to this consumer")
        self._update_positions()
        position = self._fetcher.positions().get(tp)
        assert position is not None
        return position

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        return offset_queries.offsets_for_times(self._client, timestamps)

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return offset_queries.offsets_at(self._client, partitions, latest=False)

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return offset_queries.offsets_at(self._client, partitions, latest=True)

    def _list_offsets(
        self, targets: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp]:
        return partition_offsets(self._client, targets)

    # -- closing -----------------------------------------------------------------------------

    def pause(self, *partitions: TopicPartition) -> None:
        self._fetcher.set_paused({TopicPartition(*tp) for tp in partitions}, True)

    def resume(self, *partitions: TopicPartition) -> None:
        self._fetcher.set_paused({TopicPartition(*tp) for tp in partitions}, False)

    def close(self, autocommit: bool = True) -> None:
        """Commit (with auto commit on), leave the group at once, stop fetching."""
        if self._closed:
            return
        self._closed = True
        try:
            if autocommit and self.config.auto_commit and self._assigned:
                try:
                    self.commit()
                except SeglogError:
                    pass  # the group moved on; the next owner reads from the last commit
            if self._subscription:
                notify(self._listener, "on_partitions_revoked", self._assigned)
            if self._commit_executor is not None:
                self._commit_executor.shutdown(wait=True)
            if self._group is not None:
                self._group.leave()
                self._group.close()
        finally:
            self._fetcher.close()
            self._client.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _membership(config: ConsumerConfig, coordinators: GroupCoordinators) -> GroupMembership:
    """The group side of the consumer for its group_protocol."""
    if config.group_protocol == "consumer":
        return ConsumerProtocolMembership(config, coordinators)
    return GroupMembership(config, coordinators)


def _record_partition(record: Record) -> tuple[str, int]:
    return record.topic, record.partition
