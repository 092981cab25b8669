"""Kafka's client quotas at the gateway, on a mutual-TLS cluster whose principals are the
callers' certificates: a producer and a consumer over their byte rates are held to them
(answers held back, throttle_time_ms set) while another principal is not; seglog's own
clients held by the client id they send; quotas are set, described and removed through the
Admin API, checked whole, and kept across a restart."""

from __future__ import annotations

import time

import confluent_kafka
import grpc
import pytest

from devtools import apache_kafka
from devtools.apache_kafka import run_tool
from seglog.client.consumer import Consumer
from seglog.client.producer import Producer
from seglog.client.structs import TopicPartition
from seglog.errors import SeglogError
from seglog.v1 import common_pb2, gateway_pb2_grpc
from tests.batches import make_batch
from tests.cluster import LocalCluster
from tests.cluster import cli_in_process as run
from tests.waiting import wait_until

CONFIG_COMMAND = "kafka.admin.ConfigCommand"  # what kafka-configs.sh runs
RATE_BYTES_PER_S = 100_000
# The rate is measured after the first second, which a full bucket (one second of the rate)
# lets through unthrottled, over the next three.
BURST_S = 1.0
MEASURE_S = 4.0
# A principal with no quota is never throttled (its answers say so) and outruns the quota:
# by a margin a busy machine's slower round trips still clear.
UNHELD_RATIO = 1.5
BATCH = make_batch([b"x" * 1000] * 20, timestamp_ms=1_700_000_000_000)  # ~20 KB


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("quotas"), nodes=1, tls=True)
    c.admin.create_topic("metered", 1, 1)
    yield c
    c.close()


def _stub(cluster, identity: str) -> tuple[grpc.Channel, gateway_pb2_grpc.GatewayStub]:
    security = cluster.client_security(identity)
    channel = grpc.secure_channel(cluster.address, security.channel_credentials())
    return channel, gateway_pb2_grpc.GatewayStub(channel)


def _produce_for(stub, seconds: float) -> tuple[float, int]:
    """Bytes/s produced over `seconds` of back-to-back requests, and the answers throttled."""
    request = common_pb2.ProduceRequest(topic="metered", acks=1, timeout_ms=10_000)
    request.partitions.add(partition=0, records=BATCH)
    size = request.ByteSize()
    sent = throttled = 0
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        answer = stub.Produce(request, timeout=30)
        assert answer.partitions[0].error == 0
        if time.monotonic() - start > BURST_S:
            sent += size
        throttled += answer.throttle_time_ms > 0
    return sent / (time.monotonic() - start - BURST_S), throttled


def _fetch_for(stub, seconds: float) -> tuple[float, int]:
    """Bytes/s fetched over `seconds`, reading the partition from its start again and again."""
    received = throttled = 0
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        request = common_pb2.FetchRequest(max_wait_ms=0, max_bytes=64 * 1024)
        request.partitions.add(
            topic="metered", partition=0, fetch_offset=0, partition_max_bytes=64 * 1024
        )
        for answer in stub.Fetch(request, timeout=30):
            assert answer.error == 0
            if time.monotonic() - start > BURST_S:
                received += answer.ByteSize()
            throttled += answer.throttle_time_ms > 0
    return received / (time.monotonic() - start - BURST_S), throttled


def test_a_producer_over_its_quota_is_held_to_it_and_another_principal_is_not(cluster):
    cluster.admin.alter_client_quotas({"user": "alice"}, {"producer_byte_rate": RATE_BYTES_PER_S})
    alice_channel, alice = _stub(cluster, "alice")
    bob_channel, bob = _stub(cluster, "bob")
    try:
        alice_rate, alice_throttled = _produce_for(alice, MEASURE_S)
        bob_rate, bob_throttled = _produce_for(bob, BURST_S + 2.0)
    finally:
        alice_channel.close()
        bob_channel.close()
    # Past the burst, the rate (a held answer waits for exactly what it owes), within what
    # the answers in flight at either end of the window add or take away.
    assert 0.6 * RATE_BYTES_PER_S <= alice_rate <= 1.4 * RATE_BYTES_PER_S, alice_rate
    assert alice_throttled > 0
    assert bob_throttled == 0
    assert bob_rate > UNHELD_RATIO * RATE_BYTES_PER_S, bob_rate


