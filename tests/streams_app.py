"""Kafka Streams' exactly_once_v2 word count (tests/java/WordCountEos.java) as the Streams tests
drive it: compiled once with the JDK's javac against the jars `make kafka-streams` brings, run as
a process of its own (SIGKILLed and started again on its state dir, as an instance restarted
by its supervisor), fed lines of words by an idempotent librdkafka producer, and its output
read back at read_committed by a reader that keeps, per word, every count it was sent."""

from __future__ import annotations

import random
import signal
import struct
import subprocess
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import confluent_kafka

from devtools.apache_kafka import log4j2_config, streams_classpath
from tests.waiting import wait_for

SOURCE = Path(__file__).resolve().parent / "java" / "WordCountEos.java"
MAIN_CLASS = "WordCountEos"
COMPILE_TIMEOUT_S = 180.0
STOP_GRACE_S = 30.0
# Few distinct words, so every word is counted many times in every partition's run.
VOCABULARY = tuple(f"w{i:02d}" for i in range(16))
WORDS_PER_LINE = 5


def compile_app(classes: Path) -> Path:
    """javac WordCountEos.java into `classes`; the directory, for the app's classpath."""
    classes.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["javac", "-cp", streams_classpath(), "-d", str(classes), str(SOURCE)],
        capture_output=True,
        timeout=COMPILE_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return classes


