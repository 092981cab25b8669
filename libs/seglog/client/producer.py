"""The producer: `send` puts a record in its partition's open batch and returns at once; a
sender thread ships batches to their leaders. Kafka's producer, in shape and in settings.

    with Producer(bootstrap="127.0.0.1:7070", linger_ms=10) as producer:
        future = producer.send("orders", b"value", key=b"customer-7")
        metadata = future.get(timeout=10)       # RecordMetadata(topic, partition, offset, ...)

Partitioning (Kafka's defaults): an explicit partition is used as given (checked against the
topic's partition count); a keyed record goes to murmur2(key) & 0x7fffffff % partitions;
records without a key stick to one partition until its batch is closed, then move to another
(KIP-480), so unkeyed traffic fills whole batches instead of spraying one record per batch.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import SeglogError
from ..records.builder import Headers
from .accumulator import RecordAccumulator
from .buffer_pool import BufferPool
from .config import ProducerConfig, client_security, from_kwargs, pop_bootstrap
from .fast_entries import FAST_SEND
from .fast_entries import send_keyed as _send_keyed
from .fast_entries import send_value as _send_value
from .futures import BulkFuture, Callback, ProducerClosedError, RecordFuture
from .gateway import GatewayClient, default_bootstrap
from .metadata import Metadata, MetadataTimeoutError
from .outages import OutageLog
from .partitioner import KeyPartitioner
from .produce_transport import ProduceTransport
from .record_checks import check_size, check_types, partition_out_of_range
from .sender import Sender
from .structs import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition
from .transactions import TransactionManager, transaction_manager

logger = logging.getLogger(__name__)


class Producer:
    def __init__(self, bootstrap: str | None = None, **config: Any) -> None:
        bootstrap = pop_bootstrap(bootstrap, config)
        self.config = from_kwargs(ProducerConfig, config)
        self.bootstrap = bootstrap or default_bootstrap()
        if self.config.key_serializer is not None or self.config.value_serializer is not None:
            # kafka-python's serializers: only producers that set them pay for the call.
            self.send = self._send_serialized  # type: ignore[method-assign]
        self._client = GatewayClient(
            self.bootstrap,
            timeout_s=self.config.request_timeout_ms / 1000,
            security=client_security(self.config),
            client_id=self.config.client_id,
        )
        # As Kafka's producer, which always allows auto-creation in its Metadata requests.
        self._metadata = Metadata(
            self._client,
            max_age_ms=self.config.metadata_max_age_ms,
            allow_auto_topic_creation=True,
        )
        self._pool = BufferPool(self.config.buffer_memory, self.config.batch_size)
        self._accumulator = RecordAccumulator(self.config, self._pool, self._metadata)
        self._transport = ProduceTransport(
            self._client, direct=self.config.produce_transport == "auto"
        )
        self._transactions = transaction_manager(self._client.txn_coordinators, self.config)
        self._sender = Sender(
            self.config,
            self._accumulator,
            self._metadata,
            self._transport,
            # A transactional producer's id is its transactional id's (init_transactions).
            None
            if self._transactions or not self.config.enable_idempotence
            else self._client.init_producer_id,
            self._transactions,
        )
        self._sticky: dict[str, int] = {}
        self._key_partitioner = KeyPartitioner()
        # send's C path (fast_entries.py): the accumulator's published open batches.
        self._fast_send = FAST_SEND
        self._fast_sticky = self._accumulator.fast.sticky
        self._fast_open = self._accumulator.fast.open_by_partition
        self._partition_counts = self._metadata.partition_counts  # kept current by refreshes
        self._max_record_bytes = min(self.config.max_request_size, self.config.buffer_memory)
        self._sticky_lock = threading.Lock()
        self._closed = False
        self._sender.start()

    # -- sending ----------------------------------------------------------------------------

    def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Headers | None = None,
        callback: Callback | None = None,
    ) -> RecordFuture:
        """Queue one record; the future resolves to its RecordMetadata once acknowledged.

        Blocks to fetch the topic's metadata the first time, and up to `max_block_ms` when
        `buffer_memory` is spent or the topic is unknown (then MetadataTimeoutError, as
        Kafka's send for a topic that does not exist or was deleted).
        `callback(metadata, exception)` runs on the sender thread when the record completes.
        """
        if partition is None:
            # The two common records, into a batch already open, with the fewest checks:
            # without headers in one C call (records/_encode.c: encoding, the future, the
            # callback's registration), else through try_append. Anything else, or a batch
            # to open, takes _send.
            fast = headers is None and self._fast_send
            future: RecordFuture | None = None
            if key is None:
                if type(value) is bytes and len(value) <= self._max_record_bytes:
                    if fast:
                        future = _send_value(
                            self._fast_sticky, topic, value, timestamp_ms, callback
                        )
                    else:
                        future = self._accumulator.try_append(
                            topic, None, None, value, _or_now(timestamp_ms), headers, callback
                        )
            elif type(key) is bytes and (value is None or type(value) is bytes):
                num_partitions = self._partition_counts.get(topic)
                if (
                    num_partitions is not None
                    and not self._closed
                    and len(key) + (0 if value is None else len(value)) <= self._max_record_bytes
                ):
                    if fast:
                        future = _send_keyed(
                            self._fast_open,
                            topic,
                            key,
                            value,
                            num_partitions,
                            timestamp_ms,
                            callback,
                        )
                    else:
                        future = self._accumulator.try_append(
                            topic,
                            self._key_partitioner.partition(key, num_partitions),
                            key,
                            value,
                            _or_now(timestamp_ms),
                            headers,
                            callback,
                        )
            if future is not None:
                return future
        return self._send(topic, value, key, partition, _or_now(timestamp_ms), headers, callback)

    def _send_serialized(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Headers | None = None,
        callback: Callback | None = None,
    ) -> RecordFuture:
        """`send` after the configured serializers, called as kafka-python calls them (on
        every key and value, None included)."""
        key_serializer, value_serializer = self.config.key_serializer, self.config.value_serializer
        if key_serializer is not None:
            key = key_serializer(key)
        if value_serializer is not None:
            value = value_serializer(value)
        return Producer.send(self, topic, value, key, partition, timestamp_ms, headers, callback)

    def _send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        partition: int | None,
        timestamp_ms: int,
        headers: Headers | None,
        callback: Callback | None,
    ) -> RecordFuture:
        """`send` with every check: the first record of a topic or of a batch, keyed records,
        explicit partitions."""
        if self._closed:
            raise ProducerClosedError("send after close")
        num_partitions = self._partition_counts.get(topic)
        if num_partitions is None:
            num_partitions = self._num_partitions(topic)
        if (type(value) is not bytes and value is not None) or (
            type(key) is not bytes and key is not None
        ):
            check_types(key, value)
        if (0 if value is None else len(value)) + (
            0 if key is None else len(key)
        ) > self._max_record_bytes:
            check_size(key, value, self._max_record_bytes, self.config)
        accumulator = self._accumulator
        sticky = key is None and partition is None
        if sticky:
            partition = self._sticky_partition(topic, num_partitions)
            future = accumulator.try_append(
                topic, partition, key, value, timestamp_ms, headers, callback
            )
            if future is not None:
                accumulator.stick(topic, partition)
                return future
            # The sticky partition's batch is full or gone: move on, so the record
            # opens a batch on the next partition (KIP-480).
            partition = self._next_sticky(topic, num_partitions, partition)
        elif partition is None:
            partition = self._key_partitioner.partition(bytes(key), num_partitions)  # type: ignore[arg-type]
        elif not 0 <= partition < num_partitions:
            partition_out_of_range(topic, partition, num_partitions)
        future = accumulator.try_append(
            topic, partition, key, value, timestamp_ms, headers, callback
        )
        if future is None:
            future = accumulator.append(
                topic, partition, key, value, timestamp_ms, headers, callback
            )
            self._sender.wakeup()  # a batch was closed, a new one opened
        if sticky:
            accumulator.stick(topic, partition)
        return future

    def send_many(
        self,
        topic: str,
        values: Sequence[bytes | None],
        keys: Sequence[bytes | None] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> BulkFuture:
        """Queue many records sharing one timestamp and no headers: the bulk path, with one
        future for the lot (resolving to a BatchMetadata per run of consecutive offsets).

        Partitions as `send` does: `partition` if given, else each key's partition, else
        sticky batches across the partitions."""
        if self._closed:
            raise ProducerClosedError("send after close")
        if keys is not None and len(keys) != len(values):
            raise ValueError(f"{len(keys)} keys for {len(values)} values")
        num_partitions = self._num_partitions(topic)
        timestamp_ms = _or_now(timestamp_ms)
        bulk = BulkFuture(topic)
        if not values:
            return bulk
        accumulator = self._accumulator
        if partition is not None:
            if not 0 <= partition < num_partitions:
                partition_out_of_range(topic, partition, num_partitions)
            accumulator.append_many(topic, partition, values, keys, timestamp_ms, bulk)
        elif keys is not None and any(k is not None for k in keys):
            by_partition: dict[int, tuple[list[bytes | None], list[bytes | None]]] = {}
            sticky = self._sticky_partition(topic, num_partitions)
            key_partition = self._key_partitioner.partition
            for key, value in zip(keys, values, strict=True):
                p = sticky if key is None else key_partition(bytes(key), num_partitions)
                group = by_partition.get(p)
                if group is None:
                    group = by_partition[p] = ([], [])
                group[0].append(value)
                group[1].append(key)
            for p, (part_values, part_keys) in by_partition.items():
                accumulator.append_many(topic, p, part_values, part_keys, timestamp_ms, bulk)
        else:
            # Sticky in whole batches: one partition per batch_size worth of records.
            per_batch = max(1, self.config.batch_size // (len(values[0] or b"") + 16))
            for start in range(0, len(values), per_batch):
                p = self._sticky_partition(topic, num_partitions)
                chunk = values[start : start + per_batch]
                accumulator.append_many(topic, p, chunk, None, timestamp_ms, bulk)
                self._next_sticky(topic, num_partitions, p)
        self._sender.wakeup()
        return bulk

    def _num_partitions(self, topic: str) -> int:
        """The topic's partition count, fetched the first time; while the topic is unknown
        (not created yet, deleted) or the cluster unreachable, asked again with back-off up
        to `max_block_ms`, as Kafka's waitOnMetadata."""
        try:
            return self._metadata.topic(topic).num_partitions
        except SeglogError as exc:
            if not exc.retriable:
                raise
            first_error = exc
        max_block_ms = self.config.max_block_ms
        deadline_s = time.monotonic() + max_block_ms / 1000
        outage = OutageLog(
            logger,
            f"metadata for topic {topic!r}",
            backoff_ms=self.config.retry_backoff_ms,
            backoff_max_ms=self.config.retry_backoff_max_ms,
        )
        error = first_error
        while True:
            wait_s = min(outage.failed(error, key=error.reason), deadline_s - time.monotonic())
            if wait_s <= 0 or self._closed:
                raise MetadataTimeoutError(
                    f"topic {topic!r} not present in metadata after {max_block_ms} ms "
                    f"(max_block_ms): {error}"
                ) from None
            time.sleep(wait_s)
            try:
                num_partitions = self._metadata.topic(topic).num_partitions
            except SeglogError as exc:
                if not exc.retriable:
                    raise
                error = exc
                continue
            outage.succeeded()
            return num_partitions

    def partitions_for(self, topic: str) -> list[int]:
        return list(range(self._metadata.topic(topic).num_partitions))

    def _sticky_partition(self, topic: str, num_partitions: int) -> int:
        partition = self._sticky.get(topic)
        if partition is None or partition >= num_partitions:
            with self._sticky_lock:
                partition = self._sticky.get(topic)
                # None at first; too high when the topic was re-created with fewer partitions.
                if partition is None or partition >= num_partitions:
                    partition = self._sticky[topic] = random.randrange(num_partitions)
        return partition

    def _next_sticky(self, topic: str, num_partitions: int, previous: int) -> int:
        """Move the topic's sticky partition off `previous` (another thread may already have)."""
        with self._sticky_lock:
            current = self._sticky.get(topic, previous)
            if current == previous:
                if num_partitions > 1:
                    current = random.randrange(num_partitions - 1)
                    current += current >= previous  # any partition but the previous one
                self._sticky[topic] = current
            return current

    # -- transactions (Kafka's, with `transactional_id`: client/transactions.py) -------------

    def _txn(self) -> TransactionManager:
        if self._transactions is None:
            raise SeglogError("a transactional call needs the producer's transactional_id")
        return self._transactions

    def init_transactions(self, timeout: float | None = None) -> None:
        """Take the id's producer id at a new epoch, fencing any older producer of the id."""
        self._txn().init_transactions(timeout)

    def begin_transaction(self) -> None:
        self._txn().begin_transaction()

    def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        group: ConsumerGroupMetadata | str,
        timeout: float | None = None,
    ) -> None:
        """The group's offsets (`group`: Consumer.group_metadata() or a group id), committed
        only if the transaction commits."""
        self._txn().send_offsets(offsets, group, timeout)

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Send what is queued, then commit (raises when a send in it failed: abort)."""
        self._txn().end_transaction(True, self.flush, timeout)

    def abort_transaction(self, timeout: float | None = None) -> None:
        self._txn().end_transaction(False, self.flush, timeout)

    # -- completing -------------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued now (ignoring linger_ms) and wait until each record has
        completed, successfully or not. Raises TimeoutError if `timeout` passes first."""
        batches = self._accumulator.begin_flush()
        try:
            self._sender.wakeup()
            deadline = None if timeout is None else time.monotonic() + timeout
            for batch in batches:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                try:
                    batch.result.wait(remaining)
                except TimeoutError:
                    raise TimeoutError(f"flush did not complete within {timeout} s") from None
                except SeglogError:
                    pass  # the record's own future reports it
        finally:
            self._accumulator.end_flush()

    def close(self, timeout: float | None = None) -> None:
        """Send what is queued, wait up to `timeout` (forever when None), then stop; records
        still unsent after that fail with an error on their futures."""
        if self._closed:
            return
        self._closed = True
        self._accumulator.begin_close()
        self._sender.initiate_close(force=timeout == 0)
        self._sender.join(timeout)
        if self._sender.is_alive():
            self._sender.initiate_close(force=True)
            self._sender.join()
        self._pool.close()
        self._transport.close()
        self._client.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def metrics(self, raw: bool = False) -> dict[str, dict[str, float]]:
        """kafka-python's shape: metric group -> name -> value, Kafka's metric names
        (seglog's own: `producer-id-resets`, producer ids abandoned after a failed sequenced
        batch; `direct-requests`, requests answered by their leaders straight, not through
        the gateway). `raw` is accepted for kafka-python's signature; the answer is the same."""
        return {
            "producer-metrics": {
                "buffer-total-bytes": self.config.buffer_memory,
                "buffer-available-bytes": self._pool.available_bytes,
                "waiting-threads": self._pool.queued_waiters,
                "requests-in-flight": self._sender.in_flight_requests,
                "producer-id-resets": self._sender.producer_id_resets,
                "direct-requests": self._transport.sent_direct,
            }
        }


def _or_now(timestamp_ms: int | None) -> int:
    return time.time_ns() // 1_000_000 if timestamp_ms is None else timestamp_ms