@pytest.mark.long  # the producer's quota stays in make test
def test_a_consumer_over_its_quota_is_held_to_it_and_another_principal_is_not(cluster):
    producer_channel, producer = _stub(cluster, "client")
    for _ in range(20):  # ~400 KB to read
        request = common_pb2.ProduceRequest(topic="metered", acks=1)
        request.partitions.add(partition=0, records=BATCH)
        producer.Produce(request, timeout=30)
    producer_channel.close()
    cluster.admin.alter_client_quotas({"user": "carol"}, {"consumer_byte_rate": RATE_BYTES_PER_S})
    carol_channel, carol = _stub(cluster, "carol")
    dave_channel, dave = _stub(cluster, "dave")
    try:
        carol_rate, carol_throttled = _fetch_for(carol, MEASURE_S)
        dave_rate, dave_throttled = _fetch_for(dave, BURST_S + 2.0)
    finally:
        carol_channel.close()
        dave_channel.close()
    assert 0.6 * RATE_BYTES_PER_S <= carol_rate <= 1.4 * RATE_BYTES_PER_S, carol_rate
    assert carol_throttled > 0
    assert dave_throttled == 0
    assert dave_rate > UNHELD_RATIO * RATE_BYTES_PER_S, dave_rate


def test_quotas_are_described_checked_whole_removed_and_kept_across_a_restart(cluster):
    admin = cluster.admin
    admin.alter_client_quotas({"user": None}, {"consumer_byte_rate": 5e6})
    admin.alter_client_quotas(
        {"user": "erin", "client-id": "etl"},
        {"producer_byte_rate": 1e6, "consumer_byte_rate": 2e6},
    )
    with pytest.raises(SeglogError, match="unknown quota key"):
        admin.alter_client_quotas({"user": "erin"}, {"request_percentage": 50})
    with pytest.raises(SeglogError, match="above 0"):
        admin.alter_client_quotas({"user": "erin"}, {"producer_byte_rate": -1})
    with pytest.raises(SeglogError, match="entity type"):
        admin.alter_client_quotas({"group": "x"}, {"producer_byte_rate": 1})
    assert admin.describe_client_quotas({"user": "erin"}) == []  # nothing of the refusals
    assert admin.describe_client_quotas({"user": "erin", "client-id": "etl"}) == [
        (
            {"user": "erin", "client-id": "etl"},
            {"producer_byte_rate": 1e6, "consumer_byte_rate": 2e6},
        )
    ]
    admin.alter_client_quotas({"user": "erin", "client-id": "etl"}, remove=["consumer_byte_rate"])
    cluster.restart_gateway()
    assert wait_until(lambda: cluster.admin.describe_cluster().nodes)
    with cluster.admin_as("client") as admin:
        quotas = dict(
            (tuple(sorted(entity.items(), key=str)), values)
            for entity, values in admin.describe_client_quotas()
        )
        assert quotas[(("client-id", "etl"), ("user", "erin"))] == {"producer_byte_rate": 1e6}
        assert quotas[(("user", None),)] == {"consumer_byte_rate": 5e6}
        admin.alter_client_quotas({"user": None}, remove=["consumer_byte_rate"])
        assert (("user", None),) not in {
            tuple(sorted(e.items(), key=str)) for e, _ in admin.describe_client_quotas()
        }


def test_the_cli_sets_and_shows_quotas_as_kafka_configs_does(cluster, capsys, monkeypatch):
    security = cluster.client_security("client")
    monkeypatch.setenv("SEGLOG_TLS_CA", str(security.ca))
    monkeypatch.setenv("SEGLOG_TLS_CERT", str(security.cert))
    monkeypatch.setenv("SEGLOG_TLS_KEY", str(security.key))
    alter = ("configs", "alter", "--entity-type", "users", "--entity-name", "frank")
    code, out, _ = run(
        cluster, capsys, monkeypatch, *alter, "--add-config", "producer_byte_rate=1048576"
    )
    assert code == 0 and out == "Completed updating config for user frank.\n"
    code, _, _ = run(
        cluster,
        capsys,
        monkeypatch,
        *("configs", "alter", "--entity-type", "users", "--entity-default"),
        *("--entity-type", "clients", "--entity-name", "etl"),
        "--add-config",
        "consumer_byte_rate=2048,producer_byte_rate=1024",
    )
    assert code == 0
    code, out, _ = run(
        cluster, capsys, monkeypatch, "configs", "describe", "--entity-type", "users"
    )
    assert code == 0
    # kafka-configs' own line: the rate as Java prints a double, never rounded (was 1.04858e+06)
    assert "Quota configs for user-principal 'frank' are producer_byte_rate=1048576.0" in out
    code, out, _ = run(
        cluster,
        capsys,
        monkeypatch,
        *("configs", "describe", "--entity-type", "users", "--entity-type", "clients"),
    )
    assert (
        "Quota configs for the default user-principal, client-id 'etl' are "
        "consumer_byte_rate=2048.0, producer_byte_rate=1024.0"
    ) in out.splitlines()
    code, _, err = run(cluster, capsys, monkeypatch, *alter, "--add-config", "producer_byte_rate=x")
    assert code != 0 and "bytes/s" in err
    code, _, _ = run(cluster, capsys, monkeypatch, *alter, "--delete-config", "producer_byte_rate")
    assert code == 0
    assert cluster.admin.describe_client_quotas({"user": "frank"}) == []


