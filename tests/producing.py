"""Records produced for a test in one call: each value sent at once (no linger), every send
waited on."""

from __future__ import annotations

from seglog.client.producer import Producer


def produce(address, topic, values, **send):
    with Producer(address, linger_ms=0) as producer:
        futures = [producer.send(topic, v, **send) for v in values]
        return [f.get(timeout=10) for f in futures]
