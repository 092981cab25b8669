"""The sink's side in a Spark task: Arrow record batches of Spark's Kafka sink columns
written through the seglog Producer, one producer per worker process kept across tasks.

Columns (as Spark's Kafka sink): `value` (binary or string) is required; `key` (binary or
string), `topic` (string: overrides the `topic` option), `partition` (int), `headers`
(array<struct<key string, value binary>>) and `timestamp` (timestamp) are optional; other
columns are ignored, as Kafka's sink ignores them. Without a `partition`, a keyed record goes
where the Kafka producer would put it (murmur2 of the key), so Kafka's keyed placement holds.

Each task flushes its producer and waits for every acknowledgement before it reports
success; a record that fails fails the task with the producer's error (the job then fails).
That is at-least-once delivery, as Spark's Kafka sink gives: a task retried after a failure
writes its rows again.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..client.producer import Producer
from .options import OptionError, WriteOptions

SINK_COLUMNS = {
    "value": ("binary", "string"),
    "key": ("binary", "string"),
    "topic": ("string",),
    "partition": ("int",),
    "headers": ("array<struct<key:string,value:binary>>",),
    "timestamp": ("timestamp",),
}


def check_sink_columns(types: dict[str, str], topic_option: str | None) -> None:
    """Fail at `save()` / `start()` for columns the sink cannot write (by Spark's simple
    type strings): a missing value, a wrongly typed column, no topic at all."""
    lowered = {name.lower(): t for name, t in types.items()}
    if "value" not in lowered:
        raise OptionError("the seglog sink needs a value column (binary or string)")
    for name, allowed in SINK_COLUMNS.items():
        if name in lowered and lowered[name] not in allowed:
            raise OptionError(
                f"column {name} is {lowered[name]}; the seglog sink takes {' or '.join(allowed)}"
            )
    if "topic" not in lowered and topic_option is None:
        raise OptionError("the seglog sink needs the option topic or a topic column")


@dataclass(frozen=True)
class WriteResult:
    records: int


_producers: dict[tuple[Any, ...], Producer] = {}
_producers_lock = threading.Lock()


def producer_for(options: WriteOptions) -> Producer:
    key = (options.bootstrap, options.request_timeout_ms, tuple(sorted(options.producer.items())))
    with _producers_lock:
        producer = _producers.get(key)
        if producer is None:
            settings = {"request_timeout_ms": options.request_timeout_ms, **options.producer}
            producer = _producers[key] = Producer(options.bootstrap, **settings)
        return producer


def _drop_producer(options: WriteOptions, producer: Producer) -> None:
    with _producers_lock:
        for key, found in list(_producers.items()):
            if found is producer:
                del _producers[key]
    producer.close(timeout=0)


def write_batches(options: WriteOptions, batches: Iterator[pa.RecordBatch]) -> WriteResult:
    """Send every row, flush, and raise the first delivery error."""
    producer = producer_for(options)
    futures: list[Any] = []
    records = 0
    try:
        for batch in batches:
            records += batch.num_rows
            futures += _send_batch(producer, options, batch)
        producer.flush()
        for future in futures:
            future.get()
    except BaseException:
        _drop_producer(options, producer)
        raise
    return WriteResult(records)


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    index = batch.schema.get_field_index(name)
    if index < 0:
        return None
    values: list[Any] = batch.column(index).to_pylist()
    return values


def _as_bytes(values: list[Any] | None) -> list[bytes | None] | None:
    if values is None or not values or all(v is None or type(v) is bytes for v in values):
        return values
    return [v.encode() if isinstance(v, str) else v for v in values]


def _send_batch(producer: Producer, options: WriteOptions, batch: pa.RecordBatch) -> list[Any]:
    values = _as_bytes(_column(batch, "value"))
    assert values is not None
    keys = _as_bytes(_column(batch, "key"))
    topics = _column(batch, "topic")
    partitions = _column(batch, "partition")
    headers = _column(batch, "headers")
    timestamps = _timestamps_ms(batch)
    count = batch.num_rows
    topic_of = _topic_resolver(topics, options.topic)
    futures: list[Any] = []
    per_record = (headers is not None and any(headers)) or (
        timestamps is not None and any(t is not None for t in timestamps)
    )
    if not per_record and (topics is None or len(set(topics)) == 1):
        # The bulk path: one send_many per partition run (or for the whole batch).
        if not count:
            return []
        topic = topic_of(0)
        if partitions is None or all(p is None for p in partitions):
            return [producer.send_many(topic, values, keys)]
        groups: dict[int | None, list[int]] = {}
        for i, p in enumerate(partitions):
            groups.setdefault(p, []).append(i)
        for p, rows in groups.items():
            part_values = [values[i] for i in rows]
            part_keys = None if keys is None else [keys[i] for i in rows]
            futures.append(producer.send_many(topic, part_values, part_keys, partition=p))
        return futures
    for i in range(count):
        futures.append(
            producer.send(
                topic_of(i),
                values[i],
                key=None if keys is None else keys[i],
                partition=None if partitions is None else partitions[i],
                timestamp_ms=None if timestamps is None else timestamps[i],
                headers=_headers(None if headers is None else headers[i]),
            )
        )
    return futures


def _topic_resolver(topics: list[Any] | None, default: str | None) -> Any:
    def topic_of(i: int) -> str:
        topic = default if topics is None or topics[i] is None else topics[i]
        if topic is None:
            raise OptionError(
                "a row has no topic: give the option topic or a non-null topic column"
            )
        return str(topic)

    return topic_of


def _timestamps_ms(batch: pa.RecordBatch) -> list[int | None] | None:
    """The timestamp column in whole milliseconds (integer arithmetic on Arrow's
    microseconds: no float rounding)."""
    index = batch.schema.get_field_index("timestamp")
    if index < 0:
        return None
    micros = batch.column(index).cast(pa.int64())
    millis: list[int | None] = pc.divide(micros, 1000).to_pylist()  # no records before 1970
    return millis


def _headers(value: Iterable[dict[str, Any]] | None) -> list[tuple[str, bytes | None]] | None:
    if not value:
        return None
    return [(h["key"], h["value"]) for h in value]
