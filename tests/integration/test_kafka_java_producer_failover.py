"""Kafka's own Java producer (VerifiableProducer, from the jars `make kafka` brings: Kafka
4.3.1's client, idempotent with acks=all by default, Produce up to the highest version the
listener advertises) writing through a SIGKILL of the node leading one of its partitions.

Until the registry elects a successor the gateway answers that partition
NOT_LEADER_OR_FOLLOWER, naming the leader it still has (the dead node, at the epoch the
client holds: ignored by the client's Metadata.updatePartitionLeadership, which then refreshes
metadata); once a successor is elected, the answer names it at its new epoch with its lane's
endpoint (KIP-951) and the client moves there. Every record the producer acknowledged must
then be readable, each once."""

from __future__ import annotations

import json
import subprocess
import threading

import confluent_kafka
import pytest

from devtools import apache_kafka
from devtools.apache_kafka import java_command, log4j2_config
from tests.integration.test_kafka_group_failover import (
    PARTITIONS,
    TIMEOUT_S,
    TOPIC,
    ProcessCluster,
)
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(240)

VERIFIABLE_PRODUCER = "org.apache.kafka.tools.VerifiableProducer"
RECORDS = 3000
THROUGHPUT = 400  # records/s: the kill lands mid-run, the run lasts ~8 s


def read_back(bootstrap: str, wanted: set[int]) -> list[int]:
    """Every value in the topic (from offset 0 of each partition) until `wanted` is read."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "java-producer-check",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([confluent_kafka.TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    values: list[int] = []
    try:

        def read() -> bool:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(int(message.value()))
            return wanted <= set(values)

        wait_until(read, TIMEOUT_S, interval_s=0)
    finally:
        consumer.close()
    return values


def test_kafkas_java_producer_writes_on_through_a_leader_sigkill(tmp_path):
    assert apache_kafka.installed(), apache_kafka.INSTALL_HINT
    cluster = ProcessCluster(tmp_path, secured=False)
    producer = None
    try:
        cluster.admin.create_topic(TOPIC, PARTITIONS, 3)
        assert wait_until(cluster.in_sync, TIMEOUT_S)
        producer = subprocess.Popen(
            java_command(
                VERIFIABLE_PRODUCER,
                *("--bootstrap-server", cluster.kafka_address, "--topic", TOPIC),
                *("--max-messages", str(RECORDS), "--throughput", str(THROUGHPUT)),
                *("--acks", "-1"),
                jvm_options=("-Xmx256m", f"-Dlog4j2.configurationFile={log4j2_config()}"),
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        acknowledged: list[int] = []
        failed: list[dict] = []

        def collect() -> None:
            assert producer is not None and producer.stdout is not None
            for line in producer.stdout:
                event = json.loads(line)
                if event.get("name") == "producer_send_success":
                    acknowledged.append(int(event["value"]))
                elif event.get("name") == "producer_send_error":
                    failed.append(event)

        reader = threading.Thread(target=collect)
        reader.start()
        assert wait_until(
            lambda: len(acknowledged) >= RECORDS // 4 or producer.poll() is not None, TIMEOUT_S
        )
        victim = cluster.leader_of(0)
        cluster.nodes[victim].kill()  # SIGKILL: no controlled shutdown
        producer.wait(TIMEOUT_S * 2)
        _, errors = producer.communicate(timeout=TIMEOUT_S)
        reader.join(TIMEOUT_S)
        assert producer.returncode == 0, errors.decode()[-3000:]
        assert not failed, failed[:5]
        assert sorted(acknowledged) == list(range(RECORDS))
        assert cluster.leader_of(0) != victim
        values = read_back(cluster.kafka_address, set(acknowledged))
        # Each acknowledged record once: the idempotent producer's retries wrote no copy.
        assert sorted(values) == list(range(RECORDS))
    finally:
        if producer is not None and producer.poll() is None:
            producer.kill()
            producer.wait(TIMEOUT_S)
        cluster.close()
