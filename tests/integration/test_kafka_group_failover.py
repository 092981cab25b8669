"""Kafka consumer groups on clusters of processes: through a crash (a gateway and three
storage nodes, RF 3, min ISR 2; records produced with acks=all by librdkafka; the leader of a
partition SIGKILLed mid-way; every acknowledged record still read by the group, whose commits
and membership live on through the new leader), and with several gateways sharing etcd (each
group served by the gateway that coordinates it, which every gateway names). Both in
production's configuration — mutual TLS on every listener, the authorizer on, the clients a
principal granted only what they do: the failover paths do not depend on the authorizer, whose
off paths the in-process group tests (test_kafka_groups' first run) cover."""

from __future__ import annotations

import subprocess
import threading
from collections import Counter

import confluent_kafka
import pytest
from kafka.protocol.metadata.find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)

from devtools import apache_kafka
from devtools.apache_kafka import CONSOLE_CONSUMER, java_command, log4j2_config
from devtools.processes import ServerProcess, gateway_process, node_process, start_all
from seglog.client.admin import Admin
from seglog.security.acls import AclBinding
from seglog.security.certs import node_identity
from tests.authorizer_modes import Grant
from tests.kafka_wire import KafkaWire
from tests.multi_gateway import EtcdBackedCluster
from tests.ports import free_ports
from tests.secured import OPERATOR, ClusterCertificates
from tests.waiting import wait_for, wait_until

TOPIC = "survivors"
PARTITIONS = 2
RECORDS = 2000
CLUSTER_SECRET = "kafka-group-failover-secret-0123456789"
NODE_CONFIGS = {
    "min.insync.replicas": "2",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.wait.max.ms": "100",
}
TIMEOUT_S = 90.0
CLIENT = "client"  # the librdkafka clients' certificate: a principal with only its ACLs


def client_grants(topic: str, group: str) -> list[AclBinding]:
    """What the tests' librdkafka clients do: produce idempotently to and read `topic`, as
    members of `group`."""
    grants = (
        Grant("topic", ("Write", "Read"), topic),
        Grant("group", ("Read",), group),
        Grant("cluster", ("IdempotentWrite",)),
    )
    return [binding for grant in grants for binding in grant.bindings(f"User:{CLIENT}")]


class ProcessCluster:
    def __init__(self, root, *, secured: bool = True) -> None:
        """`secured`: mutual TLS and the authorizer (production's configuration); else
        plaintext, for Kafka's Java client, which the tests give no keystore."""
        env = {"SEGLOG_CLUSTER_SECRET": CLUSTER_SECRET}
        (root / "logs").mkdir(parents=True)
        self.certificates = ClusterCertificates(root / "tls")
        grpc_port, kafka_port = free_ports(2)
        self.kafka_address = f"127.0.0.1:{kafka_port}"
        security = (
            [
                *self.certificates.server_flags(),
                *("--authorizer", "true", "--super-users", f"User:{OPERATOR}"),
            ]
            if secured
            else []
        )
        self.gateway = gateway_process(
            f"127.0.0.1:{grpc_port}",
            root / "gateway",
            extra_args=[
                *security,
                "--kafka-listen",
                f"{'SSL' if secured else 'PLAINTEXT'}://{self.kafka_address}",
                "--session-timeout-ms",
                "2000",
                "--heartbeat-interval-ms",
                "200",
                "--default-replication-factor",
                "3",
                "--offsets-topic-replication-factor",
                "3",
                "--group-initial-rebalance-delay-ms",
                "200",
            ],
            stderr_path=root / "logs" / "gateway.log",
            env=env,
        )
        self.nodes: dict[int, ServerProcess] = {}
        address = self.gateway.start()
        self.admin = self.certificates.admin(address) if secured else Admin(address)
        try:
            for node_id in (1, 2, 3):
                configs = [a for k, v in NODE_CONFIGS.items() for a in ("--config", f"{k}={v}")]
                node = node_process(
                    node_id,
                    "127.0.0.1:0",
                    root / f"node-{node_id}",
                    self.gateway.internal_address,
                    extra_args=[
                        *("--heartbeat-interval-ms", "200", *configs),
                        *(
                            self.certificates.server_flags(node_identity(node_id))
                            if secured
                            else []
                        ),
                    ],
                    stderr_path=root / "logs" / f"node-{node_id}.log",
                    env=env,
                )
                self.nodes[node_id] = node
            start_all(list(self.nodes.values()))
            wait_for(self._all_live, TIMEOUT_S, "every node registered")
        except BaseException:
            self.close()
            raise

    def _all_live(self) -> bool:
        try:
            return {n.node_id for n in self.admin.describe_cluster().nodes if n.live} == {1, 2, 3}
        except Exception:
            return False

    def leader_of(self, partition: int) -> int:
        (topic,) = self.admin.describe_topics([TOPIC])
        return int(next(p.leader for p in topic.partitions if p.partition == partition))

    def in_sync(self) -> bool:
        try:
            (topic,) = self.admin.describe_topics([TOPIC])
        except Exception:
            return False
        return all(p.leader > 0 and len(p.isr) == 3 for p in topic.partitions)

    def close(self) -> None:
        self.admin.close()
        for node in self.nodes.values():
            node.stop(grace_s=2)
        self.gateway.stop(grace_s=2)


