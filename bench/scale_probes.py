"""What the scale group measures of running processes, from outside them: CPU, RSS and open
descriptors from /proc, acks=all produce latency through a real producer, and the bytes a
registry change writes (files in the gateway's data dir, or values in etcd)."""

from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from etcd3gw.client import Etcd3Client

from seglog.client.producer import Producer

from .line_process import LineProcess

CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of `pid` so far. /proc/<pid>/stat: the command name is in parentheses
    and may hold spaces, so fields are counted after its closing one; utime and stime are
    fields 14 and 15 of the whole line (11 and 12 after the name), in clock ticks."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_PER_S


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024  # the kernel writes it in kB
    return 0


def open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def idle_cpu_s(pids: dict[str, int], window_s: float) -> dict[str, float]:
    """Each process's CPU seconds over one window of `window_s` of wall time, scaled to per
    10 s (the issue's unit)."""
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    started = time.monotonic()
    time.sleep(window_s)
    elapsed = time.monotonic() - started
    return {name: (cpu_seconds(pid) - before[name]) * 10 / elapsed for name, pid in pids.items()}


def produce_latency_median_ms(producer: Producer, topic: str, samples: int) -> float:
    """The median of `samples` single acks=all produces, each sent alone and waited for."""
    value = b"l" * 1024
    latencies = []
    for _ in range(samples):
        started = time.perf_counter()
        producer.send(topic, value, partition=0).get(timeout=60)
        latencies.append(time.perf_counter() - started)
    return statistics.median(latencies) * 1000


class SteadyProduce:
    """bench.steady_producer in a process of its own: 1 KiB records to one partition at a
    fixed rate, acks=all, each record's latency kept; `window()` returns the latencies of the
    records sent since the last call; `failures` counts records that were not acknowledged."""

    STOP_TIMEOUT_S = 90.0  # the producer's close waits up to 60 s for its sends

    def __init__(
        self, bootstrap: str, topic: str, rate_per_s: float, *, kafka: bool = False
    ) -> None:
        """`kafka`: librdkafka's producer against Apache Kafka at `bootstrap`."""
        self.args = [bootstrap, topic, str(rate_per_s)] + (["--kafka"] if kafka else [])
        self.failures = 0
        self._process: LineProcess | None = None

    def __enter__(self) -> SteadyProduce:
        self._process = LineProcess("bench.steady_producer", self.args, self.STOP_TIMEOUT_S)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._process is not None:
            self._process.stop()

    def warmed_up(self, timeout_s: float, poll_interval_s: float = 0.1) -> bool:
        """Wait until a record has been acknowledged (its process started, its producer
        connected), discarding what was recorded so far: windows that follow start warm.
        False when none was within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while not self.window(max(0.0, deadline - time.monotonic())):
            if time.monotonic() > deadline:
                return False
            time.sleep(poll_interval_s)
        return True

    def window(self, answers_timeout_s: float = 150.0) -> list[float]:
        """The latencies (s) of the records sent since the last call (at least one), once
        answered, or once `answers_timeout_s` has passed (bench.steady_producer)."""
        assert self._process is not None
        line = self._process.ask(f"window {answers_timeout_s:.3f}")
        answer = json.loads(line)
        self.failures = answer["failures"]
        return answer["latencies_s"]


def quantile_ms(latencies_s: list[float], fraction: float) -> float:
    if not latencies_s:
        return float("nan")
    ordered = sorted(latencies_s)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] * 1000


def p99_ms(latencies_s: list[float]) -> float:
    return quantile_ms(latencies_s, 0.99)


def median_and_p90_moves(idle_s: list[float], creating_s: list[float]) -> str:
    """How the body of the distribution moved, not only its tail: a p99 over a window of a
    few hundred records is close to its maximum, and says nothing of the rest."""
    moves = (
        f"{name} {quantile_ms(idle_s, fraction):.1f} -> {quantile_ms(creating_s, fraction):.1f}"
        for name, fraction in (("p50", 0.5), ("p90", 0.9))
    )
    return ", ".join(moves) + " ms"


# -- registry bytes per change ------------------------------------------------------------


def _files_state(directory: Path) -> dict[Path, tuple[int, int]]:
    state = {}
    for path in directory.rglob("*"):
        try:
            stat = path.stat()
        except FileNotFoundError:
            continue  # replaced while walked: the next state sees its successor
        if path.is_file():
            state[path] = (stat.st_ino, stat.st_size)
    return state


@dataclass(frozen=True)
class FileWrites:
    """What a change wrote to a directory: a file that is new (or replaced by a rename: a new
    inode) counts whole, a file that grew counts its growth."""

    before: dict[Path, tuple[int, int]]

    @staticmethod
    def start(directory: Path) -> FileWrites:
        return FileWrites(_files_state(directory))

    def written_bytes(self, directory: Path) -> int:
        total = 0
        for path, (inode, size) in _files_state(directory).items():
            was = self.before.get(path)
            if was is None or was[0] != inode:
                total += size
            else:
                total += max(0, size - was[1])
        return total


def _etcd_client(endpoint: str) -> Etcd3Client:
    host, port = endpoint.rsplit(":", 1)
    return Etcd3Client(host=host, port=int(port), api_path="/v3/", timeout=30)


def _prefix_end(prefix: str) -> str:
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def etcd_revision(endpoint: str) -> int:
    return int(_etcd_client(endpoint).status()["header"]["revision"])


def etcd_written_bytes(endpoint: str, prefix: str, since_revision: int) -> tuple[int, int]:
    """Bytes of the keys and values written under `prefix` in each revision after
    `since_revision` (each revision read back as of itself, so a key written twice counts
    twice), and how many revisions that was."""
    client = _etcd_client(endpoint)
    now = int(client.status()["header"]["revision"])
    total = 0
    for revision in range(since_revision + 1, now + 1):
        written = client.get(
            prefix,
            metadata=True,
            range_end=_prefix_end(prefix),
            revision=revision,
            min_mod_revision=revision,
        )
        total += sum(len(value) + len(meta["key"]) for value, meta in written)
    return total, now - since_revision


def etcd_largest_value(endpoint: str, prefix: str) -> tuple[int, str]:
    """The largest value under `prefix` now: its size and key."""
    values = _etcd_client(endpoint).get_prefix(prefix)
    if not values:
        return 0, ""
    value, meta = max(values, key=lambda kv: len(kv[0]))
    key = meta["key"]
    return len(value), key.decode() if isinstance(key, bytes) else str(key)
