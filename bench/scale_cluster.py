"""The scale group's cluster: one gateway and three storage nodes as real processes, as
deployed (a cluster secret: replication over the bulk path; the registry in the gateway's
data dir, or in an etcd member started here), and what the group asks of it from outside:
are the ISRs of some topics full, did a node lose its session or a leader change, how long
do leaderships take to leave a node that stops."""

from __future__ import annotations

import resource
import signal
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from devtools.embedded_etcd import EtcdProcess
from devtools.processes import ServerProcess, gateway_process, node_process
from seglog.client.admin import Admin
from seglog.errors import SeglogError
from services.gateway.coordination.etcd_keys import DEFAULT_PREFIX

from .cluster import CLUSTER_SECRET_ENV

NODE_IDS = (1, 2, 3)
REGISTER_TIMEOUT_S = 60.0
POLL_INTERVAL_S = 0.5

TopicPartitionKey = tuple[str, int]


@dataclass
class ScaleCluster:
    root: Path
    gateway: ServerProcess
    nodes: dict[int, ServerProcess]
    etcd: EtcdProcess | None

    @property
    def address(self) -> str:
        return self.gateway.address

    @property
    def gateway_data_dir(self) -> Path:
        return self.root / "gateway"

    @property
    def etcd_prefix(self) -> str:
        return DEFAULT_PREFIX

    def pids(self) -> dict[str, int]:
        pids = {"gateway": self.gateway.pid}
        pids.update({f"node {i}": n.pid for i, n in self.nodes.items() if n.alive()})
        return pids

    def log_tails(self, lines: int = 2) -> list[str]:
        """The last lines each process wrote to its stderr, for a step that went wrong."""
        out: list[str] = []
        for name in ("gateway", *(f"node-{i}" for i in self.nodes)):
            path = self.root / f"{name}.log"
            if path.exists():
                tail = path.read_text(errors="replace").strip().splitlines()[-lines:]
                out.extend(f"{name}: {line[:160]}" for line in tail)
        return out


def _raise_descriptor_limit() -> None:
    """Children inherit it: 10,000 replicas may need more descriptors than a default soft
    limit allows, and the hard limit is the machine's real bound."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


@contextmanager
def scale_cluster(
    prefix: str, *, etcd: bool, session_timeout_ms: int | None = None
) -> Iterator[ScaleCluster]:
    """Start it, wait for the three nodes to register, yield; stop every process by its own
    pid on the way out, whatever happened."""
    _raise_descriptor_limit()
    gateway_timeout, node_timeout = [], []
    if session_timeout_ms is not None:
        gateway_timeout = ["--session-timeout-ms", str(session_timeout_ms)]
        node_timeout = ["--config", f"broker.session.timeout.ms={session_timeout_ms}"]
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        root = Path(tmp)
        processes: list[ServerProcess] = []
        member = EtcdProcess(root / "etcd", log_path=root / "etcd.log") if etcd else None
        try:
            registry = [] if member is None else ["--registry-etcd", member.start()]
            gateway = gateway_process(
                "127.0.0.1:0",
                root / "gateway",
                extra_args=[*registry, *gateway_timeout],
                stderr_path=root / "gateway.log",
                env=CLUSTER_SECRET_ENV,
            )
            processes.append(gateway)
            gateway.start()
            nodes = {}
            for node_id in NODE_IDS:
                node = node_process(
                    node_id,
                    "127.0.0.1:0",
                    root / f"node-{node_id}",
                    gateway.internal_address,
                    extra_args=node_timeout,
                    stderr_path=root / f"node-{node_id}.log",
                    env=CLUSTER_SECRET_ENV,
                )
                processes.append(node)
                node.start()
                nodes[node_id] = node
            with Admin(gateway.address) as admin:
                deadline = time.monotonic() + REGISTER_TIMEOUT_S
                while sum(n.live for n in admin.describe_cluster().nodes) < len(NODE_IDS):
                    if time.monotonic() > deadline:
                        raise RuntimeError("the storage nodes never registered")
                    time.sleep(0.05)
            yield ScaleCluster(root, gateway, nodes, member)
        finally:
            # The nodes at once (each by its own pid): a stalled node's controlled shutdown
            # may use its whole grace period, and three in a row would triple it.
            stopping = [threading.Thread(target=p.stop) for p in processes[1:]]
            for thread in stopping:
                thread.start()
            for thread in stopping:
                thread.join()
            if processes:
                processes[0].stop()
            if member is not None:
                member.stop()


@dataclass
class LeaderWatch:
    """Every partition's (leader, leader epoch) as first seen; later sightings that differ
    are leader changes."""

    first_seen: dict[TopicPartitionKey, tuple[int, int]] = field(default_factory=dict)
    changed: set[TopicPartitionKey] = field(default_factory=set)

    def see(self, key: TopicPartitionKey, leader: int, leader_epoch: int) -> None:
        was = self.first_seen.setdefault(key, (leader, leader_epoch))
        if was != (leader, leader_epoch):
            self.changed.add(key)


def not_full(admin: Admin, topics: Iterable[str], leaders: LeaderWatch) -> tuple[set[str], str]:
    """The topics among `topics` with a partition whose ISR is not every replica, that has no
    leader, or that one of its replicas' nodes does not host yet (its view of the partition
    could not be read), and one example of what was wrong."""
    waiting: set[str] = set()
    example = ""
    for topic in admin.describe_topics(list(topics)):
        if topic.error:
            waiting.add(topic.name)
            example = example or f"{topic.name}: {topic.error_message}"
            continue
        for part in topic.partitions:
            leaders.see((topic.name, part.partition), part.leader, part.leader_epoch)
            hosted = all(r.log_end_offset >= 0 for r in part.replica_states)
            if part.leader < 0 or sorted(part.isr) != sorted(part.replicas) or not hosted:
                waiting.add(topic.name)
                example = example or (
                    f"{topic.name}-{part.partition}: leader {part.leader}, isr {list(part.isr)}"
                    f" of {list(part.replicas)}, hosted {hosted} {part.error_message}".strip()
                )
    return waiting, example


class SessionWatch:
    """Polls the cluster's view of the nodes from a thread: any node seen not live (fenced:
    its session lapsed) is noted with when."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.fenced: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._started = time.monotonic()

    def __enter__(self) -> SessionWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        with Admin(self.address, timeout_s=10) as admin:
            while not self._stop.wait(POLL_INTERVAL_S):
                try:
                    nodes = admin.describe_cluster().nodes
                except (SeglogError, grpc.RpcError):  # a busy gateway: ask again next round
                    continue
                for node in nodes:
                    if not node.live and node.node_id not in self.fenced:
                        self.fenced[node.node_id] = time.monotonic() - self._started


