"""The latency group's drivers at a tiny size, so they cannot rot: seglog as the benchmark
runs it (a gateway and three nodes as processes, with a cluster secret; by its own client, and
by librdkafka through the gateway's Kafka listener) and Apache Kafka (one broker), each
driven at a low rate with its consumer in a process of its own; every record sent after the
warm-up is timed both until acknowledged and until the consumer had it."""

import gc
from pathlib import Path

import confluent_kafka.admin
import pytest

import bench.timing
from bench.cluster import CLUSTER_SECRET_ENV
from bench.latency import (
    KAFKA_WARM_P50_LIMIT_MS,
    MAX_WARM_UP_RUNS,
    MIN_INSYNC,
    NODES,
    WARM_UP_RATE,
    _compare,
    climbed_by_both,
    kafka_is_a_baseline,
    seglog_cluster,
    warm_up,
    warmed_up,
)
from bench.latency_drivers import MAX_STOLEN_SHARE, WARMUP_S, Run, kafka_run, seglog_run
from bench.timing import StolenTime, settled_first
from devtools.apache_kafka import KafkaBrokers
from seglog.client.admin import Admin

RATE_PER_S = 100
DURATION_S = WARMUP_S + 1.0
PARTITIONS = 2


def _assert_timed_each_record(run: Run) -> None:
    # About RATE_PER_S records were sent after the warm-up; each was acknowledged and
    # received once, and the two lists are of the same records.
    assert len(run.publish_ms) > RATE_PER_S // 2
    assert len(run.end_to_end_ms) == len(run.publish_ms)
    assert min(run.publish_ms) > 0 and min(run.end_to_end_ms) > 0


@pytest.mark.long  # a benchmark's run
def test_seglog_run_times_every_record_to_its_ack_and_to_the_other_process_consumer(
    tmp_path: Path,
) -> None:
    with seglog_cluster(tmp_path / "seglog", env=CLUSTER_SECRET_ENV) as cluster:
        assert cluster.kafka_bootstrap is None
        with Admin(cluster.gateway) as admin:
            admin.create_topic(
                "latency", PARTITIONS, NODES, {"min.insync.replicas": str(MIN_INSYNC)}
            )
        run = seglog_run(cluster.gateway, "latency", PARTITIONS, -1, RATE_PER_S, DURATION_S)
    _assert_timed_each_record(run)


@pytest.mark.long  # a benchmark's run
def test_librdkafka_through_the_gateway_kafka_listener_times_every_record(
    tmp_path: Path,
) -> None:
    with seglog_cluster(
        tmp_path / "seglog", env=CLUSTER_SECRET_ENV, kafka_listener=True
    ) as cluster:
        assert cluster.kafka_bootstrap is not None
        with Admin(cluster.gateway) as admin:
            admin.create_topic(
                "latency", PARTITIONS, NODES, {"min.insync.replicas": str(MIN_INSYNC)}
            )
        run = kafka_run(cluster.kafka_bootstrap, "latency", PARTITIONS, -1, RATE_PER_S, DURATION_S)
    _assert_timed_each_record(run)


@pytest.mark.long  # a benchmark's run
def test_kafka_run_times_every_record_to_its_ack_and_to_the_other_process_consumer(
    tmp_path: Path,
) -> None:
    with KafkaBrokers(tmp_path / "kafka", brokers=1) as kafka:
        admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": kafka.bootstrap})
        topic = confluent_kafka.admin.NewTopic("latency", PARTITIONS, 1)
        admin.create_topics([topic])["latency"].result(60)
        del admin  # before the broker stops: it would go on reconnecting
        run = kafka_run(kafka.bootstrap, "latency", PARTITIONS, 1, RATE_PER_S, DURATION_S)
    _assert_timed_each_record(run)


def test_warm_up_runs_until_the_publish_median_stops_improving() -> None:
    # A JVM's medians fall run after run while it compiles; warm-up goes on until a run is
    # within SETTLED_RATIO of the one before it. An interpreter's settle after the minimum.
    kafka = [17.1, 8.0, 3.4, 2.4, 2.0]
    assert [warmed_up(kafka[:n]) for n in range(1, 6)] == [False, False, False, False, True]
    assert warmed_up([13.2, 12.9, 13.1])
    assert not warmed_up([13.2, 12.9])
    assert warmed_up([9.0, 5.0, 6.5])  # slower than before: noise, not a compiler at work


def test_kafka_warms_up_past_a_plateau_until_it_answers_as_a_warm_broker() -> None:
    medians = iter([114.2, 76.3, 47.0, 31.2, 28.9, 18.0, 4.4, 2.8, 2.2, 2.1, 2.2, 2.0])

    def plateau(acks: int, rate: int) -> Run:
        median = next(medians)
        return Run([median, median], [], 0.0)

    # Settled by the ratio alone at 28.9; below the limit and settled only at 2.1.
    warmed = warm_up(plateau, KAFKA_WARM_P50_LIMIT_MS)
    assert warmed == [114.2, 76.3, 47.0, 31.2, 28.9, 18.0, 4.4, 2.8, 2.2, 2.1]


def test_kafka_is_judged_against_only_once_it_warmed_up_where_a_warm_broker_answers() -> None:
    assert kafka_is_a_baseline([17.1, 8.0, 3.4, 2.4, 2.0])
    assert not kafka_is_a_baseline([114.2, 76.3, 47.0, 31.2, 28.9])  # settled, but slow
    assert not kafka_is_a_baseline([])


