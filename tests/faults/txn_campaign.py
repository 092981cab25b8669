"""The fault campaign's transactional workload (`--workload transactions`): what differs from
the records workload is who the clients are (tests/faults/txn_workload.py: librdkafka's
transactional producers, read_committed and read_uncommitted readers observing the last
stable offsets), where they connect (the gateways' Kafka port, behind Kafka fault proxies
when answer faults are on), how the coordinator is set (timed-out transactions found every
second, so a killed producer's transaction ends within the campaign) and who judges
(tests/faults/txn_checker.py). The faults, the cluster and the cycles are the campaign's."""

from __future__ import annotations

from pathlib import Path

from tests.faults.clients import ClientProcess, Clients
from tests.faults.cluster import PARTITIONS, TOPIC, Cluster
from tests.faults.txn_workload import TRANSACTION_TIMEOUT_MS

MODULE = "tests.faults.txn_workload"
# Timed-out transactions (a producer SIGKILLed in one) looked for every second.
TIMED_OUT_CHECK_MS = 1000
GATEWAY_ARGS = (
    "--transaction-abort-timed-out-transaction-cleanup-interval-ms",
    str(TIMED_OUT_CHECK_MS),
    # A few partitions of __transaction_state (50 by default) on three nodes under faults.
    "--transaction-state-log-num-partitions",
    "3",
)
# Once the producers are stopped, every partition must be stable within this: a transaction
# left open times out and the coordinator aborts it (markers retried through faults' ends).
STABLE_WAIT_S = 3 * (TRANSACTION_TIMEOUT_MS + TIMED_OUT_CHECK_MS) / 1000 + 30
ABORT_PROBABILITY = 0.25
INTERVAL_MS = 20


def clients(root: Path, cluster: Cluster, history_dir: Path) -> Clients:
    """Transactional producers; consumers alternately read_committed and read_uncommitted."""
    common = [
        "--bootstrap",
        ",".join(cluster.kafka_client_addresses),
        "--topic",
        TOPIC,
        "--partitions",
        str(PARTITIONS),
        "--history-dir",
        str(history_dir),
    ]
    return Clients(
        root,
        producer_args=[
            *common,
            "--abort-probability",
            str(ABORT_PROBABILITY),
            "--interval-ms",
            str(INTERVAL_MS),
        ],
        consumer_args=common,
        module=MODULE,
        producer_variants=((),),
        consumer_variants=(
            ("--isolation", "read_committed"),
            ("--isolation", "read_uncommitted"),
        ),
    )


def final_reader(root: Path, cluster: Cluster, history_dir: Path, read_s: float) -> ClientProcess:
    """Waits for every partition to be stable (recorded), then reads it all at both levels."""
    return ClientProcess(
        root,
        "final-read",
        "final-reader",
        [
            "--bootstrap",
            ",".join(cluster.kafka_client_addresses),
            "--topic",
            TOPIC,
            "--partitions",
            str(PARTITIONS),
            "--history-dir",
            str(history_dir),
            "--stable-wait-s",
            str(STABLE_WAIT_S),
            "--max-seconds",
            str(read_s),
        ],
        MODULE,
    )
