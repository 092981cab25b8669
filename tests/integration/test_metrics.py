"""Metrics exported over OTLP to a receiver the test runs: names, attributes and values as
the services count them (bytes in equals the bytes produced, messages out what a consumer
read, lag falling to zero once a group has caught up, gauges per partition and node)."""

from __future__ import annotations

import socket
import urllib.request

import confluent_kafka
import pytest
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource

from seglog import metrics
from seglog.client.consumer import Consumer
from seglog.errors import PermissionDeniedError, RecordTooLargeError
from seglog.testing.otlp import OtlpReceiver
from services.gateway.broker.caller import Caller
from tests.batches import make_batch
from tests.cluster import LocalCluster, drain
from tests.waiting import wait_until

TOPIC = "messaging.destination.name"
PARTITION = "messaging.destination.partition.id"


@pytest.fixture
def receiver():
    r = OtlpReceiver()
    yield r
    r.close()


@pytest.fixture
def provider_for(receiver):
    """Service name -> a MeterProvider exporting to the receiver every 200 ms."""
    providers = []

    def make(name):
        reader = PeriodicExportingMetricReader(
            OTLPMetricExporter(endpoint=receiver.endpoint, insecure=True),
            export_interval_millis=200,
        )
        provider = MeterProvider(
            metric_readers=[reader], resource=Resource.create({"service.name": name})
        )
        providers.append(provider)
        return provider

    yield make
    for provider in providers:
        provider.shutdown()


@pytest.fixture
def metered_cluster(tmp_path, provider_for):
    cluster = LocalCluster(tmp_path, nodes=3, meter_provider_for=provider_for)
    yield cluster
    cluster.close()


def _total(receiver, name, **attributes):
    """The latest value of each series of `name` (every service), summed."""
    found = {}
    for point in receiver.points():
        if point.name == name and all(point.attributes.get(k) == v for k, v in attributes.items()):
            found[(point.service, tuple(sorted(point.attributes.items())))] = point.value
    return sum(found.values())


def _series(receiver, name):
    """The services exporting `name`."""
    return {point.service for point in receiver.points() if point.name == name}


def test_services_export_what_they_count(metered_cluster, receiver):
    cluster = metered_cluster
    cluster.admin.create_topic("metered", 2, 3)
    produced = 0
    for i in range(20):
        records = make_batch([b"value-%d" % j for j in range(10)])
        [result] = cluster.client.produce("metered", {i % 2: records}, acks=-1)
        assert not result.error
        produced += len(records)
    assert wait_until(
        lambda: _total(receiver, "seglog.bytes.in", **{TOPIC: "metered"}) == produced, 20
    )
    assert _total(receiver, "seglog.messages.in", **{TOPIC: "metered"}) == 200
    # A group reads half, commits: lag 100; reads the rest, commits: lag 0.
    with Consumer(
        cluster.address,
        group_id="readers",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_poll_records=10,
    ) as consumer:
        consumer.subscribe(["metered"])
        first = drain(consumer, 100)
        consumer.commit()
        seen = len(first)
        assert wait_until(
            lambda: (
                _total(
                    receiver, "seglog.consumer.lag", **{"messaging.consumer.group.name": "readers"}
                )
                == 200 - seen
            ),
            20,
        )
        rest = drain(consumer, 200 - seen)
        consumer.commit()
    assert seen + len(rest) == 200
    assert wait_until(
        lambda: (
            _total(receiver, "seglog.consumer.lag", **{"messaging.consumer.group.name": "readers"})
            == 0
        ),
        20,
    )
    # The consumer's fetches went out: at least every record once (a fetch may resend).
    assert wait_until(lambda: _total(receiver, "seglog.messages.out", **{TOPIC: "metered"}) >= 200)
    # Per-partition gauges from each leader, per-node liveness from the gateway.
    assert wait_until(
        lambda: _total(receiver, "seglog.partition.isr", **{TOPIC: "metered"}) == 2 * 3
    )
    assert _total(receiver, "seglog.partition.under_replicated", **{TOPIC: "metered"}) == 0
    # Every replica's end offset, once each has exported after catching up (a follower's
    # last export may predate its last fetch).
    for partition in ("0", "1"):
        assert wait_until(
            lambda p=partition: (
                set(
                    receiver.latest(
                        "seglog.log.end_offset", **{TOPIC: "metered", PARTITION: p}
                    ).values()
                )
                == {100}
            )
        ), receiver.latest("seglog.log.end_offset", **{TOPIC: "metered", PARTITION: partition})
    # Every replica's size (followers' too), once each has exported after catching up.
    assert wait_until(
        lambda: _total(receiver, "seglog.log.size", **{TOPIC: "metered"}) == 3 * produced
    )
    live = receiver.latest("seglog.registry.node.live")
    assert sorted(live.values()) == [1, 1, 1]
    # Histogram counts: one per Append request (20 from the producer, on their leaders).
    assert _total(receiver, "seglog.request.duration", **{"seglog.request": "Append"}) >= 20
    assert receiver.latest("seglog.request.duration", **{"seglog.request": "Produce"})
    # The transaction coordinator's: a committed transaction is counted in its state, and
    # its markers as pending until they are written (then none).
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": cluster.kafka_address, "transactional.id": "metered-txn"}
    )
    producer.init_transactions(20)
    producer.begin_transaction()
    producer.produce("metered", b"in a transaction", partition=0)
    producer.commit_transaction(20)
    admin = Caller("User:ANONYMOUS", "127.0.0.1", None, "kafka")
    queries = cluster.gateway.transactions.queries
    assert wait_until(lambda: queries.describe(admin, "metered-txn").state == "CompleteCommit")
    assert wait_until(
        lambda: (
            _total(
                receiver, "seglog.transactions", **{"seglog.transaction.state": "CompleteCommit"}
            )
            == 1
            and _total(receiver, "seglog.transactions.markers.pending") == 0
            and receiver.latest("seglog.transactions.markers.pending")
        )
    )


