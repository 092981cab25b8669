"""An in-process cluster for integration tests (a real gateway and real storage nodes, each
its own gRPC server on a loopback port, with short heartbeats), and the helpers tests share:
`make run`'s command line, the CLI as a process or in this one, draining a consumer.
(Batches: tests/batches.py; waits: tests/waiting.py.)"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

import grpc

from seglog.client.admin import Admin
from seglog.client.gateway import GatewayClient
from seglog.security.certs import (
    GATEWAY_IDENTITY,
    NODE_IDENTITY_PREFIX,
    CertificateAuthority,
    node_identity,
    write_issued,
)
from seglog.security.tls import ClientSecurity, TlsFiles
from seglog.storage.remote_store import RemoteStorageConfig
from seglog.v1 import gateway_pb2_grpc
from services.gateway.server import Gateway
from services.gateway.settings import GatewayConfig
from services.storage_node.server import StorageNode
from services.storage_node.settings import NodeConfig
from tests.ports import free_port_run, free_ports

HEARTBEAT_MS = 100
# The bulk fetch path is on in test clusters (consumers use it by default), as under make run.
CLUSTER_SECRET = b"test-cluster-secret-0123456789"
SESSION_TIMEOUT_MS = 1500
# Small groups settle fast: few offsets partitions, a short first-rebalance wait, and
# consumer sessions short enough for tests to watch one expire.
GROUP_SETTINGS = {
    "offsets_topic_num_partitions": 3,
    "group_initial_rebalance_delay_ms": 200,
    "group_min_session_timeout_ms": 100,
}


class LocalCluster:
    def __init__(
        self,
        root: Path,
        nodes: int = 3,
        tracer_provider=None,
        meter_provider_for=None,
        node_configs: dict[str, str] | None = None,
        tls: bool = False,
        node_identity_prefix: str = NODE_IDENTITY_PREFIX,
        remote_storage: RemoteStorageConfig | None = None,
        node_settings: dict[str, object] | None = None,
        **gateway_config,
    ) -> None:
        """`tls`: a cluster CA made for this cluster (under root/tls), the gateway and each
        node with their own certificates (mutual TLS inside the cluster); `client_security`
        is what a client with certificate `client` needs."""
        self.root = root
        self.ca: CertificateAuthority | None = None
        if tls:
            self.ca = CertificateAuthority.create()
            self.ca.write(root / "tls")
            gateway_config.setdefault("tls", self.tls_files(GATEWAY_IDENTITY))
            gateway_config.setdefault("node_identity_prefix", node_identity_prefix)
        self.node_identity_prefix = node_identity_prefix
        self.node_configs = dict(node_configs or {})
        # Tiered storage: every node copies to this store, and topics may enable it.
        self.remote_storage = remote_storage
        # NodeConfig fields for every node (settings that are not engine configs).
        self.node_settings = dict(node_settings or {})
        if remote_storage is not None:
            gateway_config.setdefault("remote_log_storage_system_enable", True)
        self.cluster_secret = gateway_config.get("cluster_secret", CLUSTER_SECRET)
        self.tracer_provider = tracer_provider
        # service name ("gateway", "node-<id>") -> its MeterProvider, or None: metrics off
        self.meter_provider_for = meter_provider_for or (lambda name: None)
        # Test clusters create no topic a client merely names (a misspelt topic in a test is
        # an error, not a topic): the tests of auto-creation turn it on.
        self.gateway_config = {
            **GROUP_SETTINGS,
            "auto_create_topics_enable": False,
            **gateway_config,
        }
        # Every test cluster also speaks Kafka's protocol (services/gateway/kafka), on a free
        # port kept across gateway restarts (plaintext: none beside a TLS cluster's gRPC).
        # Each storage node is a Kafka broker at that port + its id (kafka/node_lanes.py): a
        # run of free ports, so node lanes bind where the rule puts them and a restarted
        # gateway gives every node the address it had.
        if not tls:
            self.gateway_config.setdefault("kafka_listen", f"127.0.0.1:{free_port_run(8)}")
        self.gateway: Gateway | None = None
        self.nodes: dict[int, StorageNode] = {}
        self.node_ports: dict[int, int] = {}
        self.start_gateway()
        for node_id in range(1, nodes + 1):
            self.start_node(node_id)
        self.client = GatewayClient(self.address, security=self.client_security())
        self.admin = self.admin_as("client")
        security = self.client_security()
        self.channel = (
            grpc.insecure_channel(self.address)
            if security is None
            else grpc.secure_channel(self.address, security.channel_credentials())
        )
        self.stub = gateway_pb2_grpc.GatewayStub(self.channel)

    def tls_files(self, identity: str) -> TlsFiles:
        """A certificate for `identity` from the cluster CA (made once, kept under root/tls)."""
        assert self.ca is not None
        directory = self.root / "tls"
        cert, key = directory / f"{identity}.pem", directory / f"{identity}.key"
        if not cert.exists():
            write_issued(self.ca.issue(identity), directory, identity)
        return TlsFiles(cert, key, directory / "ca.pem")

    def client_ssl_config(self, identity: str) -> dict[str, str]:
        """A client's settings (Kafka's names) for TLS with `identity`'s certificate."""
        files = self.tls_files(identity)
        return {
            "security_protocol": "SSL",
            "ssl_cafile": str(files.ca),
            "ssl_certfile": str(files.cert),
            "ssl_keyfile": str(files.key),
        }

    def client_security(self, identity: str = "client") -> ClientSecurity | None:
        if self.ca is None:
            return None
        files = self.tls_files(identity)
        return ClientSecurity(files.ca, files.cert, files.key)

    def admin_as(self, identity: str) -> Admin:
        """An Admin with `identity`'s certificate on a TLS cluster, plaintext otherwise."""
        security = self.client_security(identity)
        if security is None:
            return Admin(self.address, security_protocol="PLAINTEXT")
        return Admin(
            self.address,
            ssl_cafile=str(security.ca),
            ssl_certfile=str(security.cert),
            ssl_keyfile=str(security.key),
        )

    @property
    def address(self) -> str:
        assert self.gateway is not None
        return self.gateway.address

    @property
    def kafka_address(self) -> str:
        """The gateway's Kafka listener (bootstrap.servers for Kafka clients)."""
        assert self.gateway is not None
        return self.gateway.kafka_address

    def start_gateway(self, port: int = 0, kafka_port: int = 0, internal_port: int = 0) -> Gateway:
        port = port or free_ports(1)[0]  # as a node's: restart_gateway binds it again
        # The nodes' listener too: the nodes keep calling it across a restart.
        internal_port = internal_port or free_ports(1)[0]
        settings = {
            "cluster_secret": CLUSTER_SECRET,
            "session_timeout_ms": SESSION_TIMEOUT_MS,
            "heartbeat_interval_ms": HEARTBEAT_MS,
            **self.gateway_config,
        }
        if kafka_port and settings.get("kafka_listen"):
            protocol, _, address = str(settings["kafka_listen"]).rpartition("://")
            host = address.rsplit(":", 1)[0]
            settings["kafka_listen"] = f"{protocol or 'PLAINTEXT'}://{host}:{kafka_port}"
        settings.setdefault("internal_listen", f"127.0.0.1:{internal_port}")
        config = GatewayConfig(
            listen=f"127.0.0.1:{port}",
            data_dir=self.root / "gateway",
            **settings,
        )
        self.gateway = Gateway(
            config,
            tracer_provider=self.tracer_provider,
            meter_provider=self.meter_provider_for("gateway"),
        )
        self.gateway.start()
        return self.gateway

    def start_node(self, node_id: int, **engine_configs: str) -> StorageNode:
        # A port of its own for good, below the ephemeral range (tests/ports.py): a restart
        # binds it again, and meanwhile no other socket of the run can have taken it.
        port = self.node_ports.get(node_id) or free_ports(1)[0]
        config = NodeConfig(
            node_id=node_id,
            listen=f"127.0.0.1:{port}",
            data_dir=self.root / f"node-{node_id}",
            gateway=self.gateway.internal_address,
            heartbeat_interval_ms=HEARTBEAT_MS,
            engine_configs={**self.node_configs, **engine_configs},
            cluster_secret=self.cluster_secret,
            tls=None
            if self.ca is None
            else self.tls_files(node_identity(node_id, self.node_identity_prefix)),
            node_identity_prefix=self.node_identity_prefix,
            remote_storage=self.remote_storage,
            **self.node_settings,
        )
        node = StorageNode(
            config,
            tracer_provider=self.tracer_provider,
            meter_provider=self.meter_provider_for(f"node-{node_id}"),
        )
        node.start()
        self.node_ports[node_id] = node.port
        self.nodes[node_id] = node
        assert node.session is not None and node.session.registered.wait(15)
        return node

    def stop_node(self, node_id: int, *, controlled: bool = True) -> None:
        """Stop a node; `controlled=False` skips the controlled shutdown, so its leaderships
        move only when its session expires (a crash, as far as the registry can tell)."""
        self.nodes.pop(node_id).stop(grace_s=0 if not controlled else 2, controlled=controlled)

    def restart_gateway(self) -> Gateway:
        """Stop the gateway and start a new one on the same port and data dir."""
        assert self.gateway is not None
        port, internal_port = self.gateway.port, self.gateway.internal_port
        listener = self.gateway.kafka_listener
        kafka_port = listener.port if listener is not None else 0
        self.gateway.stop(grace_s=1)
        return self.start_gateway(port, kafka_port, internal_port)

    def leader_of(self, topic: str, partition: int) -> StorageNode:
        assert self.gateway is not None
        return self.nodes[self.gateway.registry.route(topic, partition).leader]

    def log(self, topic: str, partition: int):
        return self.leader_of(topic, partition).logs.get_log(topic, partition)

    def close(self) -> None:
        self.client.close()
        self.admin.close()
        self.channel.close()
        for node_id in list(self.nodes):
            self.stop_node(node_id)
        if self.gateway is not None:
            self.gateway.stop(grace_s=2)


