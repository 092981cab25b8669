"""A topic whose replication factor is below min.insync.replicas (an RF1 topic on nodes
running with min.insync.replicas=2, as `make run`'s) is said at once: CreateTopics answers a
warning the Admin logs and returns and the CLI prints; Kafka's CreateTopics on the listener
creates it without a word, as Kafka 4.3's controller does; a producer meets
NOT_ENOUGH_REPLICAS, says it once and fails with it (not REQUEST_TIMED_OUT), and `seglog
produce` prints it, naming min.insync.replicas, within a second. Real gateway and nodes on
loopback."""

from __future__ import annotations

import io
import logging
import sys
import threading
import time

import pytest
from kafka.admin import KafkaAdminClient

from seglog.client import Producer
from seglog.errors import NotEnoughReplicasError
from tests.cluster import LocalCluster, cli_in_process
from tests.waiting import wait_until

# What a first refusal may take to reach the CLI's stderr, counted from the command's start
# (in this process: no interpreter start-up in it); measured at ~0.1 s here.
SAID_WITHIN_S = 1.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(
        tmp_path_factory.mktemp("min-isr"), nodes=2, node_configs={"min.insync.replicas": "2"}
    )
    yield c
    c.close()


def test_creating_a_topic_below_min_isr_warns_in_the_admin_and_the_cli(
    cluster, capsys, monkeypatch, caplog
):
    with caplog.at_level(logging.WARNING, logger="seglog.client.admin"):
        warning = cluster.admin.create_topic("thin", 1, 1)
    assert "replication factor 1 is below min.insync.replicas 2" in warning
    assert warning in caplog.text
    assert cluster.admin.create_topic("thick", 1, 2) == ""
    # The topic's own setting counts: RF2 with min.insync.replicas=3 can never be written.
    assert "min.insync.replicas 3" in cluster.admin.create_topic(
        "strict", 1, 2, configs={"min.insync.replicas": "3"}
    )

    code, out, err = cli_in_process(
        cluster, capsys, monkeypatch, "topics", "create", "thin-cli", "--replication-factor", "1"
    )
    assert code == 0, err
    assert "Created topic thin-cli." in out
    assert "replication factor 1 is below min.insync.replicas 2" in err, err

    # Kafka's CreateTopics answers as Kafka 4.3's controller (ReplicationControlManager.
    # createTopic has no such check): created, no error.
    admin = KafkaAdminClient(bootstrap_servers=cluster.kafka_address)
    try:
        response = admin.create_topics(
            {"thin-kafka": {"num_partitions": 1, "replication_factor": 1}}, raise_errors=False
        )
        assert [t["error_code"] for t in response["topics"]] == [0], response
    finally:
        admin.close()
    assert "thin-kafka" in cluster.admin.list_topics()


def test_a_producer_says_not_enough_replicas_once_and_fails_with_it(cluster, caplog):
    cluster.admin.create_topic("thin-produced", 1, 1)
    with (
        caplog.at_level(logging.INFO, logger="seglog.client.sender"),
        Producer(
            cluster.address, delivery_timeout_ms=2000, request_timeout_ms=1000, retry_backoff_ms=50
        ) as producer,
    ):
        future = producer.send("thin-produced", b"lost")
        with pytest.raises(NotEnoughReplicasError, match="min.insync.replicas is 2"):
            future.get(timeout=10)
    said = [
        r
        for r in caplog.records
        if r.name == "seglog.client.sender" and "NOT_ENOUGH_REPLICAS" in r.getMessage()
    ]
    assert len(said) == 1, [r.getMessage() for r in said]  # once, not once per attempt
    assert "min.insync.replicas" in said[0].getMessage()


def test_the_cli_producer_prints_not_enough_replicas_within_a_second(cluster, monkeypatch):
    cluster.admin.create_topic("thin-cli-produced", 1, 1)
    from seglog.cli.main import main

    stderr = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"a\nb\n")))
    codes: list[int] = []
    argv = [
        "produce",
        "thin-cli-produced",
        *("--property", "delivery.timeout.ms=3000", "--property", "request.timeout.ms=1000"),
        *("--bootstrap", cluster.address),
    ]
    started = time.monotonic()
    command = threading.Thread(target=lambda: codes.append(main(argv)), daemon=True)
    command.start()
    try:
        said = wait_until(lambda: "NOT_ENOUGH_REPLICAS" in stderr.getvalue(), SAID_WITHIN_S)
        elapsed_s = time.monotonic() - started
        assert said, f"nothing said in {SAID_WITHIN_S} s: {stderr.getvalue()!r}"
        print(f"NOT_ENOUGH_REPLICAS printed {elapsed_s:.3f} s after the command started")
        assert "min.insync.replicas" in stderr.getvalue()
    finally:
        command.join(timeout=15)
    assert codes == [1]
    last = stderr.getvalue().strip().splitlines()[-1]
    assert last.startswith("seglog: NOT_ENOUGH_REPLICAS:"), stderr.getvalue()
    assert "REQUEST_TIMED_OUT" not in stderr.getvalue()
