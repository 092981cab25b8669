"""The `seglog` data source for PySpark: batch and streaming reads with Spark's Kafka source
schema and options, batch and streaming writes with its sink's columns.

    spark.read.format("seglog").option("bootstrap", "127.0.0.1:7070")
        .option("subscribe", "orders").load()

Where each piece runs (SPARK.md): `DataSource` methods and the readers' planning run in
Spark's planner / stream-runner Python processes, `read()` and `write()` in Python workers on
pickled copies; so nothing here holds a connection on `self` (clients live in per-process
caches, reading.py and writing.py), and every task carries all it needs in its partition.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ..client.gateway import EARLIEST, LATEST
from ..client.structs import TopicPartition
from .options import OptionError, ReadOptions, WriteOptions, parse_read_options, parse_write_options
from .planning import (
    ReadTask,
    check_available,
    list_offsets,
    partitions_of,
    plan_tasks,
    report_data_loss,
    resolve_offsets,
)
from .reading import RangeRead, connections, read_range
from .remote_planning import fold_tails, plan_remote
from .remote_reading import RemoteRangeRead, read_remote_range
from .writing import WriteResult, check_sink_columns, write_batches

FORMAT_NAME = "seglog"


def source_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source schema (every column nullable: Spark compares nullability)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)


class SeglogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        # Called when the DataFrame is defined (load()): every option is checked here.
        return source_schema(parse_read_options(self.options, streaming=None).include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        return SeglogBatchReader(parse_read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return SeglogStreamReader(parse_read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> SeglogBatchWriter:
        return SeglogBatchWriter(_sink_options(self.options, schema, overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool) -> SeglogStreamWriter:
        return SeglogStreamWriter(_sink_options(self.options, schema, overwrite))


def _sink_options(options: Any, schema: StructType, overwrite: bool) -> WriteOptions:
    if overwrite:
        raise OptionError(
            "the seglog sink only appends records to a log; use mode('append') (batch) or the "
            "append output mode (streaming)"
        )
    parsed = parse_write_options(options)
    check_sink_columns({f.name: f.dataType.simpleString() for f in schema.fields}, parsed.topic)
    return parsed


# -- reading ---------------------------------------------------------------------------------


@dataclass
class SeglogInputPartition(InputPartition):
    read: RangeRead | RemoteRangeRead | None


def _plan(
    client: Any, options: ReadOptions, ranges: dict[TopicPartition, tuple[int, int]]
) -> list[InputPartition]:
    """Tasks for the ranges: with remoteStorage.* options, what lies in a tiered topic's
    copied segments is read straight from the object store (remote_planning.py), the rest
    through the cluster."""
    direct: list[RemoteRangeRead] = []
    if options.remote_storage is not None:
        plan = plan_remote(
            client,
            options.remote_storage,
            ranges,
            options.max_bytes_per_task,
            include_headers=options.include_headers,
            fail_on_data_loss=options.fail_on_data_loss,
        )
        direct = plan.tasks
        ranges = plan.rest
    tasks = plan_tasks(client, ranges, options.max_bytes_per_task, options.min_partitions)
    if direct:
        direct, tasks = fold_tails(
            direct,
            tasks,
            options.max_bytes_per_task,
            options.min_partitions,
            lambda t: _range_read(options, t),
        )
    return [SeglogInputPartition(task) for task in direct] + _input_partitions(options, tasks)


def _input_partitions(options: ReadOptions, tasks: list[ReadTask]) -> list[InputPartition]:
    return [SeglogInputPartition(_range_read(options, t)) for t in tasks]


def _range_read(options: ReadOptions, t: ReadTask) -> RangeRead:
    return RangeRead(
        options.bootstrap,
        t.topic,
        t.partition,
        t.start,
        t.end,
        options.include_headers,
        options.fail_on_data_loss,
        options.request_timeout_ms,
        options.fetch_transport,
    )


def _read(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    task = getattr(partition, "read", None)
    if task is None:  # Spark's stand-in when there is nothing to read
        return iter(())
    if isinstance(task, RemoteRangeRead):
        return read_remote_range(task)
    return read_range(task)


def _starting_offsets(
    client: Any, options: ReadOptions, partitions: list[TopicPartition]
) -> dict[TopicPartition, int]:
    """startingTimestamp, startingOffsetsByTimestamp or startingOffsets, resolved."""
    return resolve_offsets(
        client,
        partitions,
        options.starting,
        "startingOffsets",
        timestamp=options.starting_timestamp,
        by_timestamp=options.starting_by_timestamp,
        strategy=options.by_timestamp_strategy,
    )


class SeglogBatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        options = self.options
        client = connections(options.bootstrap, options.request_timeout_ms)[0]
        partitions = partitions_of(client, options)
        starts = _starting_offsets(client, options, partitions)
        ends = resolve_offsets(
            client,
            partitions,
            options.ending,
            "endingOffsets",
            timestamp=options.ending_timestamp,
            by_timestamp=options.ending_by_timestamp,
            strategy="latest",
        )
        starts = check_available(client, starts, options.fail_on_data_loss)
        for tp in partitions:
            if starts[tp] > ends[tp]:
                raise OptionError(
                    f"{tp.topic}-{tp.partition}: the starting offset {starts[tp]} is after the "
                    f"ending offset {ends[tp]}"
                )
        ranges = {tp: (starts[tp], ends[tp]) for tp in partitions}
        return _plan(client, options, ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition)


# Offsets in Spark's checkpoint, as Spark's Kafka source writes them: {"topic": {"0": 42}}.
Offsets = dict[str, dict[str, int]]


def _to_json(offsets: dict[TopicPartition, int]) -> Offsets:
    out: Offsets = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = offsets[tp]
    return out


def _from_json(offsets: Offsets) -> dict[TopicPartition, int]:
    return {
        TopicPartition(topic, int(p)): int(o)
        for topic, partitions in offsets.items()
        for p, o in partitions.items()
    }


class SeglogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of offset ranges. Spark's checkpoint holds the offsets (the source
    keeps nothing that must survive): a restart resumes after the last committed batch, and
    a batch planned but not committed is planned again from the same offsets."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._initial: Offsets | None = None
        self._available_now: dict[TopicPartition, int] | None = None
        self._latest_seen: Offsets | None = None

    def _client(self) -> Any:
        return connections(self.options.bootstrap, self.options.request_timeout_ms)[0]

    def initialOffset(self) -> Offsets:
        # Spark asks more than once: the answer must not move.
        if self._initial is None:
            options = self.options
            client = self._client()
            self._initial = _to_json(
                _starting_offsets(client, options, partitions_of(client, options))
            )
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        client = self._client()
        partitions = partitions_of(client, self.options)
        self._available_now = list_offsets(client, {tp: LATEST for tp in partitions})

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        client = self._client()
        begin = _from_json(start)
        partitions = partitions_of(client, self.options)
        latest = list_offsets(client, {tp: LATEST for tp in partitions})
        self._latest_seen = _to_json(latest)
        gone = sorted(set(begin) - set(latest))
        if gone:
            report_data_loss(
                f"partitions {', '.join(f'{tp.topic}-{tp.partition}' for tp in gone)} were being "
                "read and no longer exist",
                self.options.fail_on_data_loss,
            )
        ends = dict(latest)
        if self._available_now is not None:
            ends = {
                tp: min(o, self._available_now[tp])
                for tp, o in ends.items()
                if tp in self._available_now
            }
        # A new partition starts at 0 here; partitions() reads it from its log start.
        ends = {tp: max(o, begin.get(tp, 0)) for tp, o in ends.items()}
        if isinstance(limit, ReadMaxRows):
            ends = _rate_limit(begin, ends, limit.max_rows)
        return _to_json(ends)

    def reportLatestOffset(self) -> Offsets | None:
        return self._latest_seen

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        options = self.options
        client = self._client()
        begin = _from_json(start)
        until = _from_json(end)
        new = [tp for tp in until if tp not in begin]
        if new:
            # Partitions that appeared since the last batch are read from their log start;
            # one that does not start at 0 lost records before it was seen (Spark's rule).
            log_starts = list_offsets(client, {tp: EARLIEST for tp in new})
            for tp in new:
                if log_starts[tp] != 0:
                    report_data_loss(
                        f"added partition {tp.topic}-{tp.partition} starts at offset "
                        f"{log_starts[tp]} instead of 0",
                        options.fail_on_data_loss,
                    )
                begin[tp] = log_starts[tp]
        begin = check_available(client, {tp: begin[tp] for tp in until}, options.fail_on_data_loss)
        ranges = {tp: (begin[tp], max(until[tp], begin[tp])) for tp in until}
        return _plan(client, options, ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition)

    def commit(self, end: Offsets) -> None:
        """Nothing to do: Spark's checkpoint is the record of what was read (and Spark calls
        this lazily, SPARK.md)."""


def _rate_limit(
    begin: dict[TopicPartition, int], ends: dict[TopicPartition, int], max_rows: int
) -> dict[TopicPartition, int]:
    """maxOffsetsPerTrigger shared across partitions in proportion to what each has to read,
    as Spark's Kafka source does (a partition with anything to read moves by at least 1)."""
    sizes = {tp: end - begin.get(tp, 0) for tp, end in ends.items()}
    total = sum(sizes.values())
    if total <= max_rows:
        return ends
    out = {}
    for tp, end in ends.items():
        share = max_rows * sizes[tp] / total
        step = int(share) if share >= 1 else (1 if sizes[tp] > 0 else 0)
        out[tp] = min(end, begin.get(tp, 0) + step)
    return out


# -- writing ---------------------------------------------------------------------------------


@dataclass
class SeglogCommit(WriterCommitMessage):
    records: int


class SeglogBatchWriter(DataSourceArrowWriter):
    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SeglogCommit:
        result: WriteResult = write_batches(self.options, iterator)
        return SeglogCommit(result.records)


class SeglogStreamWriter(DataSourceStreamArrowWriter):
    """Each task's rows are acknowledged before the task succeeds; a micro-batch run again
    after a failure writes its rows again (at least once, as Spark's Kafka sink)."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SeglogCommit:
        return SeglogCommit(write_batches(self.options, iterator).records)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass
