"""Issue 26's deterministic shape: answers lost between a real idempotent acks=all producer
and the gateway (the requests landed; the producer retries them), and the same between a
producer sending straight to its leader and the leader's bulk listener (the node appended,
then its connection was cut before the answer went out). Every record the producer was told
is written must be in the log exactly once, at the offset it was told."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import pytest

from seglog.client.futures import RecordFuture
from seglog.client.gateway import LATEST, FetchPosition, GatewayClient
from seglog.client.producer import Producer
from seglog.records import iter_records
from services.storage_node import bulk_produce
from tests.cluster import LocalCluster
from tests.faults.proxy import FaultProxy

TOPIC = "answers-lost"
RECORDS = 200
ROUNDS = 10  # one answer dropped per round of RECORDS // ROUNDS sends
NODE_CONFIGS = {
    "min.insync.replicas": "2",
    "replica.fetch.wait.max.ms": "50",
    "replica.fetch.backoff.ms": "100",
}
DROP_NOTICED_TIMEOUT_S = 20.0
RETRY_BACKOFF_MS = 500
FLUSH_TIMEOUT_S = 40.0


def _direct(producer) -> float:
    """Requests the producer's leaders answered straight, not through the gateway."""
    return producer.metrics()["producer-metrics"]["direct-requests"]


@pytest.fixture
def cluster(tmp_path):
    c = LocalCluster(tmp_path, nodes=3, node_configs=NODE_CONFIGS)
    c.admin.create_topic(TOPIC, 1, 3)
    yield c
    c.close()


def read_partition(client: GatewayClient, topic: str, partition: int) -> dict[int, bytes]:
    """The partition's records below its high watermark: {offset: value}."""
    end = client.list_offsets(topic, {partition: LATEST})[partition].offset
    stored: dict[int, bytes] = {}
    offset = 0
    while offset < end:
        (answer,) = client.fetch([FetchPosition(topic, partition, offset)], max_wait_ms=0)
        assert answer.error == 0, answer.error_message
        records = [r for r in iter_records(answer.records) if r.offset >= offset]
        assert records, f"no records at {topic}/{partition}@{offset} below the end {end}"
        stored.update((r.offset, r.value) for r in records)
        offset = records[-1].offset + 1
    return stored


def send(producer: Producer, index: int) -> tuple[bytes, RecordFuture]:
    value = b"record-%04d" % index
    return value, producer.send(TOPIC, value, partition=0)


class NodeAnswerDrops:
    """Drops a leader's answers to produce over its bulk listener, as FaultProxy drops the
    gateway's: the request is appended (and replicated, acks=all), then the connection is
    cut where the answer would go."""

    def __init__(self, monkeypatch) -> None:
        self.answers_dropped = 0
        self._armed = 0
        self._lock = threading.Lock()
        answer = bulk_produce.answer_produce

        def dropping(*args, **kwargs):
            response = answer(*args, **kwargs)
            with self._lock:
                if self._armed == 0:
                    return response
                self._armed -= 1
                self.answers_dropped += 1
            raise ConnectionResetError("the answer is dropped on purpose")

        monkeypatch.setattr(bulk_produce, "answer_produce", dropping)

    def drop_answers(self, count: int) -> None:
        with self._lock:
            self._armed += count


@contextlib.contextmanager
def answers_lost(cluster, transport: str, monkeypatch) -> Iterator[tuple[str, object]]:
    """(the producer's bootstrap, what drops answers) for the transport under test."""
    if transport == "grpc":
        with FaultProxy(cluster.address) as proxy:
            yield proxy.address, proxy
    else:
        yield cluster.address, NodeAnswerDrops(monkeypatch)


@pytest.mark.parametrize("transport", ["grpc", "auto"])
def test_acknowledged_records_survive_dropped_answers(cluster, transport, monkeypatch):
    futures = []
    with answers_lost(cluster, transport, monkeypatch) as (bootstrap, proxy):
        producer = Producer(
            bootstrap,
            produce_transport=transport,
            acks="all",
            enable_idempotence=True,
            # Small batches and a short linger: several batches of the partition wait for
            # each request, the shape in which a retried request mixes landed and new ones.
            batch_size=128,
            linger_ms=20,
            retry_backoff_ms=RETRY_BACKOFF_MS,
            request_timeout_ms=5000,
            delivery_timeout_ms=30_000,
        )
        try:
            # The topic's metadata first, answered: `send` asks for it once and does not retry.
            warm = producer.send(TOPIC, b"warm-up", partition=0)
            futures.append((b"warm-up", warm))
            warm.get(timeout=FLUSH_TIMEOUT_S)
            # Each path carries what this test drops: the gateway's answers, or the leader's.
            assert (_direct(producer) > 0) == (transport == "auto")
            per_round = RECORDS // ROUNDS
            sent = 0
            for round_index in range(ROUNDS):
                proxy.drop_answers(1)
                for _ in range(per_round // 2):
                    futures.append(send(producer, sent))
                    sent += 1
                # The round's first answer is what the armed drop takes: wait until it did.
                deadline = time.monotonic() + DROP_NOTICED_TIMEOUT_S
                while proxy.answers_dropped <= round_index and time.monotonic() < deadline:
                    time.sleep(0.01)
                assert proxy.answers_dropped == round_index + 1, "the armed drop never fired"
                # New records queue behind the batches waiting to be retried (the retry
                # backoff is long), so the retry carries landed batches and new ones together.
                for _ in range(per_round - per_round // 2):
                    futures.append(send(producer, sent))
                    sent += 1
            producer.flush(timeout=FLUSH_TIMEOUT_S)
        finally:
            producer.close(timeout=10)

    stored = read_partition(cluster.client, TOPIC, 0)
    where: dict[bytes, list[int]] = {}
    for offset, value in stored.items():
        where.setdefault(value, []).append(offset)
    acknowledged, problems = 0, []
    for value, future in futures:
        if not future.done() or future.exception() is not None:
            continue
        acknowledged += 1
        offset = future.get(timeout=0).offset
        if where.get(value) != [offset]:
            problems.append(
                f"{value!r} acknowledged at {offset}, stored at {where.get(value, [])}, "
                f"offset {offset} holds {stored.get(offset)!r}"
            )
    assert not problems, (
        f"acked {acknowledged}, in the log {len(stored)} records, "
        f"{len(problems)} acknowledged records not where acknowledged exactly once: "
        + "; ".join(problems[:5])
    )
    # Idempotence with retries on a healthy cluster: every send ends acknowledged, and the
    # retries of requests that had landed wrote nothing twice.
    assert acknowledged == len(futures), f"acked {acknowledged} of {len(futures)} sends"
    assert len(stored) == len(futures), f"{len(stored)} records stored for {len(futures)} sends"
