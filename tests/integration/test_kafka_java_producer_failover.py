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
import os
import re
import signal
import subprocess
import threading
import time

import confluent_kafka
import pytest

from devtools import apache_kafka
from devtools.apache_kafka import LOG4J2_PROPERTIES, java_command
from tests.integration.test_kafka_group_failover import (
    PARTITIONS,
    TIMEOUT_S,
    TOPIC,
    ProcessCluster,
)
from tests.kafka_wire import metadata
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(240)

VERIFIABLE_PRODUCER = "org.apache.kafka.tools.VerifiableProducer"
# The Sender's debug line for each partition answered NOT_LEADER_OR_FOLLOWER names the
# leader hint it read (Sender.completeBatch: "For {}, received error {}, with
# leaderIdAndEpoch {}"); warnings and errors of the rest, as the other Java tests log.
SENDER_DEBUG = (
    LOG4J2_PROPERTIES
    + "logger.sender.name = org.apache.kafka.clients.producer.internals.Sender\n"
    + "logger.sender.level = debug\n"
)
RECORDS = 4000
# records/s: the run lasts ~10 s, the kill lands ~2 s in, so the producer goes on writing the
# killed leader's partition through the registry's 2 s session timeout and after it.
THROUGHPUT = 400


def stalled(acknowledged: list[int], quiet_s: float = 0.5):
    """A condition: no record acknowledged for `quiet_s` (the producer waits on something)."""
    seen = [len(acknowledged), time.monotonic()]

    def check() -> bool:
        if len(acknowledged) != seen[0]:
            seen[:] = [len(acknowledged), time.monotonic()]
            return False
        return time.monotonic() - seen[1] >= quiet_s

    return check


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


@pytest.mark.long  # librdkafka's through a leader's death stays (test_kafka_failover.py)
def test_kafkas_java_producer_writes_on_through_a_leader_sigkill(tmp_path):
    assert apache_kafka.installed(), apache_kafka.INSTALL_HINT
    cluster = ProcessCluster(tmp_path, secured=False)
    producer = None
    try:
        cluster.admin.create_topic(TOPIC, PARTITIONS, 3)
        assert wait_until(cluster.in_sync, TIMEOUT_S)
        # VerifiableProducer sets retries=0 unless told otherwise: a producer as applications
        # run it (Kafka's defaults: retried until delivery.timeout.ms, idempotent).
        config = tmp_path / "producer.properties"
        config.write_text("retries=2147483647\nenable.idempotence=true\n")
        log4j2 = tmp_path / "log4j2.properties"
        log4j2.write_text(SENDER_DEBUG)
        # Its log to a file: a pipe nobody reads while it runs would fill and stall it.
        log = tmp_path / "producer.log"
        with log.open("wb") as log_file:
            producer = subprocess.Popen(
                java_command(
                    VERIFIABLE_PRODUCER,
                    *("--bootstrap-server", cluster.kafka_address, "--topic", TOPIC),
                    *("--max-messages", str(RECORDS), "--throughput", str(THROUGHPUT)),
                    # Keys spread every second's records over both partitions, the killed
                    # leader's among them (unkeyed, the sticky partitioner may avoid it).
                    *("--acks", "-1", "--repeating-keys", "16", "--command-config", str(config)),
                    jvm_options=("-Xmx256m", f"-Dlog4j2.configurationFile={log4j2}"),
                ),
                stdout=subprocess.PIPE,
                stderr=log_file,
            )
        acknowledged: list[int] = []
        failed: list[dict] = []
        printed: list[str] = []  # anything else on stdout, for the failure message

        def collect() -> None:
            assert producer is not None and producer.stdout is not None
            for line in producer.stdout:  # read to the end: a full pipe would stall it
                try:
                    event = json.loads(line)
                except ValueError:
                    printed.append(line.decode(errors="replace"))
                    continue
                if event.get("name") == "producer_send_success":
                    acknowledged.append(int(event["value"]))
                elif event.get("name") == "producer_send_error":
                    failed.append(event)

        reader = threading.Thread(target=collect)
        reader.start()
        assert wait_until(
            lambda: len(acknowledged) >= RECORDS // 5 or producer.poll() is not None, TIMEOUT_S
        )
        victim = cluster.leader_of(0)
        # The leader as Kafka's clients see it (kafka/brokers.py: its storage leader's id).
        (partition,) = [
            p
            for p in metadata(cluster.kafka_address, TOPIC).topics[0].partitions
            if p.partition_index == 0
        ]
        # Frozen first, so that the producer's next request (both partitions' batches: one
        # connection, served one request at a time) is waiting on it when it dies, and is
        # answered NOT_LEADER_OR_FOLLOWER; killed while idle, the gateway may see it gone
        # before any request meets it, and hold the requests for the new leader instead.
        os.kill(cluster.nodes[victim].pid, signal.SIGSTOP)
        assert wait_until(stalled(acknowledged), TIMEOUT_S)
        cluster.nodes[victim].kill()  # SIGKILL: no controlled shutdown
        producer.wait(TIMEOUT_S * 2)
        reader.join(TIMEOUT_S)
        errors = log.read_bytes()
        assert producer.returncode == 0, (printed[-20:], errors.decode()[-3000:])
        assert not failed, [(f.get("exception"), f.get("message")) for f in failed[:3]]
        assert sorted(acknowledged) == list(range(RECORDS))
        assert wait_until(lambda: cluster.leader_of(0) != victim, TIMEOUT_S)
        successor = cluster.leader_of(0)
        # The answers that said NOT_LEADER_OR_FOLLOWER (KIP-951, Produce v10+) named the
        # partition's leader as Metadata did, at its epoch or a later one; or no leader (-1)
        # in the moment after the dead node's session lapsed and before a successor was
        # elected, when Metadata names none either; or, once one is elected, the successor
        # at a later epoch: a produce still sent to the dead leader's lane is answered there,
        # as that broker would answer it (kafka/lane_leaders.py), naming its successor.
        # Before v10 the client reads no hint (leaderId=-1).
        hinted = f"For {TOPIC}-0, received error NOT_LEADER_OR_FOLLOWER, with leaderIdAndEpoch "
        found = [
            re.search(r"leaderId=(-?\d+), leaderEpoch=(-?\d+)", line)
            for line in errors.decode().splitlines()
            if hinted in line
        ]
        # Whether a request meets the dead leader at all is timing (the gateway may learn
        # the node is gone between two requests and hold none for it): the hints are checked
        # when there are some, in most runs; tests/integration/test_kafka_produce_versions.py
        # checks them on the wire every time.
        hints = [(int(h[1]), int(h[2])) if h else None for h in found]
        if hints:
            assert any(h is not None and h[0] == partition.leader_id for h in hints), hints[:5]

        def expected(hint: tuple[int, int] | None) -> bool:
            if hint is None or hint[1] < partition.leader_epoch:
                return False
            leader, epoch = hint
            return leader in (partition.leader_id, -1) or (
                leader == successor and epoch > partition.leader_epoch
            )

        assert all(expected(h) for h in hints), [h for h in hints if not expected(h)][:5]
        values = read_back(cluster.kafka_address, set(acknowledged))
        # Each acknowledged record once: the idempotent producer's retries wrote no copy.
        assert sorted(values) == list(range(RECORDS))
    finally:
        if producer is not None and producer.poll() is None:
            producer.kill()
            producer.wait(TIMEOUT_S)
        cluster.close()
