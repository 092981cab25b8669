"""Topic ids (KIP-516) between the registry's form and the Kafka wire's: the registry keeps
Kafka's string form (Uuid.toString: 16 bytes in URL-safe base64 without padding, what
`kafka-topics --describe` prints as TopicId), the codec reads and writes `uuid.UUID` (the 16
bytes as they go on the wire). The zero id is Kafka's "no id"."""

from __future__ import annotations

import base64
import uuid

ZERO = uuid.UUID(int=0)


def to_wire(topic_id: str) -> uuid.UUID:
    """The id as the codec writes it (zero for "": a topic without an id)."""
    if not topic_id:
        return ZERO
    return uuid.UUID(bytes=base64.urlsafe_b64decode(topic_id + "=="))


def from_wire(value: uuid.UUID | None) -> str:
    """The registry's form of an id read off the wire ("" for none or the zero id)."""
    if value is None or value == ZERO:
        return ""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")
