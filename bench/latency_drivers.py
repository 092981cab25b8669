"""The three things the `latency` group drives at a fixed rate, each the same way: records of
SIZE bytes stamped with their send time (perf_counter_ns, producer and consumer in this one
process), sent by a loop that SLEEPS until each record is due (as an application does: a
spinning loop would starve the client's own threads of the GIL), timed until acknowledged
(publish) and until a consumer assigned every partition at its end has it (end to end). The
consumer runs in a process of its own (bench/latency_consumer.py), as an application's does.

- seglog: its Python Producer (linger 1 ms) and Consumer over gRPC;
- Apache Kafka: confluent-kafka (librdkafka), linger 1 ms, at most five requests in flight;
- the floor: a unary call through a bare two-hop gRPC relay (bench/echo_server.py), no
  storage; its round trip is its publish latency and it has no end to end.
"""

from __future__ import annotations

import json
import struct
import time
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import confluent_kafka
import grpc

from seglog.client import Producer
from seglog.rpc import wire

from .line_process import LineProcess
from .timing import StolenTime

SIZE = 1024
LINGER_MS = 1
STAMP = struct.Struct(">q")  # each record opens with its send time (perf_counter_ns)
WARMUP_S = 2.0  # records sent in the first seconds (connections, caches, JIT) are not counted
DRAIN_S = 30.0  # how long after the last send every record may still take to arrive
# A rate is sustained when the sender kept to its schedule (the last record left at most this
# late: the client kept up) and nothing waited this long (no backlog growing in a queue).
MAX_LAG_S = 0.25
MAX_LATENCY_MS = 1000.0
# A run during which the host took more than this share of the machine's CPU time for other
# guests (/proc/stat's steal) measured the host's neighbours too: on a day the bare relay,
# which stores nothing, had p99 28 ms instead of 4-6, the host stole 17% while it ran.
MAX_STOLEN_SHARE = 0.03


@dataclass
class Run:
    """Milliseconds per record sent after the warm-up: until acknowledged (publish) and until
    the consumer had it (end to end, empty for the floor), how late the last send left, and
    the share of CPU time the host stole while the records were sent (None: not counted).

    The samples are kept as arrays of doubles, whatever they were given as. The bench keeps
    every run of both sides in this one process, where the clients under test run too. Kept
    as lists, they were millions of floats by seglog's acks=1 runs, and the collector walks
    every item of every list on each full collection: 66 ms for 6 million here, 1.6 ms once
    they are arrays, which hold no objects for it to visit. Those pauses came while a client
    was being timed, and showed as seglog's own latency: its client runs in Python threads,
    and seglog is measured last."""

    publish_ms: Sequence[float]
    end_to_end_ms: Sequence[float]
    lag_s: float
    stolen_share: float | None = None

    def __post_init__(self) -> None:
        self.publish_ms = array("d", self.publish_ms)
        self.end_to_end_ms = array("d", self.end_to_end_ms)

    @property
    def host_was_quiet(self) -> bool:
        """Whether the host left this machine its CPU while the run was sent (MAX_STOLEN_SHARE;
        true where the kernel does not count it)."""
        return self.stolen_share is None or self.stolen_share <= MAX_STOLEN_SHARE

    @property
    def sustained(self) -> bool:
        worst = max(max(self.publish_ms, default=0.0), max(self.end_to_end_ms, default=0.0))
        return self.lag_s <= MAX_LAG_S and worst <= MAX_LATENCY_MS


class Samples:
    """(sent, arrived) times in ns, kept in two arrays rather than a list of tuples: a
    list of 160,000 tuples made each of the bench process's full garbage collections take
    ~30 ms, stalling the clients under test (both sides') and counted as their latency."""

    def __init__(self) -> None:
        self.sent = array("q")
        self.at = array("q")

    def add(self, sent_ns: int, at_ns: int) -> None:
        self.sent.append(sent_ns)
        self.at.append(at_ns)

    def extend(self, sent_ns: Iterable[int], at_ns: int) -> None:
        before = len(self.sent)
        self.sent.extend(sent_ns)
        self.at.extend([at_ns] * (len(self.sent) - before))

    def clear(self) -> None:
        del self.sent[:], self.at[:]

    def __len__(self) -> int:
        return len(self.at)


