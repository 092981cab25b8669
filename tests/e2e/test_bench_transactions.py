"""The transactions group's harness at a tiny size, so it cannot rot: seglog as the benchmark
starts it (gateway and storage node as processes, the Kafka listener) and Apache Kafka (one
broker), librdkafka's transactional and idempotent producers driven by the group's own code,
every figure reported, and what the transactional runs timed is there for a read_committed
consumer: each transaction committed, none left open or lost."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from bench.kafka_protocol import apache_kafka, seglog
from bench.transaction_clients import committed_records
from bench.transactions import (
    PARTITIONS,
    PER_TRANSACTION,
    PRODUCERS,
    compare_transactions,
    run_topic,
    transactional_run,
)

TIMEOUT_S = 60.0
RECORDS = 2 * PER_TRANSACTION  # two timed transactions a run


@pytest.mark.long  # a benchmark's run
def test_seglog_transactions_are_timed_beside_its_idempotent_producer_and_committed(
    tmp_path: Path,
) -> None:
    with seglog(tmp_path / "seglog", 1) as ours:
        # The baseline side is seglog again, under another name: the harness, not Kafka.
        theirs = dataclasses.replace(ours, name="baseline")
        reported: dict[str, tuple[float, float, float | None]] = {}

        def report(name, figure, baseline, unit, target, *, higher_is_better=True) -> None:
            reported[name] = (figure, baseline, target)

        compare_transactions(report, ours, theirs, "tiny", rounds_counted=1, records=RECORDS)
        # The plan: seglog transactional and idempotent, then the baseline's, then PRODUCERS
        # producers at once (seglog transactional and idempotent, the baseline's
        # transactional). Each transactional producer committed its warm-up transaction and
        # its share of RECORDS (a transaction at least); each idempotent one sent its warm-up
        # (a record a partition) and its share.
        share = max(1, RECORDS // PRODUCERS // PER_TRANSACTION) * PER_TRANSACTION
        many_transactional = (share + PER_TRANSACTION) * PRODUCERS
        many_idempotent = (RECORDS // PRODUCERS + PARTITIONS) * PRODUCERS
        expected = {
            run_topic(phase, 0, position, workload): count
            for phase in ("warm-up", "txn")
            for position, workload, count in (
                (0, "transactional", RECORDS + PER_TRANSACTION),
                (1, "idempotent", RECORDS + PARTITIONS),
                (2, "transactional", RECORDS + PER_TRANSACTION),
                (3, "idempotent", RECORDS + PARTITIONS),
                (4, f"transactional-x{PRODUCERS}", many_transactional),
                (5, f"idempotent-x{PRODUCERS}", many_idempotent),
                (6, f"transactional-x{PRODUCERS}", many_transactional),
            )
        }
        committed = committed_records(ours.bootstrap, list(expected), PARTITIONS, TIMEOUT_S)
        assert committed == expected
    name = f"transactions tiny 1 KiB x{PER_TRANSACTION}/txn"
    targets = {key: target for key, (_, _, target) in reported.items()}
    assert targets == {
        f"{name} vs idempotent (k rec/s)": 0.5,
        f"{name} vs Kafka (k rec/s)": 1.0,
        f"{name} Kafka's own vs its idempotent (k rec/s)": None,
        f"{name} vs Kafka CPU (s/M rec)": 1.0,
        f"{name} vs idempotent CPU (s/M rec)": None,
        f"{name} vs Kafka peak RSS (MiB)": None,
        # Beside the single producer's, judged by nothing.
        f"{name} {PRODUCERS} producers vs {PRODUCERS} idempotent (k rec/s)": None,
        f"{name} {PRODUCERS} producers vs Kafka's {PRODUCERS} (k rec/s)": None,
        f"{name} {PRODUCERS} producers vs Kafka's {PRODUCERS} CPU (s/M rec)": None,
    }
    assert all(figure > 0 and baseline > 0 for figure, baseline, _ in reported.values())


@pytest.mark.long  # a benchmark's run
def test_kafka_transactional_run_commits_every_transaction(tmp_path: Path) -> None:
    with apache_kafka(tmp_path / "kafka", 1) as kafka:
        kafka.create_topic("txn", PARTITIONS)
        run = transactional_run(kafka, "txn", RECORDS)
        assert run.records == RECORDS + PER_TRANSACTION and run.records_per_s > 0
        assert run.usage.cpu_s > 0 and run.usage.peak_rss_bytes > 0  # the broker's, measured
        committed = committed_records(kafka.bootstrap, ["txn"], PARTITIONS, TIMEOUT_S)
        assert committed == {"txn": RECORDS + PER_TRANSACTION}  # the warm-up transaction's too
