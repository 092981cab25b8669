"""Several gateway addresses (Kafka's bootstrap.servers): clients and storage nodes given a
list keep working when the gateway they used goes and another answers at the next address
(here: the gateway restarted elsewhere on the same registry)."""

from __future__ import annotations

from seglog.client.admin import Admin
from seglog.client.consumer import Consumer
from seglog.client.producer import Producer
from seglog.client.structs import TopicPartition
from services.gateway.server import Gateway
from services.gateway.settings import GatewayConfig
from services.storage_node.server import StorageNode
from services.storage_node.settings import NodeConfig
from tests.cluster import CLUSTER_SECRET, drain
from tests.ports import free_ports
from tests.waiting import wait_until


def test_clients_and_nodes_fail_over_to_the_next_gateway_address(tmp_path):
    first_port, second_port, first_internal, second_internal = free_ports(4)
    addresses = f"127.0.0.1:{first_port},127.0.0.1:{second_port}"
    internal_addresses = f"127.0.0.1:{first_internal},127.0.0.1:{second_internal}"

    def gateway(port, internal_port):
        config = GatewayConfig(
            listen=f"127.0.0.1:{port}",
            internal_listen=f"127.0.0.1:{internal_port}",
            data_dir=tmp_path / "gateway",
            session_timeout_ms=3000,
            heartbeat_interval_ms=100,
            default_replication_factor=1,
            offsets_topic_replication_factor=1,
            cluster_secret=CLUSTER_SECRET,
        )
        g = Gateway(config)
        g.start()
        return g

    current = gateway(first_port, first_internal)
    node = StorageNode(
        NodeConfig(
            node_id=1,
            listen="127.0.0.1:0",
            data_dir=tmp_path / "node-1",
            gateway=internal_addresses,
            heartbeat_interval_ms=100,
            cluster_secret=CLUSTER_SECRET,
        )
    )
    node.start()
    try:
        assert node.session is not None and node.session.registered.wait(15)
        with Producer(addresses, linger_ms=0, retries=50, retry_backoff_ms=100) as producer:
            with Admin(addresses) as admin:
                admin.create_topic("moving", 1, 1)
            for i in range(10):
                producer.send("moving", b"before-%d" % i).get(timeout=30)
            current.stop(grace_s=0)
            current = gateway(second_port, second_internal)  # the same registry, the next
            assert wait_until(lambda: 1 in current.registry.live_nodes(), 20)
            for i in range(10):
                producer.send("moving", b"after-%d" % i).get(timeout=30)
        with Consumer(addresses, auto_offset_reset="earliest") as consumer:
            consumer.assign([TopicPartition("moving", 0)])
            got = [r.value for r in drain(consumer, 20)]
        assert sorted(got) == sorted(
            [b"before-%d" % i for i in range(10)] + [b"after-%d" % i for i in range(10)]
        )
    finally:
        node.stop(grace_s=0, controlled=False)
        current.stop(grace_s=0)
