"""Apache Kafka's own benchmarks, kafka-producer-perf-test and kafka-consumer-perf-test (the Java
mains their scripts run, from the jars `make kafka` installs), run against any Kafka bootstrap
list, and what they print read back as numbers.

What the tools print (Kafka 4.3.1, tools/.../ProducerPerformance.java and
ConsumerPerformance.java):

- the producer, at its end, one line for every record sent and, with --warmup-records, one
  more for the records after the warm-up ("steady state"):
      N[ steady state] records sent, R records/sec (M MB/sec), A ms avg latency,
      X ms max latency, P ms 50th, P ms 95th, P ms 99th, P ms 99.9th.
  Latency is per record, from send() to its acknowledgement, in whole milliseconds; the
  percentiles come from up to 500,000 samples. Every 5 s it also prints a window line
  ("... records sent, ... ms max latency.") that has no percentiles.
- the consumer, a header line and one line of comma-separated values:
      start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec,
      rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
  (fetch.* leave out the group join), and a WARNING line if it stopped before its count.

The server's CPU is measured from the tool's first printed line (the producer's "Warmup
first ..." line, the consumer's header), after the JVM has started: the seconds a JVM takes
to load its classes are the client's, not the system's.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from devtools.apache_kafka import java_command, log4j2_config

PRODUCER_PERF = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERF = "org.apache.kafka.tools.ConsumerPerformance"
JVM_OPTIONS = ("-Xmx512m",)
TOOL_TIMEOUT_S = 300.0
# acks=all as the durability (RF3, min ISR 2); the rest the Java producer's defaults
# (linger.ms 5, batch.size 16384, five requests in flight, idempotent).
PRODUCER_PROPS = ("acks=all",)

_TOTAL = re.compile(
    r"^(?P<records>\d+)(?P<steady> steady state)? records sent, "
    r"(?P<rate>[\d.]+) records/sec \((?P<mb>[\d.]+) MB/sec\), "
    r"(?P<avg>[\d.]+) ms avg latency, (?P<max>[\d.]+) ms max latency, "
    r"(?P<p50>\d+) ms 50th, (?P<p95>\d+) ms 95th, (?P<p99>\d+) ms 99th, "
    r"(?P<p999>\d+) ms 99.9th\.$"
)
_CONSUMER_HEADER = "start.time, end.time, data.consumed.in.MB"


class PerfToolError(RuntimeError):
    """A perf tool failed, or printed nothing this module can read."""


@dataclass(frozen=True)
class ProducerPerf:
    """One summary line of kafka-producer-perf-test."""

    records: int
    records_per_s: float
    mb_per_s: float
    avg_ms: float
    max_ms: float
    p50_ms: int
    p95_ms: int
    p99_ms: int
    p999_ms: int


@dataclass(frozen=True)
class ProducerRun:
    total: ProducerPerf
    steady: ProducerPerf | None  # the records after --warmup-records, when it was given


@dataclass(frozen=True)
class ConsumerPerf:
    """kafka-consumer-perf-test's line; `fetch_*` without the group join (`rebalance_ms`)."""

    records: int
    mb: float
    mb_per_s: float
    records_per_s: float
    rebalance_ms: int
    fetch_ms: int
    fetch_mb_per_s: float
    fetch_records_per_s: float


def parse_producer_perf(output: str) -> ProducerRun:
    total: ProducerPerf | None = None
    steady: ProducerPerf | None = None
    for line in output.splitlines():
        match = _TOTAL.match(line.strip())
        if match is None:
            continue
        perf = ProducerPerf(
            records=int(match["records"]),
            records_per_s=float(match["rate"]),
            mb_per_s=float(match["mb"]),
            avg_ms=float(match["avg"]),
            max_ms=float(match["max"]),
            p50_ms=int(match["p50"]),
            p95_ms=int(match["p95"]),
            p99_ms=int(match["p99"]),
            p999_ms=int(match["p999"]),
        )
        if match["steady"]:
            steady = perf
        else:
            total = perf
    if total is None:
        raise PerfToolError(f"no summary line in the producer perf test's output: {output[-2000:]}")
    return ProducerRun(total, steady)


