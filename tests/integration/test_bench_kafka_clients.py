"""The `kafka-protocol` benchmark's librdkafka consumer measurement (bench/kafka_clients.py) on
a real one-node cluster's Kafka listener: it times the read from its first batch to its last
record, and its last consume() call does not wait out the call's timeout for records that will
never come (which once added a flat second to both systems' runs and made them equal)."""

from __future__ import annotations

import pytest

from bench import kafka_clients
from tests.cluster import LocalCluster

TOPIC = "bench-consume"
PARTITIONS = 2
RECORDS = 2001  # not a multiple of the batch: the last call has fewer records left than it
BATCH = 500
# consume()'s timeout in the test: far above any read of these records on a loaded machine,
# so a last call that waited its timeout out (the bug) cannot pass for a slow read.
TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("bench-kafka-clients"), nodes=1)
    c.admin.create_topic(TOPIC, PARTITIONS)
    kafka_clients.produce_seconds(c.kafka_address, TOPIC, RECORDS - 1, b"v" * 100)
    yield c
    c.close()


def test_the_read_is_timed_from_its_first_batch_without_waiting_out_the_last_call(
    cluster, monkeypatch
):
    monkeypatch.setattr(kafka_clients, "CONSUME_BATCH", BATCH)
    monkeypatch.setattr(kafka_clients, "CONSUME_TIMEOUT_S", TIMEOUT_S)
    timing = kafka_clients.consume_timing(cluster.kafka_address, TOPIC, PARTITIONS, RECORDS)
    # The first batch (at most BATCH records) is left out of the timed stretch, the rest not.
    assert RECORDS - BATCH <= timing.records < RECORDS
    assert timing.first_record_s > 0
    # Asking the last call for more records than remain made it wait its whole timeout.
    assert timing.seconds < TIMEOUT_S
    assert timing.records_per_s == timing.records / timing.seconds


def test_a_read_that_came_in_one_batch_is_refused_as_too_short_to_time(cluster, monkeypatch):
    monkeypatch.setattr(kafka_clients, "CONSUME_TIMEOUT_S", TIMEOUT_S)  # the one call gets all
    with pytest.raises(RuntimeError, match="one batch"):
        kafka_clients.consume_timing(cluster.kafka_address, TOPIC, PARTITIONS, 100)
