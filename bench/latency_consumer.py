"""`python -m bench.latency_consumer seglog|kafka BOOTSTRAP TOPIC PARTITIONS`: the latency
group's consumer in a process of its own, as an application's consumer is. In the benchmark's
process its poll loop shared the producer's GIL: with seglog's Python consumer there, the
producer's publish p99 at 5,000/s was 22-24 ms against 17-19 ms with it in a process apart.
librdkafka's consumer runs the same way, so both sides are measured alike.

It assigns every partition of TOPIC at its end, then polls; each record's send stamp (its
first 8 bytes, perf_counter_ns in the producer's process: CLOCK_MONOTONIC on Linux, one clock
for every process of the machine) is kept with the time it arrived. Its stdin takes one
command a line, each answered with one line on stdout: `count` (records kept), `clear`
(forget them; "ok"), `take` (all kept, as JSON {"sent": [...], "at": [...]}); it prints
"ready" once assigned; end of input stops it.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable

import confluent_kafka

from seglog.client import Consumer

from .latency_drivers import STAMP, Samples

POLL_TIMEOUT_S = 0.1


Receiver = tuple[Callable[[], list[bytes]], Callable[[], None]]  # (poll once, close)


def seglog_receiver(bootstrap: str, topic: str, partitions: int) -> Receiver:
    consumer = Consumer(bootstrap)
    consumer.assign([(topic, p) for p in range(partitions)])
    consumer.seek_to_end()
    timeout_ms = int(POLL_TIMEOUT_S * 1000)
    return lambda: [r.value for r in consumer.poll_records(timeout_ms=timeout_ms)], consumer.close


def kafka_receiver(bootstrap: str, topic: str, partitions: int) -> Receiver:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-latency-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "log_level": 3,
        }
    )
    consumer.assign(
        [
            confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_END)
            for p in range(partitions)
        ]
    )

    def receive() -> list[bytes]:
        # One message a call: a batch call waits for its count or its timeout.
        message = consumer.poll(POLL_TIMEOUT_S)
        if message is None or message.error() is not None:
            return []
        return [message.value()]  # type: ignore[list-item]

    return receive, consumer.close


RECEIVERS = {"seglog": seglog_receiver, "kafka": kafka_receiver}


def main(argv: list[str]) -> int:
    kind, bootstrap, topic, partitions = argv[0], argv[1], argv[2], int(argv[3])
    receive, close = RECEIVERS[kind](bootstrap, topic, partitions)
    received = Samples()
    lock = threading.Lock()
    stop = threading.Event()
    unpack = STAMP.unpack_from

    def poll() -> None:
        while not stop.is_set():
            values = receive()
            now = time.perf_counter_ns()
            if values:
                with lock:
                    received.extend((unpack(v)[0] for v in values), now)

    thread = threading.Thread(target=poll, name="latency-consumer", daemon=True)
    thread.start()
    print("ready", flush=True)
    for line in sys.stdin:
        command = line.strip()
        with lock:
            if command == "count":
                answer = str(len(received))
            elif command == "clear":
                received.clear()
                answer = "ok"
            elif command == "take":
                answer = json.dumps({"sent": received.sent.tolist(), "at": received.at.tolist()})
            else:
                answer = f"unknown command {command!r}"
        print(answer, flush=True)
    stop.set()
    thread.join()
    close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