class ConsumerProcess:
    """bench.latency_consumer in a process of its own (`kind` seglog or kafka), assigned
    every partition of `topic` at its end: `len()` and `clear()` as Samples, `take()` the
    samples it kept."""

    STOP_TIMEOUT_S = 30.0

    def __init__(self, kind: str, bootstrap: str, topic: str, partitions: int) -> None:
        self._process = LineProcess(
            "bench.latency_consumer",
            [kind, bootstrap, topic, str(partitions)],
            self.STOP_TIMEOUT_S,
        )
        try:
            if self._process.read_line().strip() != "ready":
                raise RuntimeError("the latency consumer did not start")
        except BaseException:
            self.close()
            raise

    def _ask(self, command: str) -> str:
        return self._process.ask(command)

    def __len__(self) -> int:
        return int(self._ask("count"))

    def clear(self) -> None:
        self._ask("clear")

    def take(self) -> Samples:
        taken = json.loads(self._ask("take"))
        samples = Samples()
        samples.sent.extend(taken["sent"])
        samples.at.extend(taken["at"])
        return samples

    def close(self) -> None:
        self._process.stop()


def paced(rate_per_s: int, duration_s: float, send: Callable[[bytes], None]) -> tuple[int, float]:
    """Call `send(stamped value)` `rate_per_s` times a second for `duration_s`, sleeping until
    each is due; return the start (ns) and how late (s) the last send left."""
    padding = b"p" * (SIZE - STAMP.size)
    total = int(rate_per_s * duration_s)
    interval_ns = 1_000_000_000 // rate_per_s
    pack = STAMP.pack
    clock = time.perf_counter_ns
    start = clock()
    due = start
    for _ in range(total):
        now = clock()
        if now < due:
            time.sleep((due - now) / 1e9)
        send(pack(clock()) + padding)
        due += interval_ns
    return start, max(0.0, (clock() - due) / 1e9)


def _after_warmup(
    start_ns: int, published: Samples, received: Samples
) -> tuple[list[float], list[float]]:
    """The latencies (ms) of the records sent after the warm-up; Run keeps them as arrays."""
    warm = start_ns + int(WARMUP_S * 1e9)
    acks = [
        (at - sent) / 1e6
        for sent, at in zip(published.sent, published.at, strict=True)
        if sent >= warm
    ]
    ends = [
        (at - sent) / 1e6
        for sent, at in zip(received.sent, received.at, strict=True)
        if sent >= warm
    ]
    return acks, ends


def _wait_for(count: Callable[[], int], expected: int, what: str) -> None:
    deadline = time.monotonic() + DRAIN_S
    while count() < expected:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: {count()} of {expected} records in {DRAIN_S:.0f} s")
        time.sleep(0.02)


def _warm_up(
    send: Callable[[int, bytes], None],
    flush: Callable[[], None],
    partitions: int,
    received: ConsumerProcess,
    what: str,
) -> None:
    """Connections, metadata and the consumer's positions settle before timing starts: a
    record to every partition, again until the consumer has had one of each round (a
    consumer assigned at the log end may find its position only after the first round)."""
    deadline = time.monotonic() + DRAIN_S
    while True:
        received.clear()
        for p in range(partitions):
            send(p, STAMP.pack(time.perf_counter_ns()) + b"w" * (SIZE - STAMP.size))
        flush()
        settle = time.monotonic() + 2.0
        while len(received) < partitions and time.monotonic() < settle:
            time.sleep(0.02)
        if len(received) >= partitions:
            received.clear()
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: the consumer never saw the warm-up records")


def seglog_run(
    gateway: str, topic: str, partitions: int, acks: int, rate_per_s: int, duration_s: float
) -> Run:
    received = ConsumerProcess("seglog", gateway, topic, partitions)
    producer = Producer(gateway, acks=acks, linger_ms=LINGER_MS)
    try:
        _warm_up(
            lambda p, value: producer.send(topic, value, partition=p),
            lambda: producer.flush(DRAIN_S),
            partitions,
            received,
            f"seglog warm-up on {topic}",
        )
        published = Samples()
        add = published.add
        clock = time.perf_counter_ns
        unpack = STAMP.unpack_from
        send = producer.send

        def send_one(value: bytes) -> None:
            send(topic, value, callback=lambda m, e, v=value: add(unpack(v)[0], clock()))

        meter = StolenTime()
        start, lag_s = paced(rate_per_s, duration_s, send_one)
        stolen = meter.share()
        producer.flush(DRAIN_S)
        total = int(rate_per_s * duration_s)
        _wait_for(lambda: len(published), total, f"seglog acks={acks} at {rate_per_s}/s")
        _wait_for(lambda: len(received), total, f"seglog consumer at {rate_per_s}/s")
        ends = received.take()
    finally:
        producer.close()
        received.close()
    acks_ms, ends_ms = _after_warmup(start, published, ends)
    return Run(acks_ms, ends_ms, lag_s, stolen)


