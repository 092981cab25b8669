"""The end of a Kafka data call (Produce, Fetch) as the broker core's data path sees it."""

from __future__ import annotations

import time

from ..routing.call_scope import CallEnd
from .kafka_call import KafkaCall


def call_scope(call: KafkaCall) -> CallEnd:
    """The call's end as the core's data path sees it; a client over its quota is throttled
    the Kafka way (KIP-219): the answer goes at once, saying throttle_time_ms, and the
    connection is muted that long after it."""
    session = call.session

    def defer_throttle(throttle_ms: int) -> bool:
        until = time.monotonic() + throttle_ms / 1000
        session.muted_until = max(session.muted_until, until)
        return True

    return CallEnd(defer_throttle)