def _seglog_produce_for(cluster, identity: str, client_id: str, seconds: float) -> float:
    """Value bytes/s a seglog Producer (`identity`'s certificate, `client_id`) gets
    acknowledged over `seconds` of sending as fast as its buffer takes."""
    files = cluster.tls_files(identity)
    acknowledged = [0]
    start = time.monotonic()

    def delivered(_metadata, error) -> None:
        if error is None and BURST_S < time.monotonic() - start <= seconds:
            acknowledged[0] += 1000

    with Producer(
        cluster.address,
        client_id=client_id,
        acks=1,
        # Requests small beside the rate, and few waiting: sends block on the buffer.
        batch_size=16384,
        buffer_memory=64 * 1024,
        ssl_cafile=str(files.ca),
        ssl_certfile=str(files.cert),
        ssl_keyfile=str(files.key),
    ) as producer:
        value = b"v" * 1000
        while time.monotonic() - start < seconds:
            producer.send("metered", value, partition=0, callback=delivered)
        producer.flush(30)
    return acknowledged[0] / (seconds - BURST_S)


def test_seglogs_producer_is_held_to_its_client_ids_quota_and_another_client_id_is_not(cluster):
    """The quota names a client id, not a principal: one principal's two producers, one
    under the `clients` quota by its client_id (sent on every call), one not."""
    cluster.admin.alter_client_quotas(
        {"client-id": "seglog-metered"}, {"producer_byte_rate": RATE_BYTES_PER_S}
    )
    metered_rate = _seglog_produce_for(cluster, "ivan", "seglog-metered", MEASURE_S)
    free_rate = _seglog_produce_for(cluster, "ivan", "seglog-free", BURST_S + 1.0)
    assert 0.6 * RATE_BYTES_PER_S <= metered_rate <= 1.4 * RATE_BYTES_PER_S, metered_rate
    assert free_rate > 3 * RATE_BYTES_PER_S, free_rate


@pytest.fixture(scope="module")
def kafka_cluster(tmp_path_factory):
    """Plaintext, for Kafka's clients on the listener (principal User:ANONYMOUS)."""
    c = LocalCluster(tmp_path_factory.mktemp("kafka-quotas"), nodes=1)
    c.admin.create_topic("metered", 1, 1)
    yield c
    c.close()


def _librdkafka_produce_for(cluster, client_id: str, seconds: float) -> tuple[float, int]:
    """Value bytes/s librdkafka gets acknowledged over `seconds` of producing as fast as its
    queue takes, and the throttle events it reported (KIP-219: the broker said it is
    throttled, and muted the connection)."""
    throttles = []
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": cluster.kafka_address,
            "client.id": client_id,
            "linger.ms": 5,
            # Requests small beside the rate: a request is let through whole, then paid for.
            "batch.size": 16384,
            "queue.buffering.max.kbytes": 64,
            "throttle_cb": throttles.append,
        }
    )
    value = b"v" * 1000
    acknowledged = [0]
    start = time.monotonic()

    def delivered(error, message) -> None:
        if error is None and BURST_S < time.monotonic() - start <= seconds:
            acknowledged[0] += len(message.value())

    while time.monotonic() - start < seconds:
        try:
            producer.produce("metered", value, partition=0, on_delivery=delivered)
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    producer.flush(30)
    return acknowledged[0] / (seconds - BURST_S), len([t for t in throttles if t.throttle_time > 0])