def kafka_run(
    bootstrap: str, topic: str, partitions: int, acks: int, rate_per_s: int, duration_s: float
) -> Run:
    received = ConsumerProcess("kafka", bootstrap, topic, partitions)
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": str(acks),
            "linger.ms": LINGER_MS,
            "max.in.flight.requests.per.connection": 5,
            "log_level": 3,
        }
    )
    try:
        _warm_up(
            lambda p, value: producer.produce(topic, value, partition=p),
            lambda: producer.flush(DRAIN_S),
            partitions,
            received,
            f"Kafka warm-up on {topic}",
        )
        published = Samples()
        clock = time.perf_counter_ns

        def delivered(error: object, message: confluent_kafka.Message) -> None:
            if error is None:
                published.add(STAMP.unpack_from(message.value())[0], clock())  # type: ignore[arg-type]

        produce, poll = producer.produce, producer.poll

        def send_one(value: bytes) -> None:
            while True:
                try:
                    produce(topic, value, on_delivery=delivered)
                    break
                except BufferError:
                    # librdkafka's queue is full: wait for room, as seglog's send() blocks.
                    # The sender falls behind, and the run counts as not sustained (it
                    # crashed the bench once a warm Kafka climbed the ladder that high).
                    poll(0.01)
            poll(0)  # delivery reports run here, on this thread

        meter = StolenTime()
        start, lag_s = paced(rate_per_s, duration_s, send_one)
        stolen = meter.share()
        producer.flush(DRAIN_S)
        total = int(rate_per_s * duration_s)
        _wait_for(lambda: len(published), total, f"Kafka acks={acks} at {rate_per_s}/s")
        _wait_for(lambda: len(received), total, f"Kafka consumer at {rate_per_s}/s")
        ends = received.take()
    finally:
        # Closed while its brokers still run: one left to the collector kept reconnecting to
        # them after they stopped, printing an error a second through the rest of the run.
        producer.close()
        received.close()
    acks_ms, ends_ms = _after_warmup(start, published, ends)
    return Run(acks_ms, ends_ms, lag_s, stolen)


def floor_run(channel: grpc.Channel, rate_per_s: int, duration_s: float) -> Run:
    """Records sent through the bare relay as the producer sends them: gathered for
    LINGER_MS, then one unary call carrying them all, several calls in flight at once; each
    record timed to its call's answer."""
    put = channel.unary_unary("/bench.Echo/Put", wire.identity, wire.identity)
    put(b"w" * SIZE, timeout=30)
    published = Samples()
    clock = time.perf_counter_ns
    unpack = STAMP.unpack_from
    linger_ns = LINGER_MS * 1_000_000
    at_once = 1_000_000_000 // rate_per_s > linger_ns  # sends further apart than the linger
    pending: list[bytes] = []
    first_ns = 0

    def answered(stamps: list[int]) -> Callable[[grpc.Future], None]:
        def done(_: grpc.Future) -> None:
            now = clock()
            published.extend(stamps, now)

        return done

    def flush() -> None:
        stamps = [unpack(value)[0] for value in pending]
        future = put.future(b"".join(pending), timeout=30)
        future.add_done_callback(answered(stamps))
        pending.clear()

    def send_one(value: bytes) -> None:
        nonlocal first_ns
        now = clock()
        if not pending:
            first_ns = now
        pending.append(value)
        if at_once or now - first_ns >= linger_ns:
            flush()

    meter = StolenTime()
    start, lag_s = paced(rate_per_s, duration_s, send_one)
    stolen = meter.share()
    if pending:
        flush()
    _wait_for(lambda: len(published), int(rate_per_s * duration_s), f"floor at {rate_per_s}/s")
    acks_ms, _ = _after_warmup(start, published, Samples())
    return Run(acks_ms, [], lag_s, stolen)