@pytest.fixture
def cluster(tmp_path):
    c = ProcessCluster(tmp_path)
    yield c
    c.close()


@pytest.mark.long  # Kafka's Java consumer through a leader SIGKILL stays in make test
def test_a_librdkafka_group_reads_every_acknowledged_record_across_a_leader_sigkill(cluster):
    cluster.admin.create_topic(TOPIC, PARTITIONS, 3)
    cluster.admin.create_acls(client_grants(TOPIC, "survivors"))
    wait_for(cluster.in_sync, TIMEOUT_S, "every replica in sync")
    tls = cluster.certificates.librdkafka(CLIENT)
    producer = confluent_kafka.Producer(
        {
            **tls,
            "bootstrap.servers": cluster.kafka_address,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
        }
    )
    acknowledged: list[int] = []
    failed: list[object] = []

    def report(error, message):
        if error is None:
            acknowledged.append(int(message.value()))
        else:
            failed.append(error)

    def produce(values):
        for value in values:
            producer.produce(
                TOPIC, str(value).encode(), partition=value % PARTITIONS, on_delivery=report
            )
            producer.poll(0)
        producer.flush(TIMEOUT_S)

    produce(range(RECORDS // 2))
    seen: Counter[int] = Counter()
    stop = threading.Event()

    def consume():
        consumer = confluent_kafka.Consumer(
            {
                **tls,
                "bootstrap.servers": cluster.kafka_address,
                "group.id": "survivors",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": True,
                "auto.commit.interval.ms": 100,
                "heartbeat.interval.ms": 200,
                "session.timeout.ms": 10_000,
            }
        )
        consumer.subscribe([TOPIC])
        try:
            while not stop.is_set():
                message = consumer.poll(0.1)
                if message is not None and message.error() is None:
                    seen[int(message.value())] += 1
        finally:
            consumer.close()

    readers = [threading.Thread(target=consume) for _ in range(2)]
    for reader in readers:
        reader.start()
    try:
        assert wait_until(lambda: len(seen) >= RECORDS // 4, TIMEOUT_S)
        victim = cluster.leader_of(0)
        cluster.nodes[victim].kill()  # SIGKILL: no controlled shutdown
        produce(range(RECORDS // 2, RECORDS))
        assert wait_until(lambda: set(acknowledged) <= set(seen), TIMEOUT_S), len(
            set(acknowledged) - set(seen)
        )
    finally:
        stop.set()
        for reader in readers:
            reader.join(TIMEOUT_S)
    # Every record was acknowledged (the producer retried across the leader change) and
    # every one was read by the group.
    assert not failed, failed[:5]
    assert sorted(acknowledged) == list(range(RECORDS))
    assert set(seen) == set(range(RECORDS))


def test_kafkas_java_consumer_in_a_group_reads_on_through_a_leader_sigkill(tmp_path):
    """Kafka's own consumer (the console consumer, in a group) fetching while the leader of a
    partition is SIGKILLed: until the registry elects a new leader, the gateway answers that
    partition NOT_LEADER_OR_FOLLOWER, which the Java fetcher retries after a metadata
    refresh. Any code its FetchCollector does not list (LEADER_NOT_AVAILABLE, 5, before)
    ends it: `IllegalStateException: Unexpected error code 5 while fetching`."""
    assert apache_kafka.installed(), apache_kafka.INSTALL_HINT
    cluster = ProcessCluster(tmp_path, secured=False)
    consumer = None
    try:
        cluster.admin.create_topic(TOPIC, PARTITIONS, 3)
        wait_for(cluster.in_sync, TIMEOUT_S, "every replica in sync")
        producer = confluent_kafka.Producer(
            {"bootstrap.servers": cluster.kafka_address, "acks": "all", "linger.ms": 5}
        )
        failed: list[object] = []

        def produce(values) -> None:
            for value in values:
                producer.produce(
                    TOPIC,
                    str(value).encode(),
                    partition=value % PARTITIONS,
                    on_delivery=lambda error, _: error is None or failed.append(error),
                )
                producer.poll(0)
            assert producer.flush(TIMEOUT_S) == 0

        produce(range(RECORDS // 2))
        consumer = subprocess.Popen(
            java_command(
                CONSOLE_CONSUMER,
                *("--bootstrap-server", cluster.kafka_address, "--topic", TOPIC),
                *("--group", "java-survivors", "--from-beginning"),
                # Fetch often, so fetches meet the dead leader before a new one is elected.
                *("--command-property", "fetch.max.wait.ms=100"),
                jvm_options=("-Xmx256m", f"-Dlog4j2.configurationFile={log4j2_config()}"),
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        seen: set[int] = set()
        lines = threading.Thread(
            target=lambda: seen.update(
                int(line) for line in consumer.stdout if line.strip().isdigit()
            )
        )
        lines.start()
        assert wait_until(lambda: len(seen) >= RECORDS // 4 or consumer.poll() is not None, 60)
        victim = cluster.leader_of(0)
        cluster.nodes[victim].kill()  # SIGKILL: no controlled shutdown
        produce(range(RECORDS // 2, RECORDS))
        wait_until(lambda: len(seen) == RECORDS or consumer.poll() is not None, TIMEOUT_S)
        alive = consumer.poll() is None
        consumer.terminate()
        _, errors = consumer.communicate(timeout=TIMEOUT_S)
        lines.join(TIMEOUT_S)
        assert alive, errors.decode()[-3000:]
        assert not failed, failed[:5]
        assert seen == set(range(RECORDS)), (len(seen), errors.decode()[-3000:])
    finally:
        if consumer is not None and consumer.poll() is None:
            consumer.kill()
            consumer.wait(TIMEOUT_S)
        cluster.close()


def find_coordinator(cluster: EtcdBackedCluster, kafka_address: str, group_id: str):
    assert cluster.certificates is not None
    with KafkaWire(kafka_address, ssl_context=cluster.certificates.ssl_context(CLIENT)) as wire:
        return wire.request(
            FindCoordinatorRequest[3](key=group_id, key_type=0), 3, FindCoordinatorResponse
        )


def test_with_several_gateways_a_group_is_served_by_the_gateway_that_coordinates_it(tmp_path):
    cluster = EtcdBackedCluster(tmp_path, secured=True)
    assert cluster.certificates is not None
    tls = cluster.certificates.librdkafka(CLIENT)
    try:
        group_id = "far-away"
        with cluster.admin(0) as admin:
            admin.create_topic("spread-groups", PARTITIONS, 3)
            admin.create_acls(client_grants("spread-groups", group_id))
        # The lowest live node at its lane on the far gateway: that gateway's port + 1.
        far_broker = 1
        far_host, far_port = cluster.kafka_addresses[1].rsplit(":", 1)
        far_lane = f"{far_host}:{int(far_port) + 1}"
        # The first gateway asked about a group's offsets partition claims it: the second.
        assert wait_until(
            lambda: (
                find_coordinator(cluster, cluster.kafka_addresses[1], group_id).node_id
                == far_broker
            ),
            TIMEOUT_S,
        )
        answer = find_coordinator(cluster, cluster.kafka_addresses[0], group_id)
        assert (answer.error_code, answer.node_id) == (0, far_broker)
        assert f"{answer.host}:{answer.port}" == far_lane
        # A librdkafka consumer bootstrapped at the first gateway joins and commits at the
        # second, which the first names as the group's coordinator.
        producer = confluent_kafka.Producer(
            {**tls, "bootstrap.servers": cluster.kafka_addresses[0]}
        )
        for value in range(20):
            producer.produce("spread-groups", str(value).encode(), partition=value % PARTITIONS)
        assert producer.flush(TIMEOUT_S) == 0
        consumer = confluent_kafka.Consumer(
            {
                **tls,
                "bootstrap.servers": cluster.kafka_addresses[0],
                "group.id": group_id,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "heartbeat.interval.ms": 200,
            }
        )
        consumer.subscribe(["spread-groups"])
        values: list[int] = []
        try:

            def read() -> bool:
                message = consumer.poll(0.1)
                if message is not None and message.error() is None:
                    values.append(int(message.value()))
                return len(values) >= 20

            assert wait_until(read, TIMEOUT_S, interval_s=0)
            consumer.commit(asynchronous=False)
            committed = consumer.committed(
                [confluent_kafka.TopicPartition("spread-groups", p) for p in range(PARTITIONS)],
                timeout=10,
            )
        finally:
            consumer.close()
        assert sorted(values) == list(range(20))
        assert [tp.offset for tp in committed] == [10] * PARTITIONS
    finally:
        cluster.close()
