"""A record's checks before the producer queues it: its key's and value's types, its size,
its explicit partition against the topic's count (Kafka's producer's errors)."""

from __future__ import annotations

from typing import NoReturn

from ..errors import InvalidPartitionsError, RecordTooLargeError
from .config import ProducerConfig

_BYTES_TYPES = (bytes, bytearray, memoryview)


def partition_out_of_range(topic: str, partition: int, num_partitions: int) -> NoReturn:
    raise InvalidPartitionsError(
        f"partition {partition} is not in the range [0..{num_partitions - 1}] of topic {topic!r}"
    )


def check_types(key: object, value: object) -> None:
    if value is not None and type(value) not in _BYTES_TYPES:
        raise TypeError(f"value must be bytes or None, not {type(value).__name__}")
    if key is not None and type(key) not in _BYTES_TYPES:
        raise TypeError(f"key must be bytes or None, not {type(key).__name__}")


def check_size(
    key: bytes | None, value: bytes | None, max_record_bytes: int, config: ProducerConfig
) -> None:
    size = (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
    if size > max_record_bytes:
        raise RecordTooLargeError(
            f"a record of {size} bytes is larger than max_request_size "
            f"({config.max_request_size}) or buffer_memory ({config.buffer_memory})"
        )