def test_warm_up_stops_at_its_bound_when_the_side_keeps_getting_faster() -> None:
    medians = iter(100.0 / 2**n for n in range(20))
    asked: list[tuple[int, int]] = []

    def halving(acks: int, rate: int) -> Run:
        asked.append((acks, rate))
        median = next(medians)
        return Run([median, median], [], 0.0)

    assert len(warm_up(halving)) == MAX_WARM_UP_RUNS
    assert asked == [(-1, WARM_UP_RATE)] * MAX_WARM_UP_RUNS


def test_stolen_time_is_a_share_of_the_cpu_time_that_passed(monkeypatch) -> None:
    ticks = iter([(100, 10_000), (150, 11_000)])
    monkeypatch.setattr(bench.timing, "_cpu_ticks", lambda: next(ticks))
    assert StolenTime().share() == 50 / 1_000
    # Where the kernel counts no steal (or /proc/stat is missing), nothing is claimed.
    monkeypatch.setattr(bench.timing, "_cpu_ticks", lambda: None)
    assert StolenTime().share() is None


def test_stolen_time_reads_this_machines_counters() -> None:
    share = StolenTime().share()
    assert share is None or 0.0 <= share <= 1.0


def test_a_run_is_judged_only_when_the_host_left_the_cpu_alone() -> None:
    assert Run([1.0], [], 0.0).host_was_quiet  # steal not counted: judged
    assert Run([1.0], [], 0.0, MAX_STOLEN_SHARE).host_was_quiet
    assert not Run([1.0], [], 0.0, MAX_STOLEN_SHARE * 2).host_was_quiet


def _targets(ours: Run, kafka: Run) -> dict[str, float | None]:
    """Each figure `_compare` reports for acks=all at 5,000/s, with its target (None: printed,
    not judged)."""
    reported: dict[str, float | None] = {}

    def report(name, value, baseline, unit, target, higher_is_better=True) -> None:
        reported[name] = target

    floor = Run([1.0] * 100, [], 0.0)
    _compare(report, "all", 5_000, ours, kafka, floor, True)
    return reported


def test_rows_measured_while_the_host_stole_cpu_are_printed_not_judged() -> None:
    samples = [float(i % 10 + 1) for i in range(1000)]
    quiet = Run(samples, samples, 0.0, 0.0)
    noisy = Run(samples, samples, 0.0, MAX_STOLEN_SHARE * 2)
    judged = _targets(quiet, quiet)
    assert judged["latency acks=all 5000/s publish p99 vs Kafka (ms)"] == 1.5
    assert judged["latency acks=all 5000/s publish p99 vs target (ms)"] == 1.0
    assert judged["latency acks=all 5000/s publish p99.9 vs own p99 (ms)"] == 2.0
    # Ours noisy: nothing of ours is judged. Kafka's noisy: the comparison with it is not.
    assert all(target is None for target in _targets(noisy, quiet).values())
    against_noisy_kafka = _targets(quiet, noisy)
    assert against_noisy_kafka["latency acks=all 5000/s publish p99 vs Kafka (ms)"] is None
    assert against_noisy_kafka["latency acks=all 5000/s publish p99 vs target (ms)"] == 1.0


def test_rates_past_the_fixed_ones_are_judged_where_both_sides_sustained_them() -> None:
    def sustained() -> Run:
        return Run([1.0], [1.0], 0.0)

    late = Run([1.0], [1.0], 1.0)  # its sender fell behind
    ours = {5_000: sustained(), 30_000: sustained(), 40_000: sustained(), 60_000: late}
    theirs = {5_000: sustained(), 30_000: sustained(), 60_000: sustained(), 80_000: sustained()}
    # 5,000/s is a fixed rate, judged anyway; 40,000/s Kafka never ran (its ladder stopped
    # elsewhere), 60,000/s ours did not sustain, 80,000/s ours never reached.
    assert climbed_by_both(ours, theirs) == [30_000]


def test_a_runs_samples_are_nothing_the_garbage_collector_walks() -> None:
    # The bench keeps every run of both sides in the process whose clients it times: as
    # lists, a full collection walked millions of items while a client was being timed.
    run = Run([1.0] * 1000, [2.0] * 1000, 0.0)
    # What a collection visits of an object is what gc.get_referents answers: a list's items.
    assert len(gc.get_referents(run.publish_ms)) + len(gc.get_referents(run.end_to_end_ms)) <= 2
    assert list(run.publish_ms) == [1.0] * 1000 and max(run.end_to_end_ms) == 2.0
    assert run.sustained


def test_each_run_starts_with_what_came_before_out_of_the_collectors_view() -> None:
    # What earlier runs and the bench left behind must not be walked by a full collection
    # while a client is timed: by the time the runner runs, it is frozen, and what the run
    # itself makes is still collected as usual.
    class Kept:
        pass

    earlier = Kept()
    seen: list[tuple[int, int, bool, bool]] = []

    def runner(acks: int, rate: int) -> Run:
        made_by_the_run = Kept()
        walked = {id(o) for o in gc.get_objects()}
        seen.append((acks, rate, id(earlier) in walked, id(made_by_the_run) in walked))
        return Run([1.0], [1.0], 0.0)

    try:
        settled_first(runner)(-1, 5_000)
    finally:
        gc.unfreeze()
    assert seen == [(-1, 5_000, False, True)]
