"""The source's planning, on Spark's driver side: which partitions a query reads, the offsets
its options resolve to, and the tasks a range is cut into.

Tasks are cut by bytes, not offsets: each partition's range is split where its leader's
sparse offset index says (the SplitPoints call), so tasks carry near-equal bytes however
skewed the record sizes. A partition's range is one task unless it holds more than
`maxBytesPerTask`; `minPartitions` (Spark's option) asks for at least that many tasks in all,
cutting the largest ranges first by giving every task an equal share of the bytes.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..client.gateway import EARLIEST, LATEST, GatewayClient, partition_offsets, split_points
from ..client.structs import TopicPartition
from ..errors import SeglogError, UnknownTopicOrPartitionError
from ..rpc.status import error_from_code
from .options import OffsetSpec, OptionError, ReadOptions

logger = logging.getLogger(__name__)


class DataLossError(SeglogError):
    """Records a query should read are gone (retention removed them, a partition vanished)
    and failOnDataLoss is true, as Spark's Kafka source reports it."""


@dataclass(frozen=True)
class ReadTask:
    """One Spark task's read: the offsets [start, end) of one partition, about `size_bytes`."""

    topic: str
    partition: int
    start: int
    end: int
    size_bytes: int


def report_data_loss(message: str, fail_on_data_loss: bool) -> None:
    if fail_on_data_loss:
        raise DataLossError(
            f"{message}. Some data may have been lost because it is no longer available "
            "(removed by retention, or its topic deleted). If you want the query to go on "
            "anyway, set the option failOnDataLoss to false."
        )
    logger.warning("%s. Some data may have been lost; skipping it (failOnDataLoss=false).", message)


def partitions_of(client: GatewayClient, options: ReadOptions) -> list[TopicPartition]:
    """The partitions the options name, now: subscribed topics that do not exist (yet) add
    none, as with Kafka's subscribe; an assigned partition must exist."""
    if options.assign:
        counts = _partition_counts(client, {t for t, _ in options.assign})
        for topic, partition in options.assign:
            if partition >= counts.get(topic, 0):
                raise UnknownTopicOrPartitionError(
                    f"option assign names {topic}-{partition}, which does not exist"
                )
        return [TopicPartition(t, p) for t, p in options.assign]
    if options.subscribe_pattern is not None:
        pattern = re.compile(options.subscribe_pattern)
        topics = {t.name for t in client.list_topics() if pattern.fullmatch(t.name)}
    else:
        topics = set(options.subscribe)
    counts = _partition_counts(client, topics)
    return [TopicPartition(t, p) for t in sorted(counts) for p in range(counts[t])]


def _partition_counts(client: GatewayClient, topics: Iterable[str]) -> dict[str, int]:
    wanted = sorted(topics)
    if not wanted:
        return {}
    out = {}
    for described in client.describe_topics(wanted):
        if described.error:
            error = error_from_code(described.error, described.error_message)
            if isinstance(error, UnknownTopicOrPartitionError):
                continue
            raise error
        out[described.name] = len(described.partitions)
    return out


def list_offsets(
    client: GatewayClient, specs: Mapping[TopicPartition, int]
) -> dict[TopicPartition, int]:
    """ListOffsets for many partitions (EARLIEST, LATEST or a timestamp each): offset, or -1
    when no record is that late."""
    return {tp: found.offset for tp, found in partition_offsets(client, specs).items()}