def test_a_kafka_client_id_over_its_quota_is_held_to_it_and_another_is_not(kafka_cluster):
    kafka_cluster.admin.alter_client_quotas(
        {"client-id": "metered"}, {"producer_byte_rate": RATE_BYTES_PER_S}
    )
    metered_rate, metered_throttles = _librdkafka_produce_for(kafka_cluster, "metered", MEASURE_S)
    free_rate, free_throttles = _librdkafka_produce_for(kafka_cluster, "free", BURST_S + 1.0)
    assert 0.6 * RATE_BYTES_PER_S <= metered_rate <= 1.4 * RATE_BYTES_PER_S, metered_rate
    assert metered_throttles > 0
    assert free_throttles == 0
    assert free_rate > 3 * RATE_BYTES_PER_S, free_rate


@pytest.mark.slow  # a JVM per tool run
def test_kafkas_own_kafka_configs_sets_and_describes_quotas(kafka_cluster):
    """kafka-configs.sh (Kafka 4.3.1's ConfigCommand) through DescribeClientQuotas and
    AlterClientQuotas on the listener, as against a Kafka broker."""
    assert apache_kafka.installed(), apache_kafka.INSTALL_HINT

    def configs(*args: str) -> str:
        done = run_tool(CONFIG_COMMAND, "--bootstrap-server", kafka_cluster.kafka_address, *args)
        assert done.returncode == 0, done.stderr.decode()[-3000:]
        return done.stdout.decode()

    configs(
        *("--alter", "--entity-type", "users", "--entity-name", "grace"),
        *("--entity-type", "clients", "--entity-default"),
        *("--add-config", "producer_byte_rate=4096,consumer_byte_rate=8192"),
    )
    assert kafka_cluster.admin.describe_client_quotas({"user": "grace", "client-id": None}) == [
        (
            {"user": "grace", "client-id": None},
            {"producer_byte_rate": 4096.0, "consumer_byte_rate": 8192.0},
        )
    ]
    described = configs(
        *("--describe", "--entity-type", "users", "--entity-name", "grace"),
        *("--entity-type", "clients", "--entity-default"),
    )
    assert "consumer_byte_rate=8192.0" in described and "producer_byte_rate=4096.0" in described
    configs(
        *("--alter", "--entity-type", "users", "--entity-name", "grace"),
        *("--entity-type", "clients", "--entity-default"),
        *("--delete-config", "consumer_byte_rate,producer_byte_rate"),
    )
    assert kafka_cluster.admin.describe_client_quotas({"user": "grace", "client-id": None}) == []


def test_seglogs_consumer_under_a_quota_reads_through_the_gateway_at_its_rate(cluster):
    """The nodes' bulk path is not metered: a caller with a consumer_byte_rate quota gets no
    bulk grants, so seglog's Consumer (bulk by default) reads through the gateway's Fetch.
    The quota is Kafka's most specific, user and client id: it applies only because the
    Consumer sends its client_id with FetchGrants and Fetch alike."""
    _, producer = _stub(cluster, "client")
    for _ in range(30):  # ~600 KB more to read
        request = common_pb2.ProduceRequest(topic="metered", acks=1)
        request.partitions.add(partition=0, records=BATCH)
        producer.Produce(request, timeout=30)
    cluster.admin.alter_client_quotas(
        {"user": "heidi", "client-id": "heidi-reader"}, {"consumer_byte_rate": RATE_BYTES_PER_S}
    )
    files = cluster.tls_files("heidi")
    read = 0
    with Consumer(
        cluster.address,
        client_id="heidi-reader",
        enable_auto_commit=False,
        # Fetches small beside the rate: an answer is held until it is paid for.
        max_partition_fetch_bytes=16 * 1024,
        ssl_cafile=str(files.ca),
        ssl_certfile=str(files.cert),
        ssl_keyfile=str(files.key),
    ) as consumer:
        consumer.assign([TopicPartition("metered", 0)])
        consumer.seek_to_beginning()
        start = time.monotonic()
        while time.monotonic() - start < MEASURE_S:
            records = consumer.poll_records(timeout_ms=100)
            if time.monotonic() - start > BURST_S:
                read += sum(len(r.value) for r in records)
    rate = read / (MEASURE_S - BURST_S)
    assert 0.5 * RATE_BYTES_PER_S <= rate <= 1.4 * RATE_BYTES_PER_S, rate
