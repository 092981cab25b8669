"""A cluster of separate processes sharing one registry in a real etcd: several gateways and
storage nodes on loopback, for the tests that kill, pause and restart them (SIGKILL,
SIGSTOP, etcd down). Every process is stopped by its own pid."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import grpc

from devtools.embedded_etcd import EtcdProcess
from devtools.processes import ServerProcess, gateway_process, node_process, start_all
from seglog.client.admin import Admin
from seglog.client.gateway import GatewayClient
from seglog.security.certs import node_identity
from seglog.v1 import gateway_pb2, gateway_pb2_grpc
from tests.cluster import CLUSTER_SECRET
from tests.ports import free_port_run, free_ports
from tests.secured import OPERATOR, ClusterCertificates
from tests.waiting import wait_until

SESSION_TIMEOUT_MS = 3000  # nodes' and gateways' leases: 3 s


class GatewayQueries:
    """What a test asks each of several gateways (`gateway_addresses`, by index); on a
    secured cluster (`certificates` set), as its operator."""

    gateway_addresses: list[str]
    certificates: ClusterCertificates | None = None

    @property
    def bootstrap(self) -> str:
        return ",".join(self.gateway_addresses)

    def admin(self, index: int) -> Admin:
        if self.certificates is not None:
            return self.certificates.admin(self.gateway_addresses[index])
        return Admin(self.gateway_addresses[index], security_protocol="PLAINTEXT")

    def channel(self, address: str, identity: str = OPERATOR) -> grpc.Channel:
        """A channel to one gateway, with `identity`'s certificate on a secured cluster."""
        if self.certificates is None:
            return grpc.insecure_channel(address)
        credentials = self.certificates.client_security(identity).channel_credentials()
        return grpc.secure_channel(address, credentials)

    def describe_cluster(self, index: int) -> gateway_pb2.DescribeClusterResponse:
        with self.channel(self.gateway_addresses[index]) as channel:
            stub = gateway_pb2_grpc.GatewayStub(channel)
            return stub.DescribeCluster(gateway_pb2.DescribeClusterRequest(), timeout=5)

    def controller(self, index: int) -> str | None:
        """The controller gateway index `index` knows of (None: it does not answer)."""
        try:
            return self.describe_cluster(index).controller
        except grpc.RpcError:
            return None

    def live_nodes(self, index: int) -> list[int]:
        try:
            return sorted(n.node_id for n in self.describe_cluster(index).nodes if n.live)
        except grpc.RpcError:
            return []


class EtcdBackedCluster(GatewayQueries):
    def __init__(
        self,
        root: Path,
        *,
        gateways: int = 2,
        nodes: int = 3,
        node_gateway_order=None,
        secured: bool = False,
        gateway_args: tuple[str, ...] = (),
        node_args: tuple[str, ...] = (),
    ) -> None:
        """`node_gateway_order`: the gateway indexes, in order, nodes are given (default all
        in order). `secured`: production's configuration — mutual TLS on every gRPC and
        Kafka listener (tests/secured.py) and the authorizer on, OPERATOR the only super user
        (tests grant their own principals what they need). `gateway_args`: more flags for
        every gateway; `node_args`: for every node."""
        self.root = root
        (root / "logs").mkdir(parents=True, exist_ok=True)
        gateway_security: list[str] = []
        if secured:
            self.certificates = ClusterCertificates(root / "tls")
            gateway_security = [
                *self.certificates.server_flags(),
                *("--authorizer", "true", "--super-users", f"User:{OPERATOR}"),
            ]
        self.etcd = EtcdProcess(root / "etcd", log_path=root / "logs" / "etcd.log")
        self.etcd.start()
        self.env = {"SEGLOG_CLUSTER_SECRET": CLUSTER_SECRET.decode()}
        ports = free_ports(3 * gateways)
        self.gateway_addresses = [f"127.0.0.1:{p}" for p in ports[:gateways]]
        # Where the nodes call each gateway (its internal listener), known before it starts.
        self.internal_addresses = [f"127.0.0.1:{p}" for p in ports[2 * gateways :]]
        # Each gateway's Kafka listener (services/gateway/kafka), on a run of free ports: its
        # nodes' lanes are at its port + each node id, the rule every gateway counts on.
        self.kafka_addresses = [f"127.0.0.1:{free_port_run(8)}" for _ in range(gateways)]
        self.gateways = [
            gateway_process(
                address,
                root / f"gateway-{i}",
                internal_listen=self.internal_addresses[i],
                extra_args=[
                    "--registry-etcd",
                    self.etcd.endpoint,
                    "--session-timeout-ms",
                    str(SESSION_TIMEOUT_MS),
                    "--gateway-session-timeout-ms",
                    str(SESSION_TIMEOUT_MS),
                    "--heartbeat-interval-ms",
                    "200",
                    "--offsets-topic-num-partitions",
                    "3",
                    "--group-initial-rebalance-delay-ms",
                    "200",
                    "--group-min-session-timeout-ms",
                    "100",
                    "--transaction-state-log-num-partitions",
                    "3",
                    "--transaction-abort-timed-out-transaction-cleanup-interval-ms",
                    "500",
                    "--default-replication-factor",
                    str(min(3, nodes)),
                    "--offsets-topic-replication-factor",
                    str(min(3, nodes)),
                    "--kafka-listen",
                    f"SSL://{self.kafka_addresses[i]}" if secured else self.kafka_addresses[i],
                    *gateway_security,
                    *gateway_args,
                ],  # fmt: skip
                env=self.env,
                stderr_path=root / "logs" / f"gateway-{i}.log",
            )
            for i, address in enumerate(self.gateway_addresses)
        ]
        order = node_gateway_order or range(gateways)
        self.node_gateways = ",".join(self.internal_addresses[i] for i in order)
        self.nodes = {
            n: node_process(
                n,
                "127.0.0.1:0",
                root / f"node-{n}",
                self.node_gateways,
                extra_args=[
                    *("--heartbeat-interval-ms", "200", "--config", "min.insync.replicas=2"),
                    *(self.certificates.server_flags(node_identity(n)) if secured else ()),
                    *node_args,
                ],
                env=self.env,
                stderr_path=root / "logs" / f"node-{n}.log",
            )
            for n in range(1, nodes + 1)
        }
        try:
            self.gateways[0].start()  # first, so it is elected controller
            assert wait_until(lambda: self.controller(0) == self.gateway_addresses[0], 30)
            # Every gateway before the nodes: a node takes the first of its gateways that
            # answers, and node_gateway_order says which that is.
            start_all(self.gateways[1:])
            start_all(list(self.nodes.values()))
            assert wait_until(lambda: len(self.live_nodes(0)) == nodes, 30)
        except BaseException:
            self.close()
            raise

    def client(self, index: int | None = None) -> GatewayClient:
        address = self.bootstrap if index is None else self.gateway_addresses[index]
        security = None
        if self.certificates is not None:
            security = self.certificates.client_security(OPERATOR)
        return GatewayClient(address, security=security)

    def log(self, name: str) -> str:
        return (self.root / "logs" / f"{name}.log").read_text(errors="replace")

    def pause(self, process: ServerProcess) -> None:
        os.kill(process.pid, signal.SIGSTOP)

    def resume(self, process: ServerProcess) -> None:
        os.kill(process.pid, signal.SIGCONT)

    def close(self) -> None:
        for process in [*self.nodes.values(), *self.gateways]:
            if process.process is not None and process.alive():
                self.resume(process)  # a paused process cannot act on SIGTERM
            process.stop(grace_s=10)
        self.etcd.stop()