def local_cluster_command(data_dir, *extra: str, nodes: int = 3, listen="127.0.0.1:0"):
    """`make run`'s command line (devtools.local_cluster) on free ports."""
    return [
        sys.executable,
        "-m",
        "devtools.local_cluster",
        "--data-dir",
        str(data_dir),
        "--listen",
        listen,
        "--nodes",
        str(nodes),
        *extra,
    ]


def run_cli(*args, bootstrap, stdin=None):
    """`seglog ARGV` as a process against `bootstrap`: its CompletedProcess."""
    env = {**os.environ, "SEGLOG_BOOTSTRAP": bootstrap}
    return subprocess.run(
        [sys.executable, "-m", "seglog.cli.main", *args],
        input=stdin,
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
    )


def drain(consumer, expected: int, timeout_s: float = 20):
    """Poll until `expected` records arrived or the deadline passed; what arrived."""
    out = []
    deadline = time.monotonic() + timeout_s
    while len(out) < expected and time.monotonic() < deadline:
        out.extend(consumer.poll_records(timeout_ms=200))
    return out


def cli_in_process(cluster, capsys, monkeypatch, *argv, stdin=b""):
    """`seglog ARGV --bootstrap <cluster>` in this process: (exit code, stdout, stderr)."""
    from seglog.cli.main import main

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    code = main([*argv, "--bootstrap", cluster.address])
    captured = capsys.readouterr()
    return code, captured.out, captured.err