def leaders_by_node(admin: Admin) -> dict[int, int]:
    return {n.node_id: n.leader_partitions for n in admin.describe_cluster().nodes}


def busiest_third(admin: Admin, deadline_s: float) -> tuple[int, int] | str:
    """The node whose leaderships are nearest a third of all, and how many it leads, once
    every node is live (a cluster that stalled may take a while, or never: then what was
    seen, as text)."""
    deadline = time.monotonic() + deadline_s
    seen = ""
    while time.monotonic() < deadline:
        try:
            nodes = admin.describe_cluster().nodes
        except (SeglogError, grpc.RpcError) as exc:
            seen = str(exc)
        else:
            counts = {n.node_id: n.leader_partitions for n in nodes}
            seen = ", ".join(
                f"node {n.node_id} {'live' if n.live else 'not live'} leading {n.leader_partitions}"
                for n in nodes
            )
            leading = {n: led for n, led in counts.items() if led}
            if len(nodes) == len(NODE_IDS) and all(n.live for n in nodes) and leading:
                # After sessions were lost, leaderships may sit unbalanced until the next
                # preferred-leader election: then the node nearest a third of those that lead.
                third = sum(counts.values()) / 3
                node_id = min(leading, key=lambda n: abs(leading[n] - third))
                return node_id, counts[node_id]
        time.sleep(POLL_INTERVAL_S)
    return seen


def leaderships_moved_s(
    cluster: ScaleCluster, node_id: int, how: signal.Signals, deadline_s: float
) -> tuple[float | None, int]:
    """Send `how` to the node and time until every leadership it held is held by another
    node (a partition left without a leader has not moved); None when that did not happen
    within `deadline_s`. Also how many leaderships were missing at the end. The node is
    stopped (by its pid) either way."""
    node = cluster.nodes[node_id]
    with Admin(cluster.address, timeout_s=10) as admin:
        total = sum(leaders_by_node(admin).values())
        started = time.monotonic()
        if how == signal.SIGKILL:
            node.kill()
        else:
            assert node.process is not None
            node.process.send_signal(how)
        moved, missing = None, total
        while time.monotonic() - started < deadline_s:
            try:
                counts = leaders_by_node(admin)
            except (SeglogError, grpc.RpcError):
                time.sleep(0.05)
                continue  # a busy gateway: ask again
            elsewhere = sum(led for n, led in counts.items() if n != node_id)
            missing = total - elsewhere
            if missing <= 0:
                moved = time.monotonic() - started
                break
            time.sleep(0.05)
    node.stop()
    return moved, max(0, missing)


def offline_partitions(admin: Admin) -> int:
    return sum(p.leader < 0 for t in admin.describe_topics() for p in t.partitions)
