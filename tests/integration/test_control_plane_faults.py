"""The control plane under cut links (issue 26): two gateways sharing a registry in a real
etcd, three storage nodes, each a real process, and loopback TCP links between them that the
test cuts and heals (`Link`): every byte stops, in both directions, on connections already
open and on new ones, as when packets are dropped; healing delivers what was held, as TCP
retransmission would.

- the gateways cut from etcd, then healed: the controller still elects when a leader dies
  afterwards, and no healthy node is taken for dead because its lease lapsed while the
  gateways could not renew it;
- a leader cut from the gateways (and so from etcd) while clients and followers still reach
  it: it stops claiming and serving its leaderships once its session can have ended, and
  never acknowledges a write the new leader does not have.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from devtools.embedded_etcd import EtcdProcess
from devtools.processes import ServerProcess, gateway_process, node_process, start_all
from seglog.client.consumer import Consumer
from seglog.client.gateway import GatewayClient
from seglog.client.structs import TopicPartition
from seglog.rpc.status import error_from_rpc
from seglog.v1 import common_pb2, storage_pb2, storage_pb2_grpc
from services.gateway.coordination.etcd_keys import KeyValue
from services.gateway.coordination.etcd_keyspace import EtcdKeyspace
from tests.batches import make_batch
from tests.cluster import CLUSTER_SECRET
from tests.multi_gateway import GatewayQueries
from tests.ports import free_ports
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(240)

SESSION_TIMEOUT_MS = 3000  # nodes' and gateways' leases: 3 s
SESSION_TIMEOUT_S = SESSION_TIMEOUT_MS / 1000
_CHUNK_BYTES = 65536
_POLL_S = 0.05


class Link:
    """A loopback TCP link to `target` that can be cut and healed. Cut, it forwards nothing
    either way (bytes wait in the socket buffers, new connections are accepted but carry
    nothing): the ends see silence, not a reset, as behind a dropped route. Healed, new
    connections flow at once, while those that lived through the cut may be held longer
    (`heal(held_s=...)`), as TCP resumes them only at their next retransmission, whose
    timer doubled with every loss during the cut."""

    def __init__(self, target: str) -> None:
        host, _, port = target.rpartition(":")
        self.target = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._lock = threading.Lock()
        self._is_cut = False
        self._gates: list[threading.Event] = []  # one per connection: set while it flows
        self._sockets: list[socket.socket] = []
        self._timers: list[threading.Timer] = []
        self._closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        with self._lock:
            self._is_cut = True
            for gate in self._gates:
                gate.clear()

    def heal(self, *, held_s: float = 0.0) -> None:
        with self._lock:
            self._is_cut = False
            for gate in self._gates:
                if held_s > 0:
                    timer = threading.Timer(held_s, gate.set)
                    timer.daemon = True
                    timer.start()
                    self._timers.append(timer)
                else:
                    gate.set()

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        with self._lock:
            for timer in self._timers:
                timer.cancel()
            for gate in self._gates:
                gate.set()
            for sock in self._sockets:
                sock.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                downstream, _ = self._listener.accept()
            except OSError:
                return
            gate = threading.Event()
            with self._lock:
                if not self._is_cut:
                    gate.set()
                self._gates.append(gate)
                self._sockets.append(downstream)
            threading.Thread(target=self._connect, args=(downstream, gate), daemon=True).start()

    def _connect(self, downstream: socket.socket, gate: threading.Event) -> None:
        self._wait(gate)
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            downstream.close()
            return
        with self._lock:
            self._sockets.append(upstream)
        for source, sink in ((downstream, upstream), (upstream, downstream)):
            threading.Thread(target=self._pump, args=(source, sink, gate), daemon=True).start()

    def _wait(self, gate: threading.Event) -> None:
        while not gate.wait(_POLL_S) and not self._closed.is_set():
            pass

    def _pump(self, source: socket.socket, sink: socket.socket, gate: threading.Event) -> None:
        source.settimeout(_POLL_S)
        try:
            while not self._closed.is_set():
                self._wait(gate)
                try:
                    data = source.recv(_CHUNK_BYTES)
                except TimeoutError:
                    continue
                if not data:
                    break
                self._wait(gate)  # read just before a cut: it waits for the heal
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


class LinkedCluster(GatewayQueries):
    """etcd, two gateways and three nodes as processes; each gateway reaches etcd through
    its own `Link` (`etcd_links`), and each node reaches the gateways through its own pair
    of links (`gateway_links[node][gateway]`). Gateway 0 starts first, so is controller."""

    def __init__(self, root: Path, *, nodes: int = 3) -> None:
        self.root = root
        self.processes: list[ServerProcess] = []
        self.links: list[Link] = []
        (root / "logs").mkdir(parents=True, exist_ok=True)
        self.etcd = EtcdProcess(root / "etcd", log_path=root / "logs" / "etcd.log")
        self.etcd.start()
        env = {"SEGLOG_CLUSTER_SECRET": CLUSTER_SECRET.decode()}
        try:
            self.etcd_links = [self._link(self.etcd.endpoint) for _ in range(2)]
            self.gateway_addresses = [f"127.0.0.1:{p}" for p in free_ports(2)]
            self.gateways = [
                self._process(gateway_process(
                    address,
                    root / f"gateway-{i}",
                    extra_args=[
                        "--registry-etcd", self.etcd_links[i].address,
                        "--session-timeout-ms", str(SESSION_TIMEOUT_MS),
                        "--gateway-session-timeout-ms", str(SESSION_TIMEOUT_MS),
                        "--heartbeat-interval-ms", "200",
                        "--offsets-topic-num-partitions", "1",
                        "--default-replication-factor", "3",
                        "--offsets-topic-replication-factor", "3",
                    ],
                    env=env,
                    stderr_path=root / "logs" / f"gateway-{i}.log",
                ))
                for i, address in enumerate(self.gateway_addresses)
            ]  # fmt: skip
            self.gateways[0].start()
            assert wait_until(lambda: self.controller(0) == self.gateway_addresses[0], 30)
            self.gateways[1].start()
            # Nodes call the gateways' internal listeners.
            self.gateway_links = {
                n: [self._link(gateway.internal_address) for gateway in self.gateways]
                for n in range(1, nodes + 1)
            }
            self.nodes = {
                n: self._process(node_process(
                    n,
                    "127.0.0.1:0",
                    root / f"node-{n}",
                    ",".join(link.address for link in self.gateway_links[n]),
                    extra_args=[
                        "--heartbeat-interval-ms", "200",
                        "--config", "min.insync.replicas=2",
                        "--config", "replica.lag.time.max.ms=3000",
                        "--config", f"broker.session.timeout.ms={SESSION_TIMEOUT_MS}",
                    ],
                    env=env,
                    stderr_path=root / "logs" / f"node-{n}.log",
                ))
                for n in range(1, nodes + 1)
            }  # fmt: skip
            start_all(list(self.nodes.values()))
            assert wait_until(lambda: self.live_nodes(0) == list(range(1, nodes + 1)), 30)
        except BaseException:
            self.close()
            raise

    def _link(self, target: str) -> Link:
        link = Link(target)
        self.links.append(link)
        return link

    def _process(self, process: ServerProcess) -> ServerProcess:
        self.processes.append(process)
        return process

    def client(self, index: int) -> GatewayClient:
        return GatewayClient(self.gateway_addresses[index], security=None)

    def registrations(self, index: int, topic: str) -> list[tuple[int, int, list[int]]]:
        """(leader, leader epoch, ISR) of each partition, as gateway `index` holds them."""
        with self.admin(index) as admin:
            return [
                (p.leader, p.leader_epoch, sorted(p.isr))
                for p in admin.describe_topic(topic).partitions
            ]

    def node_roles(self, node_id: int, topic: str, partition: int) -> tuple[str, int]:
        """(role, leader epoch) the node itself reports for the partition."""
        address = self.nodes[node_id].address
        with grpc.insecure_channel(address) as channel:
            stub = storage_pb2_grpc.StorageNodeStub(channel)
            [described] = stub.DescribePartitions(
                storage_pb2.DescribePartitionsRequest(
                    partitions=[storage_pb2.HostedPartitionRef(topic=topic, partition=partition)]
                ),
                timeout=5,
            ).partitions
            return described.role, described.leader_epoch

    def log(self, name: str) -> str:
        return (self.root / "logs" / f"{name}.log").read_text(errors="replace")

    def close(self) -> None:
        for process in reversed(self.processes):  # nodes first: their gateways see them off
            if process.process is not None:
                process.stop(grace_s=10)
        for link in self.links:
            link.close()
        self.etcd.stop()


def holds(predicate: Callable[[], bool], duration_s: float) -> bool:
    """True when `predicate` stays true for `duration_s` (checked until it fails)."""
    return not wait_until(lambda: not predicate(), duration_s)


@pytest.fixture
def cluster(tmp_path):
    running = LinkedCluster(tmp_path)
    yield running
    running.close()


def etcd_key(cluster: LinkedCluster, name: str) -> KeyValue | None:
    """A key as etcd holds it now (asked directly, not through the gateways' links)."""
    keyspace = EtcdKeyspace(cluster.etcd.endpoint)
    return keyspace.get(name)


def cut_gateways_from_etcd_until_leases_lapse(cluster: LinkedCluster) -> None:
    for link in cluster.etcd_links:
        link.cut()
    # etcd runs on: the gateways' leases, and the nodes' they renew, lapse there.
    assert wait_until(lambda: etcd_key(cluster, "controller") is None, 30)
    assert wait_until(lambda: etcd_key(cluster, "nodes/1") is None, 30)


@pytest.mark.long  # a leader cut from the gateways (below) stays in make test
@pytest.mark.slow
def test_the_controller_elects_after_its_etcd_link_heals(cluster):
    with cluster.admin(0) as admin:
        admin.create_topic("orders", 3, 3)
    cut_gateways_from_etcd_until_leases_lapse(cluster)
    # The watch streams, open through the cut, resume seconds after new calls pass: their
    # news (the controller key deleted by the lapse) arrives after a new election.
    held_s = 6 * SESSION_TIMEOUT_S
    healed = time.monotonic()
    for link in cluster.etcd_links:
        link.heal(held_s=held_s)
    assert wait_until(lambda: etcd_key(cluster, "controller") is not None, 30)
    assert wait_until(lambda: time.monotonic() > healed + held_s + 1, held_s + 5)
    leader, epoch, _ = cluster.registrations(0, "orders")[0]
    cluster.nodes[leader].kill()

    def replaced() -> bool:
        return all(
            r[0][0] not in (leader, -1) and r[0][1] > epoch
            for r in (cluster.registrations(0, "orders"), cluster.registrations(1, "orders"))
        )

    assert wait_until(replaced, 10 * SESSION_TIMEOUT_S), (
        f"node {leader} died and partition 0 still has {cluster.registrations(0, 'orders')[0]}"
        f" (controller: {cluster.controller(0)})"
    )


@pytest.mark.long  # a leader cut from the gateways (below) stays in make test
@pytest.mark.slow
def test_a_lease_lapsed_while_the_gateways_were_cut_from_etcd_is_not_a_death(cluster):
    with cluster.admin(0) as admin:
        admin.create_topic("orders", 3, 3)
    before = cluster.registrations(0, "orders")
    dead = before[2][0]
    survivors = sorted({1, 2, 3} - {dead})
    cut_gateways_from_etcd_until_leases_lapse(cluster)
    # No one can elect through the cut: the leaders lead on, and acks=all writes go on.
    assert holds(
        lambda: all(cluster.node_roles(before[p][0], "orders", p)[0] == "leader" for p in range(3)),
        2 * SESSION_TIMEOUT_S,
    )
    with cluster.client(0) as client:
        for p in range(3):
            [result] = client.produce("orders", {p: make_batch([b"during the cut"])}, acks=-1)
            assert not result.error, result.error_message
    cluster.nodes[dead].kill()  # one node does die meanwhile: that death must still count
    for link in cluster.etcd_links:
        link.heal()
    assert wait_until(lambda: etcd_key(cluster, f"nodes/{survivors[0]}") is not None, 30)

    def survivors_keep_their_standing() -> bool:
        now = cluster.registrations(0, "orders")
        return all(
            now[p][:2] == before[p][:2] and set(survivors) <= set(now[p][2])
            for p in range(3)
            if before[p][0] in survivors
        )

    assert holds(survivors_keep_their_standing, 4 * SESSION_TIMEOUT_S), (
        f"before the cut {before}, after it {cluster.registrations(0, 'orders')}"
    )
    assert wait_until(lambda: cluster.registrations(0, "orders")[2][0] in survivors, 30)
    assert cluster.live_nodes(0) == survivors == cluster.live_nodes(1)
    assert survivors_keep_their_standing()


def append_directly(cluster: LinkedCluster, node_id: int, acks: int, value: bytes) -> str:
    """Produce to a node as a client whose metadata still names it leader would: "" when
    acknowledged, else the error's reason."""
    with grpc.insecure_channel(cluster.nodes[node_id].address) as channel:
        stub = storage_pb2_grpc.StorageNodeStub(channel)
        request = common_pb2.ProduceRequest(topic="orders", acks=acks, timeout_ms=3000)
        request.partitions.add(partition=0, records=make_batch([value]))
        try:
            [result] = stub.Append(request, timeout=15).partitions
        except grpc.RpcError as exc:
            return str(error_from_rpc(exc).reason)
        return common_pb2.ErrorCode.Name(result.error) if result.error else ""


@pytest.mark.slow
def test_a_leader_cut_from_the_gateways_stops_leading(cluster):
    """The leader's links to both gateways cut (so it cannot heartbeat, and its lease
    lapses), while clients and its followers still reach it: once another node is elected,
    it no longer claims the partition nor acknowledges what a client with stale metadata
    sends it; healed, it follows the new leader and keeps nothing the new leader lacks."""
    with cluster.admin(0) as admin:
        admin.create_topic("orders", 1, 3)
    with cluster.client(0) as client:
        for i in range(3):
            # acks=all: acknowledged means below the high watermark, which the final read
            # reads up to (acks=1 could leave the last record above it for a moment).
            [result] = client.produce("orders", {0: make_batch([b"before-%d" % i])}, acks=-1)
            assert not result.error, result.error_message
    leader, epoch, _ = cluster.registrations(0, "orders")[0]
    for link in cluster.gateway_links[leader]:
        link.cut()
    assert wait_until(lambda: cluster.registrations(0, "orders")[0][1] > epoch, 30)
    new_leader = cluster.registrations(0, "orders")[0][0]
    assert new_leader not in (leader, -1)
    # Fenced at its session's end, about when the controller elects: no second leader.
    assert wait_until(lambda: cluster.node_roles(leader, "orders", 0) == ("", epoch), 5)
    assert cluster.node_roles(new_leader, "orders", 0)[0] == "leader"
    for acks in (1, -1):
        assert append_directly(cluster, leader, acks, b"stale") == "NOT_LEADER_OR_FOLLOWER"
    with cluster.client(0) as client:
        [result] = client.produce("orders", {0: make_batch([b"after"])}, acks=-1)
        assert not result.error, result.error_message
    for link in cluster.gateway_links[leader]:
        link.heal()
    new_epoch = cluster.registrations(0, "orders")[0][1]
    assert wait_until(
        lambda: cluster.node_roles(leader, "orders", 0) == ("follower", new_epoch), 30
    )
    assert wait_until(lambda: leader in cluster.registrations(0, "orders")[0][2], 30)
    assert read_values(cluster.bootstrap, "orders") == [
        b"before-0", b"before-1", b"before-2", b"after"
    ]  # fmt: skip


def read_values(bootstrap: str, topic: str) -> list[bytes]:
    """Partition 0 of `topic`, read to its end."""
    tp = TopicPartition(topic, 0)
    with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        end = consumer.end_offsets([tp])[tp]
        out: list[bytes] = []
        deadline = time.monotonic() + 30
        while consumer.position(tp) < end and time.monotonic() < deadline:
            out.extend(r.value for r in consumer.poll_records(timeout_ms=500))
        return out