def test_an_error_answered_is_counted_by_its_reason(metered_cluster, receiver):
    cluster = metered_cluster
    cluster.admin.create_topic("small", 1, 3, {"max.message.bytes": "1000"})
    with pytest.raises(RecordTooLargeError):
        cluster.client.produce("small", {0: make_batch([b"x" * 5000])})
    assert wait_until(
        lambda: (
            _total(receiver, "seglog.request.errors", **{"error.type": "MESSAGE_TOO_LARGE"}) == 1
        ),
        20,
    )


def test_a_crashed_node_counts_its_partitions_offline_and_isr_shrinks(
    tmp_path, provider_for, receiver
):
    # Followers drop out of an ISR after 300 ms without fetching, well before the crashed
    # node's session (1.5 s) expires, so the leaders shrink their ISRs themselves.
    cluster = LocalCluster(
        tmp_path,
        nodes=3,
        meter_provider_for=provider_for,
        node_configs={"replica.lag.time.max.ms": "300"},
    )
    try:
        cluster.admin.create_topic("solo", 1, 1)
        cluster.admin.create_topic("spread", 3, 3)
        assert wait_until(lambda: receiver.latest("seglog.partitions.offline"), 20)
        assert _total(receiver, "seglog.partitions.offline") == 0
        # Exported by every node while still zero, so a rate over it starts from zero.
        assert wait_until(lambda: len(_series(receiver, "seglog.partition.isr.shrinks")) == 3)
        assert _total(receiver, "seglog.partition.isr.shrinks") == 0
        crashed = cluster.gateway.registry.route("solo", 0).leader
        led_elsewhere = [
            p for p in range(3) if cluster.gateway.registry.route("spread", p).leader != crashed
        ]
        cluster.stop_node(crashed, controlled=False)
        # A follower falls out of the ISR once the leader's log end moves past it.
        for partition in led_elsewhere:
            [result] = cluster.client.produce("spread", {partition: make_batch([b"x"])}, acks=1)
            assert not result.error
        # Only "solo" has no other replica to lead it.
        assert wait_until(lambda: _total(receiver, "seglog.partitions.offline") == 1, 30)
        assert wait_until(
            lambda: _total(receiver, "seglog.partition.isr.shrinks") >= len(led_elsewhere), 30
        )
    finally:
        cluster.close()


def test_a_busy_prometheus_port_is_named_with_the_setting_to_change(monkeypatch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setenv("OTEL_METRICS_EXPORTER", "prometheus")
        monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1")
        monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", str(port))
        with pytest.raises(OSError) as refused:
            metrics.configure_metrics("seglog-test")
    message = str(refused.value)
    assert f"127.0.0.1:{port}" in message and "OTEL_EXPORTER_PROMETHEUS_PORT" in message


def test_the_prometheus_exporter_serves_a_scrape_endpoint(monkeypatch):
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "prometheus")
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1")
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", "0")
    provider = metrics.configure_metrics("seglog-test")
    server = metrics.PROMETHEUS_SERVERS[-1]
    try:
        counting = metrics.RequestMetrics(provider, "seglog.test")
        counting.produced("scraped", 5, 500)
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics") as answer:
            text = answer.read().decode()
        lines = [line for line in text.splitlines() if line.startswith("seglog_bytes_in")]
        assert any(
            'messaging_destination_name="scraped"' in line and line.endswith(" 500.0")
            for line in lines
        ), lines
    finally:
        provider.shutdown()
        server.shutdown()
        server.server_close()


def test_metrics_are_off_unless_asked_for(monkeypatch):
    monkeypatch.delenv("OTEL_METRICS_EXPORTER", raising=False)
    assert metrics.configure_metrics("seglog-test") is None
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "carrier-pigeon")
    with pytest.raises(ValueError, match="OTEL_METRICS_EXPORTER"):
        metrics.configure_metrics("seglog-test")


def test_denied_calls_are_counted(tmp_path, provider_for, receiver):
    cluster = LocalCluster(tmp_path, nodes=1, authorizer=True, meter_provider_for=provider_for)
    try:
        with pytest.raises(PermissionDeniedError):
            cluster.admin.create_topic("forbidden", 1, 1)  # User:ANONYMOUS, no ACL
        denied = {"seglog.operation": "Create", "seglog.resource.type": "topic"}
        assert wait_until(lambda: _total(receiver, "seglog.authorization.denied", **denied) == 1)
    finally:
        cluster.close()
