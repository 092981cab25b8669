"""The campaign's cluster: a gateway and three storage nodes, each a process of its own
(RF 3, min ISR 2), optionally each in a network namespace of its own (tests/faults/netns.py)
and behind a fault proxy for clients (tests/faults/proxy.py); and the questions the campaign
asks it (healed? who leads? how much is written?)."""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from devtools.processes import ServerProcess, gateway_process, node_process, start_all
from seglog.client.admin import Admin
from seglog.client.gateway import LATEST, GatewayClient
from tests.faults.share_campaign import GATEWAY_ARGS as SHARE_GATEWAY_ARGS
from tests.ports import free_port_run, free_ports
from tests.waiting import wait_for

TOPIC = "campaign"
PARTITIONS = 3
NODES = 3
SESSION_TIMEOUT_MS = 2000
NODE_CONFIGS = {
    "min.insync.replicas": "2",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.wait.max.ms": "100",
    "replica.fetch.backoff.ms": "200",
    "controlled.shutdown.timeout.ms": "5000",
}
CLUSTER_SECRET = "campaign-cluster-secret-0123456789"
HEAL_TIMEOUT_S = 90.0
NOTICE_TIMEOUT_S = 30.0


class Cluster:
    """Gateways on fixed ports (so clients and nodes find them again after a restart) and
    three storage nodes, each a process. One gateway keeps the registry in its data dir; with
    `etcd`, two gateways share a registry in an etcd process (one of them the controller).
    With a network lab, each server runs in a namespace of its own, listening on its
    namespace's address; with proxies, clients reach each gateway through one of them."""

    def __init__(
        self,
        root: Path,
        lab: Any = None,
        use_proxy: bool = False,
        etcd: bool = False,
        node_disks: bool = False,
        leader_imbalance_check_interval_s: int = 3,
        kafka_proxy: bool = False,
        gateway_args: Sequence[str] = (),
        node_args: Sequence[str] = (),
        node_env: Mapping[str, str] | None = None,
    ) -> None:
        if etcd and lab is not None:
            raise ValueError("etcd runs on loopback: no network lab with etcd (yet)")
        self.root = root
        self.lab = lab
        self.etcd: Any = None
        self.gateways: list[ServerProcess] = []
        self.nodes: dict[int, ServerProcess] = {}
        self._client: GatewayClient | None = None
        self._admin: Admin | None = None
        self.clients: Any = None  # the campaign's client processes, for client faults
        self.proxies: list[Any] = []  # one fault proxy in front of each gateway
        # With `kafka_proxy`: fault proxies (Kafka framing) in front of each gateway's Kafka
        # listener and each of its node lanes (the listener's port + node id), advertised to
        # Kafka clients in their place, so every Kafka answer can be lost or delayed.
        self.kafka_proxies: list[Any] = []
        self.kafka_client_addresses: list[str] = []
        self.gateway_args = list(gateway_args)
        # A tiered campaign's store flags and secret (tiered_campaign.py TieredStore).
        self.node_args = list(node_args)
        self.node_env = dict(node_env or {})
        self.store: Any = None  # the object store, for store faults (store_faults.py)
        self.hosts: dict[str, str] = {}  # process name -> the IP it listens on
        self.kafka_addresses: list[str] = []  # each gateway's Kafka listener
        self.disks: Any = None  # each node's own loop-mounted filesystem, for disk faults
        self._foreign = 0  # foreign gateways started (node-foreign-registry)
        # The controller's preferred-leader elections: often, so faults move leaders back.
        self.leader_imbalance_check_interval_s = leader_imbalance_check_interval_s
        try:
            self._start(use_proxy, etcd, node_disks, kafka_proxy)
        except BaseException:
            self.close()  # whatever did start
            raise

    def _start(self, use_proxy: bool, etcd: bool, node_disks: bool, kafka_proxy: bool) -> None:
        root, lab = self.root, self.lab
        (root / "logs").mkdir(parents=True, exist_ok=True)
        if node_disks:
            from tests.faults.disks import NodeDisks

            self.disks = NodeDisks(root, list(range(1, NODES + 1)))
        env = {"SEGLOG_CLUSTER_SECRET": CLUSTER_SECRET}
        registry_args: list[str] = []
        if etcd:
            from devtools.embedded_etcd import EtcdProcess

            self.etcd = EtcdProcess(root / "etcd", log_path=root / "logs" / "etcd.log")
            self.etcd.start()
            registry_args = [
                "--registry-etcd",
                self.etcd.endpoint,
                "--gateway-session-timeout-ms",
                str(SESSION_TIMEOUT_MS),
            ]
        names = ["gateway-0", "gateway-1"] if etcd else ["gateway"]
        if lab is not None:
            for name in (*names, *(f"node-{n}" for n in range(1, NODES + 1))):
                self.hosts[name] = lab.add_host(name)
        # Each gateway's clients' port, its nodes' (internal) port and its Kafka listener's:
        # fixed, so a gateway restarted is found where its nodes and clients call it.
        ports = free_ports(3 * len(names))
        if kafka_proxy:  # each listener's port and its lanes' next to it, free
            ports[2 * len(names) :] = [free_port_run(NODES + 1) for _ in names]
        self.kafka_addresses = [
            f"{self.hosts.get(name, '127.0.0.1')}:{port}"
            for name, port in zip(names, ports[2 * len(names) :], strict=True)
        ]
        advertised: list[list[str]] = [[] for _ in names]
        if kafka_proxy:
            from tests.faults.proxy import FaultProxy

            for index, address in enumerate(self.kafka_addresses):
                host, _, port = address.rpartition(":")
                first = free_port_run(NODES + 1)
                self.kafka_proxies += [
                    FaultProxy(f"{host}:{int(port) + lane}", "kafka", first + lane)
                    for lane in range(NODES + 1)
                ]
                advertised[index] = ["--kafka-advertised-listen", f"127.0.0.1:{first}"]
                self.kafka_client_addresses.append(f"127.0.0.1:{first}")
        else:
            self.kafka_client_addresses = list(self.kafka_addresses)
        self.gateways += [
            gateway_process(
                f"{self.hosts.get(name, '127.0.0.1')}:{port}",
                root / name,
                internal_listen=f"{self.hosts.get(name, '127.0.0.1')}:{internal_port}",
                extra_args=[
                    *registry_args,
                    "--session-timeout-ms",
                    str(SESSION_TIMEOUT_MS),
                    "--heartbeat-interval-ms",
                    "200",
                    "--default-replication-factor",
                    "3",
                    "--offsets-topic-replication-factor",
                    "3",
                    "--leader-imbalance-check-interval-seconds",
                    str(self.leader_imbalance_check_interval_s),
                    # Kafka's door too, for the client flood (flood_fault.py ClientFlooding)
                    # and the share members (share_campaign.py), which read from the start.
                    "--kafka-listen",
                    kafka_address,
                    *SHARE_GATEWAY_ARGS,
                    *kafka_advertised,
                    *self.gateway_args,
                ],
                stderr_path=root / "logs" / f"{name}.log",
                env=env,
                **self._prefix(name),
            )
            for name, port, internal_port, kafka_address, kafka_advertised in zip(
                names,
                ports[: len(names)],
                ports[len(names) : 2 * len(names)],
                self.kafka_addresses,
                advertised,
                strict=True,
            )
        ]
        # every gateway's address, in order: clients fail over along it, nodes along the
        # gateways' internal addresses
        self.address = ",".join(gateway.start() for gateway in self.gateways)
        self.internal_address = ",".join(gateway.internal_address for gateway in self.gateways)
        for node_id in range(1, NODES + 1):
            configs = [arg for k, v in NODE_CONFIGS.items() for arg in ("--config", f"{k}={v}")]
            node = node_process(
                node_id,
                f"{self.hosts.get(f'node-{node_id}', '127.0.0.1')}:0",
                root / f"node-{node_id}",
                self.internal_address,
                extra_args=["--heartbeat-interval-ms", "200", *configs, *self.node_args],
                stderr_path=root / "logs" / f"node-{node_id}.log",
                env={**env, **self.node_env},
                **self._prefix(f"node-{node_id}"),
            )
            self.nodes[node_id] = node
        start_all(list(self.nodes.values()))
        self._client = GatewayClient(self.address, timeout_s=5)
        self._admin = Admin(self.address, timeout_s=5)
        if use_proxy:
            from tests.faults.proxy import FaultProxy

            self.proxies = [FaultProxy(gateway.address) for gateway in self.gateways]
        # A node prints its address before its first heartbeat reaches the gateway.
        wait_for(self.all_registered, HEAL_TIMEOUT_S, "every node registered")

    @property
    def client(self) -> GatewayClient:
        """A client of the gateways, for the campaign's own questions (not the workload's)."""
        assert self._client is not None
        return self._client

    @property
    def admin(self) -> Admin:
        """Admin of the gateways, for the campaign's own topics and cluster questions."""
        assert self._admin is not None
        return self._admin

    @property
    def gateway(self) -> ServerProcess:
        return self.gateways[0]

    def controller(self) -> int:
        """The index of the controller gateway (0 when it cannot be told)."""
        try:
            address = self.admin.describe_cluster().controller
        except Exception:
            return 0
        addresses = [gateway.address for gateway in self.gateways]
        return addresses.index(address) if address in addresses else 0

    def _prefix(self, host: str) -> dict[str, Any]:
        if self.lab is None:
            return {}
        return {"command_prefix": self.lab.command_prefix(host)}

    @property
    def client_address(self) -> str:
        """Where clients connect: the proxies when there are some, else the gateways."""
        if not self.proxies:
            return self.address
        return ",".join(proxy.address for proxy in self.proxies)

    def answer_proxies(self) -> list[Any]:
        """Every fault proxy clients' answers pass: the gRPC ones and the Kafka ones."""
        return [*self.proxies, *self.kafka_proxies]

    def answers_dropped(self) -> int:
        return sum(int(proxy.answers_dropped) for proxy in self.answer_proxies())

    def topic(self) -> Any:
        [topic] = self.client.describe_topics([TOPIC])
        return topic

    def healed(self) -> bool:
        try:
            topic = self.topic()
        except Exception:
            return False
        return all(
            p.leader >= 0 and sorted(p.isr) == sorted(p.replicas) and not p.error
            for p in topic.partitions
        ) and all(process.alive() for process in self.processes())

    def processes(self) -> list[Any]:
        """Every server process: nodes, gateways and etcd."""
        return [*self.nodes.values(), *self.gateways, *([self.etcd] if self.etcd else [])]

    def state(self) -> str:
        alive = {f"node-{n}": node.alive() for n, node in self.nodes.items()}
        alive.update({f"gateway-{i}": g.alive() for i, g in enumerate(self.gateways)})
        try:
            topic = self.topic()
        except Exception as exc:
            return f"processes alive {alive}; describe failed: {exc}"
        parts = []
        for p in topic.partitions:
            replicas = [(r.node_id, r.log_end_offset, r.high_watermark) for r in p.replica_states]
            parts.append(
                f"p{p.partition} leader {p.leader} epoch {p.leader_epoch} isr {list(p.isr)} "
                f"elr {list(p.eligible_leader_replicas)} replicas (node, end, hw) {replicas}"
            )
        return f"processes alive {alive}; " + "; ".join(parts)

    def all_registered(self) -> bool:
        try:
            live = {n.node_id for n in self.admin.describe_cluster().nodes if n.live}
        except Exception:
            return False
        return live == set(self.nodes)

    def live(self, node_id: int) -> bool:
        """Whether the registry counts the node live (True when it cannot be asked)."""
        try:
            nodes = self.admin.describe_cluster().nodes
        except Exception:
            return True
        return any(n.node_id == node_id and n.live for n in nodes)

    def leader_of(self, partition: int) -> int:
        try:
            for p in self.topic().partitions:
                if p.partition == partition:
                    return int(p.leader)
        except Exception:
            pass
        return -1

    def records_written(self) -> int:
        """The sum of the partitions' high watermarks (0 when the gateway cannot answer)."""
        try:
            ends = self.client.list_offsets(TOPIC, dict.fromkeys(range(PARTITIONS), LATEST))
        except Exception:
            return 0
        return sum(max(0, r.offset) for r in ends.values())

    def caught_up(self) -> bool:
        """Every replica of every partition at the leader's log end, high watermarks equal."""
        try:
            topic = self.topic()
        except Exception:
            return False
        for p in topic.partitions:
            ends = {(r.log_end_offset, r.high_watermark) for r in p.replica_states}
            if len(ends) != 1 or (p.log_end_offset, p.high_watermark) not in ends:
                return False
        return True

    def start_foreign_gateway(self, near_node: int) -> ServerProcess:
        """A fresh gateway of another cluster (its own registry, its own cluster id) where
        node `near_node` reaches it: on loopback, or in that node's network namespace."""
        self._foreign += 1
        name = f"foreign-gateway-{self._foreign}"
        process = gateway_process(
            "127.0.0.1:0",
            self.root / name,
            extra_args=["--session-timeout-ms", str(SESSION_TIMEOUT_MS)],
            stderr_path=self.root / "logs" / f"{name}.log",
            **self._prefix(f"node-{near_node}"),
        )
        process.start()
        return process

    def restart_gateway(self, index: int = 0) -> None:
        self.gateways[index].start()  # on its own address again

    def close(self) -> None:
        try:
            self._close_processes()
        finally:
            if self.disks is not None:
                self.disks.close()  # once no node holds its filesystem

    def _close_processes(self) -> None:
        if self._client is not None:
            self._client.close()
        if self._admin is not None:
            self._admin.close()
        for proxy in self.answer_proxies():
            proxy.close()
        for process in self.processes():
            if process.alive():
                try:
                    os.kill(process.pid, signal.SIGCONT)  # a paused process cannot stop
                except ProcessLookupError:
                    pass
            process.stop()
