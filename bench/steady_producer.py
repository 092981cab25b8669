"""`python -m bench.steady_producer BOOTSTRAP TOPIC RATE_PER_S [--kafka]`: an application's
producer in a process of its own (as applications are: not sharing an interpreter, its GIL and its
garbage collector with the benchmark that polls the cluster meanwhile). It sends 1 KiB
records to partition 0 at a fixed rate, acks=all, and keeps each record's latency (send to
acknowledgement).

Its stdin takes commands, one per line: `window [TIMEOUT_S]` answers one JSON line on stdout,
{"latencies_s": [...], "failures": N}: the latencies of the records sent since the last window,
once each of them is answered, and the records not acknowledged so far. A window is of records
by when they were sent, not when answered: a stall in the window shows as its records' long
latencies, not as records missing from it. A window shorter than one send interval takes the
next record sent, so no window is empty. A window waits up to TIMEOUT_S (default 150) for
its records' answers: past the producers' own delivery timeouts. End of input stops it (the
producer closed, sends flushed).
With `--kafka` the producer is confluent-kafka's (librdkafka: acks=all, linger 0), for the
same measurement against Apache Kafka.
"""

from __future__ import annotations

import json
import math
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

    WINDOW_ANSWERS_TIMEOUT_S = 150.0
    FAILED = -1.0

    def __init__(self, topic: str, rate_per_s: float) -> None:
        self.topic = topic
        self.interval_s = 1 / rate_per_s
        # Latency by sequence number from `_first_seq` on: NaN until answered, FAILED if not
        # acknowledged. An array, not a list of floats: no objects for the collector to walk.
        self._latencies = array("d")
        self._first_seq = 0  # the first record of the open window
        self._sent = 0
        self._first_unanswered = 0
        self.failures = 0
        self._changed = threading.Condition()
        self.stop = threading.Event()

    def window(self, answers_timeout_s: float = WINDOW_ANSWERS_TIMEOUT_S) -> dict[str, object]:
        deadline = time.monotonic() + answers_timeout_s
        with self._changed:
            if self._sent == self._first_seq:
                self._changed.wait_for(lambda: self._sent > self._first_seq, answers_timeout_s)
            cutoff = self._sent
            self._changed.wait_for(
                lambda: self._first_unanswered >= cutoff, max(0.0, deadline - time.monotonic())
            )
            taken = self._latencies[: cutoff - self._first_seq]
            del self._latencies[: cutoff - self._first_seq]
            self._first_seq = cutoff
            self._first_unanswered = max(self._first_unanswered, cutoff)
            latencies = [x for x in taken if x >= 0]  # NaN (never answered) compares False
            return {"latencies_s": latencies, "failures": self.failures}

    def _answered(self, seq: int, latency_s: float) -> None:
        with self._changed:
            index = seq - self._first_seq
            if index < 0:
                return  # its window gave up waiting for it
            self._latencies[index] = latency_s
            if latency_s == self.FAILED:
                self.failures += 1
            while self._first_unanswered < self._sent and not math.isnan(
                self._latencies[self._first_unanswered - self._first_seq]
            ):
                self._first_unanswered += 1
            self._changed.notify_all()

    def send_one(self) -> None:
        with self._changed:
            seq = self._sent
            self._latencies.append(math.nan)
            self._sent += 1
            self._changed.notify_all()
        sent_at = time.perf_counter()

        def acknowledged(exc: BaseException | None) -> None:
            self._answered(seq, self.FAILED if exc is not None else time.perf_counter() - sent_at)

        self.send(acknowledged)

    def send_steadily(self) -> None:
        next_send = time.monotonic()
        while not self.stop.is_set():
            self.send_one()
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
        command, *timeout_s = line.split()
        if command == "window":
            print(json.dumps(sender.window(*map(float, timeout_s))), flush=True)
    sender.stop.set()
    thread.join()
    sender.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
