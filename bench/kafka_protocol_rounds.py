"""What the `kafka-protocol` group runs on each side, round by round, and how it reports.

A warm-up round comes first, not counted; then each round runs every throughput workload once
on each side, the sides taking turns workload by workload and swapping who goes first each
round, so a slow moment of this shared machine lands on one run of one side, not on one side;
each run on a topic of its own (4 partitions), the same work for both:

- perf-test produce: kafka-producer-perf-test, 1 KiB records as fast as it can (acks=all,
  the Java producer's defaults otherwise); its steady-state line (after the first tenth);
- perf-test consume: kafka-consumer-perf-test reading those records in a new group; its fetch
  rate (without the group join, printed apart);
- librdkafka produce and consume: 100 B records, acks=all, linger 5 ms (kafka_clients.py);
  the consumer's rate from its first batch to its last record (the time before it, assign to
  first batch, printed apart), as bench/consumer.py times it.

Then, at one rate both sides sustain (half the lower side's best perf-test producer rate, unless
SEGLOG_BENCH_KAFKA_RATE fixes it), ROUNDS runs each of kafka-producer-perf-test --throughput
(p50/p99 per record until acknowledged, the steady-state line) and librdkafka's publish and
end-to-end latency. A run that fell short of the rate (under 90% of it) is said so, and its
latencies are a queue's, not the system's.

Figures: throughput is each side's best run, latency each side's run with the lowest p99,
CPU-seconds per million records the median of the runs, peak RSS the highest (each process's
own peak, summed over the system's processes).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .kafka_clients import consume_timing, latencies_at_rate, percentile, produce_seconds
from .kafka_perf_tools import consumer_perf, producer_perf
from .process_usage import Usage, UsageMeter


@dataclass
class Side:
    """One system under test: its Kafka bootstrap list, how to make a topic on it, and its
    server processes' pids (whose CPU and memory are the system's)."""

    name: str
    bootstrap: str
    create_topic: Callable[[str, int], None]
    pids: list[int] = field(default_factory=list)


MIB = 1024 * 1024
# 250,000 records of 100 B: 50,000 were read in ~40 ms from the first batch on, too short a
# stretch to time; the perf-test runs keep their 10,000 records of 1 KiB.
RECORDS = int(os.environ.get("SEGLOG_BENCH_KAFKA_RECORDS", 250_000))
ROUNDS = int(os.environ.get("SEGLOG_BENCH_KAFKA_ROUNDS", 3))
FIXED_RATE = int(os.environ.get("SEGLOG_BENCH_KAFKA_RATE", 0))  # records/s; 0: chosen in the run
PARTITIONS = 4
PERF_SIZE = 1024
PERF_RECORDS = max(1000, RECORDS // 25)
RDKAFKA_SIZE = 100
LATENCY_WARMUP_S = 2.0  # kafka_clients.WARMUP_S: the same first seconds left out on both
IDLE_S = 10.0
LATENCY_S = 10.0
SUSTAINED_SHARE = 0.9  # a fixed-rate run below 90% of its rate did not keep up


@dataclass(frozen=True)
class Run:
    """One workload's run on one side: records produced or consumed, its rate, the servers'
    usage, and any latencies (ms, by name)."""

    records: int
    records_per_s: float
    mb_per_s: float
    usage: Usage
    latency_ms: dict[str, float] = field(default_factory=dict)
    # What a consumer spent before its timed stretch, left out of its rate and printed apart:
    # perf-test's group join, librdkafka's assign-to-first-batch.
    start_ms: float | None = None
    start_name: str = "group join"

    @property
    def cpu_s_per_m_records(self) -> float:
        return self.usage.cpu_s / self.records * 1e6


Workload = Callable[["Side", str], Run]  # (side, the run's topic) -> its Run


def _metered(side: Side) -> UsageMeter:
    return UsageMeter(side.pids)


def perf_produce(side: Side, topic: str) -> Run:
    meter = _metered(side)
    result = producer_perf(
        side.bootstrap,
        topic,
        PERF_RECORDS,
        PERF_SIZE,
        warmup_records=PERF_RECORDS // 10,
        on_start=meter.start,
    )
    usage = meter.stop()
    steady = result.steady or result.total
    return Run(PERF_RECORDS, steady.records_per_s, steady.mb_per_s, usage)


def perf_consume(side: Side, topic: str) -> Run:
    meter = _metered(side)
    result = consumer_perf(
        side.bootstrap, topic, PERF_RECORDS, f"perf-{topic}", on_start=meter.start
    )
    usage = meter.stop()
    return Run(
        result.records,
        result.fetch_records_per_s,
        result.fetch_mb_per_s,
        usage,
        start_ms=result.rebalance_ms,
    )


def rdkafka_produce(side: Side, topic: str) -> Run:
    meter = _metered(side)
    meter.start()
    seconds = produce_seconds(side.bootstrap, topic, RECORDS, b"v" * RDKAFKA_SIZE)
    usage = meter.stop()
    return Run(RECORDS + 1, RECORDS / seconds, RECORDS * RDKAFKA_SIZE / seconds / MIB, usage)


def rdkafka_consume(side: Side, topic: str) -> Run:
    meter = _metered(side)
    meter.start()
    records = RECORDS + 1  # the producer's warm-up record too
    timing = consume_timing(side.bootstrap, topic, PARTITIONS, records)
    usage = meter.stop()
    # The rate from the first batch on (kafka_clients.consume_timing); the CPU of the whole
    # read, start-up included, over every record read.
    return Run(
        records,
        timing.records_per_s,
        timing.records_per_s * RDKAFKA_SIZE / MIB,
        usage,
        start_ms=timing.first_record_s * 1e3,
        start_name="time to first batch",
    )


def perf_at_rate(rate: int) -> Workload:
    def run(side: Side, topic: str) -> Run:
        meter = _metered(side)
        warmup = max(1, int(rate * LATENCY_WARMUP_S))
        records = warmup + int(rate * LATENCY_S)
        result = producer_perf(
            side.bootstrap,
            topic,
            records,
            PERF_SIZE,
            throughput=rate,
            warmup_records=warmup,
            on_start=meter.start,
        )
        usage = meter.stop()
        steady = result.steady or result.total
        latency = {"p50": float(steady.p50_ms), "p99": float(steady.p99_ms)}
        return Run(records, steady.records_per_s, steady.mb_per_s, usage, latency)

    return run


def rdkafka_at_rate(rate: int) -> Workload:
    def run(side: Side, topic: str) -> Run:
        meter = _metered(side)
        meter.start()
        measured = latencies_at_rate(
            side.bootstrap, topic, PARTITIONS, rate, LATENCY_WARMUP_S + LATENCY_S, PERF_SIZE
        )
        usage = meter.stop()
        records = int(rate * (LATENCY_WARMUP_S + LATENCY_S))  # sent, the warm-up's too
        latency = {
            f"{kind} {name}": percentile(samples, fraction)
            for kind, samples in (
                ("publish", measured.publish_ms),
                ("end-to-end", measured.end_to_end_ms),
            )
            for name, fraction in (("p50", 0.5), ("p99", 0.99))
        }
        # A record not back in time counts as not sent: the run did not keep the rate.
        timed = int(rate * LATENCY_S)
        kept_per_s = measured.sent_per_s * (timed - measured.missing) / timed
        return Run(records, kept_per_s, kept_per_s * PERF_SIZE / MIB, usage, latency)

    return run


Runs = dict[str, dict[str, list[Run]]]  # workload -> side name -> its runs


def _rounds(
    sides: Sequence[Side], workloads: dict[str, Workload], phase: str, rounds: int = ROUNDS
) -> Runs:
    """`rounds` of every workload on every side. A workload's topic is its client's (the first
    word of its name) for the round: perf-test consume reads what perf-test produce wrote."""
    runs: Runs = {name: {side.name: [] for side in sides} for name in workloads}
    for round_index in range(rounds):
        order = sides if round_index % 2 == 0 else list(reversed(sides))
        topics = {name: f"{phase}-{name.split()[0]}-r{round_index}" for name in workloads}
        for topic in sorted(set(topics.values())):
            for side in sides:
                side.create_topic(topic, PARTITIONS)
        for name, workload in workloads.items():
            for side in order:
                run = workload(side, topics[name])
                runs[name][side.name].append(run)
                _print_run(f"{phase} {round_index + 1}", name, side, run)
    return runs


def _print_run(round_name: str, name: str, side: Side, run: Run) -> None:
    latencies = " ".join(f"{key} {ms:.1f} ms" for key, ms in run.latency_ms.items())
    print(
        f"# {round_name:12s} {name:24s} {side.name:16s} {run.records_per_s:9.0f} rec/s "
        f"CPU {run.usage.cpu_s:6.2f} s RSS {run.usage.peak_rss_bytes / MIB:5.0f} MiB {latencies}",
        flush=True,
    )


def _fixed_rate(runs: Runs) -> int:
    if FIXED_RATE > 0:
        return FIXED_RATE
    produced = runs[PERF_PRODUCE].values()
    rate = min(max(run.records_per_s for run in side_runs) for side_runs in produced) / 2
    # Two significant figures: a rate a reader can repeat with SEGLOG_BENCH_KAFKA_RATE.
    magnitude = 10 ** max(0, len(str(int(rate))) - 2)
    return max(10, int(rate // magnitude * magnitude))


PERF_PRODUCE = "perf-test produce 1 KiB"
THROUGHPUT: dict[str, Workload] = {
    PERF_PRODUCE: perf_produce,
    "perf-test consume 1 KiB": perf_consume,
    "librdkafka produce 100 B": rdkafka_produce,
    "librdkafka consume 100 B": rdkafka_consume,
}


def _report_usage(
    report: Callable[..., None], name: str, ours: list[Run], theirs: list[Run]
) -> None:
    report(
        f"{name} CPU (s/M rec)",
        statistics.median(run.cpu_s_per_m_records for run in ours),
        statistics.median(run.cpu_s_per_m_records for run in theirs),
        "s/M rec",
        1.0,
        higher_is_better=False,
    )
    report(
        f"{name} peak RSS (MiB)",
        max(run.usage.peak_rss_bytes for run in ours) / MIB,
        max(run.usage.peak_rss_bytes for run in theirs) / MIB,
        "MiB",
        None,
        higher_is_better=False,
    )


def _report_throughput(
    report: Callable[..., None], label: str, runs: Runs, ours: Side, theirs: Side
) -> None:
    for workload, by_side in runs.items():
        mine, kafka = by_side[ours.name], by_side[theirs.name]
        name = f"{label} {workload}"
        best_mine = max(mine, key=lambda run: run.records_per_s)
        best_kafka = max(kafka, key=lambda run: run.records_per_s)
        report(
            f"{name} (k rec/s)",
            best_mine.records_per_s / 1e3,
            best_kafka.records_per_s / 1e3,
            "k rec/s",
            1.0,
        )
        report(f"{name} (MB/s)", best_mine.mb_per_s, best_kafka.mb_per_s, "MB/s", None)
        if best_mine.start_ms is not None and best_kafka.start_ms is not None:
            report(
                f"{name} {best_mine.start_name} (ms)",
                min(run.start_ms or 0.0 for run in mine),
                min(run.start_ms or 0.0 for run in kafka),
                "ms",
                None,
                higher_is_better=False,
            )
        _report_usage(report, name, mine, theirs=kafka)


def _report_latency(
    report: Callable[..., None], label: str, rate: int, runs: Runs, ours: Side, theirs: Side
) -> None:
    for workload, by_side in runs.items():
        name = f"{label} {workload}"
        mine, kafka = by_side[ours.name], by_side[theirs.name]
        for side, side_runs in ((ours, mine), (theirs, kafka)):
            short = [run for run in side_runs if run.records_per_s < SUSTAINED_SHARE * rate]
            if short:
                rates = ", ".join(f"{run.records_per_s:.0f}/s" for run in short)
                print(f"# {name}: {side.name} fell short of the rate in {len(short)} runs: {rates}")
        p99_key = next(key for key in mine[0].latency_ms if key.endswith("p99"))
        best_mine = min(mine, key=lambda run: run.latency_ms[p99_key])
        best_kafka = min(kafka, key=lambda run: run.latency_ms[p99_key])
        for key in best_mine.latency_ms:
            report(
                f"{name} {key} (ms)",
                best_mine.latency_ms[key],
                best_kafka.latency_ms[key],
                "ms",
                1.0 if key.endswith("p99") else None,
                higher_is_better=False,
            )
        _report_usage(report, name, mine, theirs=kafka)


def _report_idle(report: Callable[..., None], label: str, ours: Side, theirs: Side) -> None:
    """Both systems idle together for IDLE_S: what each burns with no client (heartbeats,
    replica fetchers' polls, a JVM's housekeeping), part of every run's CPU figure below."""
    meters = [UsageMeter(side.pids) for side in (ours, theirs)]
    for meter in meters:
        meter.start()
    time.sleep(IDLE_S)  # the measurement itself: a stretch with nothing to do
    mine, kafka = (meter.stop() for meter in meters)
    report(
        f"{label} idle CPU (% of a core)",
        mine.cpu_s / IDLE_S * 100,
        kafka.cpu_s / IDLE_S * 100,
        "%",
        None,
        higher_is_better=False,
    )
    report(
        f"{label} idle RSS (MiB)",
        mine.peak_rss_bytes / MIB,
        kafka.peak_rss_bytes / MIB,
        "MiB",
        None,
        higher_is_better=False,
    )


def compare(report: Callable[..., None], ours: Side, theirs: Side, label: str) -> None:
    sides = [ours, theirs]
    # One round of every throughput workload first, not counted: Kafka's brokers compile their
    # hot paths in their first minutes (round 1 without it: 11.5-11.7 s of broker CPU for
    # 10,000 perf-test records, against 5.7-9.2 s in rounds 2 and 3), and both sides' page
    # caches, connections and groups' coordinators settle.
    _rounds(sides, THROUGHPUT, "warm-up", rounds=1)
    _report_idle(report, label, ours, theirs)
    runs = _rounds(sides, THROUGHPUT, "throughput")
    rate = _fixed_rate(runs)
    print(f"# fixed rate for the latency runs: {rate} records/s of {PERF_SIZE} B", flush=True)
    at_rate = {
        f"perf-test {PERF_SIZE // 1024} KiB at {rate}/s": perf_at_rate(rate),
        f"librdkafka {PERF_SIZE // 1024} KiB at {rate}/s": rdkafka_at_rate(rate),
    }
    latency_runs = _rounds(sides, at_rate, "latency")
    _report_throughput(report, label, runs, ours, theirs)
    _report_latency(report, label, rate, latency_runs, ours, theirs)
