"""kafka-python's deserializers (`key_deserializer`, `value_deserializer`) over polled
records."""

from __future__ import annotations

from ..records import Record
from .config import ConsumerConfig


def deserialized(records: list[Record], config: ConsumerConfig) -> list[Record]:
    """Each record with the deserializers applied to its key and value, None included."""
    keys = config.key_deserializer
    values = config.value_deserializer
    return [
        r._replace(
            key=r.key if keys is None else keys(r.key),
            value=r.value if values is None else values(r.value),
        )
        for r in records
    ]
