"""`python -m bench.steady_producer BOOTSTRAP TOPIC RATE_PER_S [--kafka]`: an application's
producer in a process of its own (as applications are: not sharing an interpreter, its GIL and its
garbage collector with the benchmark that polls the cluster meanwhile). It sends 1 KiB
records to partition 0 at a fixed rate, acks=all, and keeps each record's latency (send to
acknowledgement).

Its stdin takes commands, one per line: `window` answers one JSON line on stdout,
{"latencies_s": [...], "failures": N}, the latencies recorded since the last window and the
records not acknowledged so far; end of input stops it (the producer closed, sends flushed).
With `--kafka` the producer is confluent-kafka's (librdkafka: acks=all, linger 0), for the
same measurement against Apache Kafka.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from abc import ABC, abstractmethod
from array import array
from collections.abc import Callable

import confluent_kafka

from seglog.client.producer import Producer

RECORD = b"s" * 1024


class SteadySender(ABC):
    """Paces sends and keeps each record's latency; each subclass is one producer: `send`
    one record with its acknowledgement callback, `close` flushing what was sent."""

    def __init__(self, topic: str, rate_per_s: float) -> None:
        self.topic = topic
        self.interval_s = 1 / rate_per_s
        # An array, not a list of floats: no objects for the collector to walk.
        self._latencies = array("d")
        self.failures = 0
        self._lock = threading.Lock()
        self.stop = threading.Event()

    def window(self) -> dict[str, object]:
        with self._lock:
            taken, self._latencies = self._latencies, array("d")
            return {"latencies_s": taken.tolist(), "failures": self.failures}

    def send_steadily(self) -> None:
        next_send = time.monotonic()
        while not self.stop.is_set():
            sent_at = time.perf_counter()

            def acknowledged(exc: BaseException | None, t: float = sent_at) -> None:
                with self._lock:
                    if exc is None:
                        self._latencies.append(time.perf_counter() - t)
                    else:
                        self.failures += 1

            self.send(acknowledged)
            next_send += self.interval_s
            # A sleep between sends, as an application's pacing: spinning would starve the
            # producer's own sender thread of the GIL.
            self.stop.wait(max(0.0, next_send - time.monotonic()))

    @abstractmethod
    def send(self, acknowledged: Callable[[BaseException | None], None]) -> None: ...

    @abstractmethod
    def close(self) -> None: ...


class SeglogSender(SteadySender):
    def __init__(self, bootstrap: str, topic: str, rate_per_s: float) -> None:
        super().__init__(topic, rate_per_s)
        self.producer = Producer(bootstrap, acks="all", linger_ms=0)

    def send(self, acknowledged: Callable[[BaseException | None], None]) -> None:
        self.producer.send(
            self.topic, RECORD, partition=0, callback=lambda _, exc: acknowledged(exc)
        )

    def close(self) -> None:
        self.producer.close(timeout=60)


class KafkaSender(SteadySender):
    """librdkafka's producer; its delivery reports are served by a poll thread of its own,
    as an application serves them."""

    def __init__(self, bootstrap: str, topic: str, rate_per_s: float) -> None:
        super().__init__(topic, rate_per_s)
        self.producer = confluent_kafka.Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0}
        )
        self._polling = threading.Thread(target=self._poll, daemon=True)
        self._polling.start()

    def _poll(self) -> None:
        while not self.stop.is_set():
            self.producer.poll(0.1)

    def send(self, acknowledged: Callable[[BaseException | None], None]) -> None:
        def delivered(error: object, _message: object) -> None:
            acknowledged(None if error is None else RuntimeError(str(error)))

        self.producer.produce(self.topic, RECORD, partition=0, on_delivery=delivered)

    def close(self) -> None:
        self._polling.join()
        self.producer.flush(60)


def main(argv: list[str]) -> int:
    bootstrap, topic, rate = argv[0], argv[1], float(argv[2])
    kind = KafkaSender if "--kafka" in argv[3:] else SeglogSender
    sender = kind(bootstrap, topic, rate)
    thread = threading.Thread(target=sender.send_steadily, daemon=True)
    thread.start()
    for line in sys.stdin:
        if line.strip() == "window":
            print(json.dumps(sender.window()), flush=True)
    sender.stop.set()
    thread.join()
    sender.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