def resolve_offsets(
    client: GatewayClient,
    partitions: list[TopicPartition],
    spec: OffsetSpec,
    option: str,
    *,
    timestamp: int | None = None,
    by_timestamp: Mapping[tuple[str, int], int] | None = None,
    strategy: str = "error",
) -> dict[TopicPartition, int]:
    """Offsets for `partitions` from an option: a timestamp for all (wins), per-partition
    timestamps, or `spec` ("earliest", "latest", or per-partition offsets with -2 / -1),
    which must then name every partition, as Spark's Kafka source requires."""
    if not partitions:
        return {}
    if timestamp is not None or by_timestamp is not None:
        if timestamp is not None:
            times = {tp: timestamp for tp in partitions}
        else:
            assert by_timestamp is not None
            _require_all(partitions, by_timestamp, option)
            times = {tp: by_timestamp[(tp.topic, tp.partition)] for tp in partitions}
        found = list_offsets(client, times)
        missing = [tp for tp, offset in found.items() if offset < 0]
        if missing and strategy == "error":
            raise OptionError(
                f"option {option}: no record at or after the timestamp in "
                f"{', '.join(f'{tp.topic}-{tp.partition}' for tp in missing)} (set "
                "startingOffsetsByTimestampStrategy to latest to start at the end instead)"
            )
        if missing:
            found.update(list_offsets(client, {tp: LATEST for tp in missing}))
        return found
    if isinstance(spec, str):
        return list_offsets(
            client, {tp: EARLIEST if spec == "earliest" else LATEST for tp in partitions}
        )
    _require_all(partitions, spec, option)
    given = {tp: spec[(tp.topic, tp.partition)] for tp in partitions}
    special = {tp: offset for tp, offset in given.items() if offset < 0}
    given.update(list_offsets(client, special))
    return given


def _require_all(
    partitions: list[TopicPartition], given: Mapping[tuple[str, int], int], option: str
) -> None:
    missing = [tp for tp in partitions if (tp.topic, tp.partition) not in given]
    if missing:
        raise OptionError(
            f"option {option} must give every partition read; it lacks "
            f"{', '.join(f'{tp.topic}-{tp.partition}' for tp in missing)}"
        )


def check_available(
    client: GatewayClient,
    starts: Mapping[TopicPartition, int],
    fail_on_data_loss: bool,
) -> dict[TopicPartition, int]:
    """Starting offsets below a partition's log start are data loss (reported, or moved up to
    the log start with failOnDataLoss=false)."""
    if not starts:
        return {}
    log_starts = list_offsets(client, {tp: EARLIEST for tp in starts})
    out = dict(starts)
    for tp, start in starts.items():
        if start < log_starts[tp]:
            report_data_loss(
                f"{tp.topic}-{tp.partition}: offsets [{start}, {log_starts[tp]}) were to be read "
                f"but the log now starts at {log_starts[tp]}",
                fail_on_data_loss,
            )
            out[tp] = log_starts[tp]
    return out


def plan_tasks(
    client: GatewayClient,
    ranges: Mapping[TopicPartition, tuple[int, int]],
    max_bytes_per_task: int,
    min_partitions: int | None,
) -> list[ReadTask]:
    """Cut each partition's [start, end) into byte-balanced tasks (see the module's doc)."""
    wanted = {tp: r for tp, r in ranges.items() if r[1] > r[0]}
    if not wanted:
        return []
    splits = split_points(client, wanted, max_bytes_per_task)
    pieces = sum(len(s.split_offsets) for s in splits.values())
    if min_partitions is not None and pieces < min_partitions:
        total = sum(s.size_bytes for s in splits.values())
        share = max(1, -(-total // min_partitions))
        larger = {tp: wanted[tp] for tp, s in splits.items() if s.size_bytes > share}
        if larger:
            splits.update(split_points(client, larger, share))
    tasks = []
    for tp, (start, end) in wanted.items():
        found = splits[tp]
        # The node clamps to its log start and HW; the task keeps the range asked for, so a
        # read finds (and reports) data loss itself, and offsets past the HW are waited for.
        cuts = [start, *[o for o in found.split_offsets[1:] if start < o < end], end]
        sizes = list(found.split_bytes) + [0] * len(cuts)
        for i in range(len(cuts) - 1):
            tasks.append(ReadTask(tp.topic, tp.partition, cuts[i], cuts[i + 1], sizes[i]))
    return tasks