@dataclass
class StreamsApp:
    """One instance of the word count: started, killed and started again on one state dir."""

    classes: Path
    bootstrap: str
    app_id: str
    input_topic: str
    output_topic: str
    state_dir: Path
    log_path: Path
    states: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.states.clear()
        command = [
            "java",
            "-Xmx384m",
            f"-Dlog4j2.configurationFile={log4j2_config()}",
            "-cp",
            f"{self.classes}:{streams_classpath()}",
            MAIN_CLASS,
            self.bootstrap,
            self.app_id,
            self.input_topic,
            self.output_topic,
            str(self.state_dir),
        ]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log)
        threading.Thread(target=self._read, args=(self.process,), daemon=True).start()

    def _read(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        for raw in process.stdout:
            line = raw.decode().strip()
            if line.startswith("STATE "):
                self.states.append(line.split()[1])
            elif line.startswith("ERROR "):
                self.errors.append(line[6:])

    def running(self) -> bool:
        return bool(self.states) and self.states[-1] == "RUNNING"

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a crash: no commit, no leaving the group, its transaction left open."""
        if self.alive():
            assert self.process is not None
            self.process.kill()
            self.process.wait()

    def stop(self) -> int | None:
        """SIGTERM (Streams closes: commits or aborts, leaves the group), SIGKILL past grace."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def describe(self) -> str:
        tail = self.log_path.read_text(errors="replace")[-3000:] if self.log_path.exists() else ""
        return f"states {self.states[-6:]}, errors {self.errors[-5:]}; log tail:\n{tail}"


class WordFeed:
    """Lines of words to the input topic (idempotent, acks=all: each line written once), and
    the true count of every word acknowledged. Written in the background at a steady pace
    while faults come and go (`start`, `stop`), so a fault lands in the middle of the
    application's transactions, not between them."""

    def __init__(self, bootstrap: str, topic: str, seed: int) -> None:
        self.topic = topic
        self.random = random.Random(seed)
        self.counts: Counter[str] = Counter()
        self.lines = 0
        self.failures: list[object] = []
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self.producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "linger.ms": 5,
                "log_level": 3,
            }
        )

    def write(self, lines: int, timeout_s: float) -> None:
        """`lines` lines, returning once each is acknowledged (then counted)."""
        batch: Counter[str] = Counter()

        def delivered(error: object, _message: object) -> None:
            if error is not None:
                self.failures.append(error)

        for _ in range(lines):
            words = [self.random.choice(VOCABULARY) for _ in range(WORDS_PER_LINE)]
            batch.update(words)
            key = str(self.lines).encode()
            self.producer.produce(self.topic, " ".join(words).encode(), key, on_delivery=delivered)
            self.lines += 1
        assert self.producer.flush(timeout_s) == 0, "input lines unacknowledged"
        assert not self.failures, self.failures[:3]
        with self._lock:
            self.counts.update(batch)

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.counts)

    def start(self, lines_per_tick: int, tick_s: float, timeout_s: float) -> None:
        """Write `lines_per_tick` lines every `tick_s` (a pace, not a wait for anything) until
        `stop`."""

        def feed() -> None:
            try:
                while not self._stopped.wait(tick_s):
                    self.write(lines_per_tick, timeout_s)
            except AssertionError as exc:  # told by stop(), in the test's thread
                self.failures.append(exc)

        self._thread = threading.Thread(target=feed, name="word-feed", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop writing; every line written is then acknowledged and counted."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()
        assert not self.failures, self.failures[:3]


class CountsReader:
    """The output topic read from its start at read_committed: per word, the counts in the
    order they were written (each word lives in one partition)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.topic = topic
        self.partitions = partitions
        self.sequences: dict[str, list[int]] = {}
        self.consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"{topic}-reader",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "log_level": 3,
            }
        )
        self.consumer.assign(
            [
                confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                for p in range(partitions)
            ]
        )

    def read(self) -> None:
        """What has arrived since the last read."""
        for message in self.consumer.consume(num_messages=10_000, timeout=0.5):
            if message.error() is not None:
                continue  # transport errors on the way through faults; librdkafka retries
            word = message.key().decode()
            (count,) = struct.unpack(">q", message.value())
            self.sequences.setdefault(word, []).append(count)

    def latest(self) -> Counter[str]:
        return Counter({word: counts[-1] for word, counts in self.sequences.items()})

    def covers(self, counts: Counter[str]) -> bool:
        """Whether every word's latest count read is at least its count in `counts`."""
        self.read()
        latest = self.latest()
        return all(latest[word] >= n for word, n in counts.items())

    def wait_for(self, expected: Counter[str], timeout_s: float, what: str) -> None:
        """Reads until every word's last count is the expected one."""

        def reached() -> bool:
            self.read()
            return self.latest() == expected

        wait_for(reached, timeout_s, what, lambda: self.gaps(expected))

    def at_end(self) -> bool:
        """Whether the reader's position is every partition's high watermark (at
        read_committed: every transaction before it ended and was read past)."""
        self.read()
        positions = self.consumer.position(
            [confluent_kafka.TopicPartition(self.topic, p) for p in range(self.partitions)]
        )
        for position in positions:
            try:
                _low, high = self.consumer.get_watermark_offsets(position, timeout=5, cached=False)
            except confluent_kafka.KafkaException as exc:
                if exc.args[0].code() in LEADER_MOVED:  # since the reader's metadata
                    return False
                raise
            if position.offset < high:
                return False
        return True

    def gaps(self, expected: Counter[str]) -> str:
        latest = self.latest()
        wrong = {w: (latest.get(w), n) for w, n in expected.items() if latest.get(w) != n}
        return f"(read, true) counts differing: {wrong}"

    def close(self) -> None:
        self.consumer.close()


# What asking a partition's watermarks answers in the moment a leader moves (a node killed):
# asked again on the next poll.
LEADER_MOVED = frozenset(
    {
        confluent_kafka.KafkaError.NOT_LEADER_FOR_PARTITION,
        confluent_kafka.KafkaError.LEADER_NOT_AVAILABLE,
        confluent_kafka.KafkaError.FENCED_LEADER_EPOCH,
        confluent_kafka.KafkaError._TIMED_OUT,
        confluent_kafka.KafkaError._TRANSPORT,
    }
)


def exact_count_violations(sequences: dict[str, list[int]], expected: Counter[str]) -> list[str]:
    """Each word's committed counts must be exactly 1, 2, ..., its true count: a repeat or a
    step back is a double count (a replayed record's output committed twice), a gap a lost
    update, a last value off the true count a lost or duplicated input."""
    problems = []
    for word in sorted(set(sequences) | set(expected)):
        seen, want = sequences.get(word, []), list(range(1, expected.get(word, 0) + 1))
        if seen != want:
            first = next(
                (i for i, (a, b) in enumerate(zip(seen, want, strict=False)) if a != b),
                min(len(seen), len(want)),
            )
            problems.append(
                f"{word}: {len(seen)} counts, true count {len(want)}, first difference at "
                f"#{first}: {seen[max(0, first - 2) : first + 3]}"
            )
    return problems
