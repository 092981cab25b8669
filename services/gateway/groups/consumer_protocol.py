"""The consumer protocol's opaque bytes inside classic groups (protocol type "consumer"):
a member's subscription (its JoinGroup metadata) and its assignment (from the leader's
SyncGroup), decoded with kafka-python's classes generated from Kafka's schemas. The
coordinator reads them only to describe a group and to know which topics it reads; bytes
that do not decode are described as empty, never refused (they belong to the clients)."""

from __future__ import annotations

from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)


def subscription_topics(metadata: bytes) -> tuple[str, ...]:
    try:
        return tuple(ConsumerProtocolSubscription.decode(metadata).topics)
    except Exception:  # the client's bytes, in a layout of its own
        return ()


def assignment_partitions(assignment: bytes) -> dict[str, list[int]]:
    if not assignment:
        return {}
    try:
        decoded = ConsumerProtocolAssignment.decode(assignment)
    except Exception:
        return {}
    out: dict[str, list[int]] = {}
    for entry in decoded.assigned_partitions:
        out.setdefault(entry.topic, []).extend(entry.partitions)
    return out
