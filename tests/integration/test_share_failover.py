"""Kafka's own share consumer (KafkaShareConsumer from Kafka 4.3.1's jars, tests/java/
ShareProbe.java) in a share group of 4 over 2 partitions, on two gateways in etcd and three
nodes, while a partition leader's node is SIGKILLed and then the gateway holding the share
partitions: every record is delivered, none is delivered again once its acknowledgement was
confirmed, none is acknowledged twice, and no delivery count is ever repeated for a record
(a count lost in a failover would deliver it again under a count already used)."""

from __future__ import annotations

import subprocess
from collections import defaultdict
from pathlib import Path

import confluent_kafka
import pytest

from devtools.apache_kafka import INSTALL_HINT, installed, java_command, log4j2_config
from tests.multi_gateway import EtcdBackedCluster

# A minute of JVMs, etcd and kills: in make test-long; make test keeps test_share_gateways'
# holder SIGKILL (tests/integration/test_share_gateways.py).
pytestmark = [pytest.mark.timeout(420), pytest.mark.long]


@pytest.fixture(scope="module", autouse=True)
def kafka_jars() -> None:
    # make test installs Kafka's jars first: missing, the test fails rather than skips.
    assert installed(), INSTALL_HINT


PROBE = Path(__file__).resolve().parent.parent / "java" / "ShareProbe.java"
TOPIC, GROUP = "queue-failover", "g-failover"
PER_PARTITION = 150
PROBE_DEADLINE_MS = 240_000


def holder(cluster: EtcdBackedCluster) -> int:
    """The gateway holding the share partitions (it logs the state partition it gains)."""
    held = [
        i
        for i in range(len(cluster.gateways))
        if "coordinates share state partition" in cluster.log(f"gateway-{i}")
    ]
    assert len(held) == 1, held
    return held[0]


def confirmed_count(lines: list[str]) -> int:
    return sum(1 for line in lines if line.startswith("C "))


def test_a_share_group_of_four_survives_a_leader_and_a_gateway_killed(tmp_path):
    cluster = EtcdBackedCluster(
        tmp_path,
        gateway_args=(
            "--share-coordinator-state-topic-num-partitions", "1",
            "--share-auto-offset-reset", "earliest",
        ),
    )  # fmt: skip
    try:
        admin = cluster.admin(0)
        admin.create_topic(TOPIC, 2, 3)
        bootstrap = ",".join(cluster.kafka_addresses)
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
        for i in range(2 * PER_PARTITION):
            producer.produce(TOPIC, value=b"%d" % i, partition=i % 2)
        assert producer.flush(30) == 0
        process = subprocess.Popen(
            java_command(
                str(PROBE),
                bootstrap,
                GROUP,
                TOPIC,
                "accept-all",
                str(2 * PER_PARTITION),
                str(PROBE_DEADLINE_MS),
                jvm_options=(
                    f"-Dlog4j2.configurationFile={log4j2_config()}",
                    "-Xmx256m",
                    "-Dprobe.consumers=4",
                    "-Dprobe.maxPoll=5",
                    "-Dprobe.rebootstrapMs=5000",
                ),
            ),
            stdout=subprocess.PIPE,
            stderr=(tmp_path / "probe.err").open("wb"),
        )
        lines: list[str] = []
        try:
            assert process.stdout is not None
            for raw in process.stdout:
                lines.append(raw.decode().strip())
                if confirmed_count(lines) >= 40:
                    break
            (described,) = admin.describe_topics([TOPIC])
            leader = next(p.leader for p in described.partitions if p.partition == 0)
            cluster.nodes[leader].kill()
            node_killed_at = len(lines)
            for raw in process.stdout:
                lines.append(raw.decode().strip())
                if confirmed_count(lines[node_killed_at:]) >= 60:
                    break
            cluster.gateways[holder(cluster)].kill()
            gateway_killed_at = len(lines)
            lines += [raw.decode().strip() for raw in process.stdout]
            assert process.wait(timeout=60) == 0, (
                lines[-20:],
                (tmp_path / "probe.err").read_text(errors="replace")[-3000:],
            )
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        assert "DONE" in lines
        # The consumers went on past both kills.
        assert confirmed_count(lines[gateway_killed_at:]) > 0, lines[-20:]
        confirmed: set[tuple[int, int]] = set()
        counts: dict[tuple[int, int], list[int]] = defaultdict(list)
        for line in lines:
            kind, *fields = line.split()
            if kind == "D":
                record = (int(fields[4]), int(fields[1]))
                assert record not in confirmed, f"{record} delivered after its ack was confirmed"
                counts[record].append(int(fields[2]))
            elif kind == "C":
                record = (int(fields[2]), int(fields[1]))
                assert record not in confirmed, f"{record} acknowledged twice"
                confirmed.add(record)
        assert set(counts) == {(p, o) for p in (0, 1) for o in range(PER_PARTITION)}
        for record, seen in counts.items():
            assert len(seen) == len(set(seen)), f"{record}: delivery counts {seen} repeat"
    finally:
        cluster.close()
