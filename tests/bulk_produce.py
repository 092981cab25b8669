"""Produce over a node's bulk listener (bulk.md, version 3), by hand: what the gateway's relay
and a producer holding a produce grant send, for tests that send it themselves or count
what the node answered."""

from __future__ import annotations

import threading
from collections.abc import Iterable

from seglog.client.consumer import Consumer
from seglog.client.structs import TopicPartition
from seglog.rpc import bulk_wire
from seglog.v1 import bulk_pb2


class RelayedProduces:
    """Counts the relayed produces a node's bulk listener answers."""

    def __init__(self, node, monkeypatch) -> None:
        self.count = 0
        self._lock = threading.Lock()
        original = node.bulk.produce.answer

        def counting(*args, **kwargs):
            with self._lock:
                self.count += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(node.bulk.produce, "answer", counting)


def produce_header(request: bytes, grant: bytes, signature: bytes) -> bulk_pb2.BulkFetchRequest:
    return bulk_pb2.BulkFetchRequest(
        version=bulk_wire.BULK_PRODUCE_VERSION,
        grant=grant,
        signature=signature,
        produce_length=len(request),
    )


def exchange(sock, header, body=b""):
    bulk_wire.send_message(sock, header, body)
    return bulk_wire.recv_message(sock, bulk_pb2.BulkProduceAnswer)


def closed_by_node(sock) -> bool:
    return bulk_wire.recv_message(sock, bulk_pb2.BulkProduceAnswer) is None


def consumed_values(cluster, topic: str, partitions: Iterable[int]) -> list[bytes]:
    """Every record value below the partitions' high watermarks, as a consumer reads them
    (each partition's in its order)."""
    partitions = list(partitions)
    with Consumer(cluster.address, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in partitions])
        end = sum(cluster.log(topic, p).high_watermark for p in partitions)
        values: list[bytes] = []
        while len(values) < end:
            records = consumer.poll_records(timeout_ms=5000)
            assert records, f"nothing more to read after {len(values)} of {end}"
            values.extend(r.value for r in records)
        return values