def parse_consumer_perf(output: str) -> ConsumerPerf:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for index, line in enumerate(lines):
        if line.startswith("WARNING: Exiting before consuming"):
            raise PerfToolError(f"the consumer perf test stopped short: {line}")
        if line.startswith(_CONSUMER_HEADER) and index + 1 < len(lines):
            values = [value.strip() for value in lines[index + 1].split(",")]
            if len(values) == 10:
                return ConsumerPerf(
                    records=int(values[4]),
                    mb=float(values[2]),
                    mb_per_s=float(values[3]),
                    records_per_s=float(values[5]),
                    rebalance_ms=int(values[6]),
                    fetch_ms=int(values[7]),
                    fetch_mb_per_s=float(values[8]),
                    fetch_records_per_s=float(values[9]),
                )
    raise PerfToolError(f"no result line in the consumer perf test's output: {output[-2000:]}")


def _run(main_class: str, args: Sequence[str], on_first_line: Callable[[], None] | None) -> str:
    """The tool run to its end; its stdout. `on_first_line` is called when it prints its
    first line (the JVM is up and the tool has begun)."""
    jvm_options = (*JVM_OPTIONS, f"-Dlog4j2.configurationFile={log4j2_config()}")
    # stderr to a file: a pipe nobody reads while we wait for the first line of stdout could
    # fill (64 KiB) and stop the tool.
    with (
        tempfile.TemporaryFile() as stderr,
        subprocess.Popen(
            java_command(main_class, *args, jvm_options=jvm_options),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        ) as process,
    ):
        assert process.stdout is not None
        first = process.stdout.readline()
        if on_first_line is not None:
            on_first_line()
        try:
            rest, _ = process.communicate(timeout=TOOL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            raise PerfToolError(f"{main_class} running after {TOOL_TIMEOUT_S:.0f} s") from None
        stderr.seek(0)
        errors = stderr.read().decode(errors="replace")
    output = first + rest
    if process.returncode != 0:
        raise PerfToolError(
            f"{main_class} exited {process.returncode}: {output[-1000:]} {errors[-3000:]}"
        )
    return output


def producer_perf(
    bootstrap: str,
    topic: str,
    records: int,
    size: int,
    *,
    warmup_records: int,
    throughput: float = -1,
    props: Sequence[str] = PRODUCER_PROPS,
    on_start: Callable[[], None] | None = None,
) -> ProducerRun:
    """kafka-producer-perf-test: `records` of `size` bytes, at most `throughput` a second
    (-1: as fast as it can); the first `warmup_records` (at least 1: the tool says so at once,
    which is when `on_start` is called) left out of the steady-state line. Fails unless every
    record was acknowledged."""
    if not 1 <= warmup_records < records:
        raise ValueError(f"warmup_records {warmup_records} not in [1, {records})")
    args = [
        "--bootstrap-server", bootstrap,
        "--topic", topic,
        "--num-records", str(records),
        "--record-size", str(size),
        "--throughput", str(throughput),
        "--warmup-records", str(warmup_records),
        "--command-property", *props,
    ]  # fmt: skip
    run = parse_producer_perf(_run(PRODUCER_PERF, args, on_start))
    if run.total.records != records:
        raise PerfToolError(f"{run.total.records} of {records} records to {topic} acknowledged")
    return run


def consumer_perf(
    bootstrap: str,
    topic: str,
    records: int,
    group: str,
    *,
    timeout_ms: int = 60_000,
    on_start: Callable[[], None] | None = None,
) -> ConsumerPerf:
    """kafka-consumer-perf-test: a consumer in `group` (new: from the earliest offset) reads
    `records` of `topic`. Fails unless it read them all."""
    args = [
        "--bootstrap-server", bootstrap,
        "--topic", topic,
        "--num-records", str(records),
        "--group", group,
        "--timeout", str(timeout_ms),
    ]  # fmt: skip
    perf = parse_consumer_perf(_run(CONSUMER_PERF, args, on_start))
    if perf.records < records:
        raise PerfToolError(f"{perf.records} of {records} records of {topic} consumed")
    return perf
