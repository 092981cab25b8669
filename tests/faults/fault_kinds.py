"""The faults a campaign injects, each a small object: `start(cluster, rng)` injects it and
says what it did, `heal(cluster)` undoes it. `target` says what it harms (a storage node, the
gateway, or the link between clients and the gateway); the campaign never overlaps two
faults with the same target, so at most one node loses what it held at a time, which is what
RF 3 with min ISR 2 promises to survive (others may be unreachable meanwhile: paused, cut
off, their sessions lapsed). Disk faults: disk_faults.py; a node against a foreign registry:
foreign_registry.py; a gateway flooded by clients: flood_fault.py."""

from __future__ import annotations

import os
import random
import signal
import time
from dataclasses import dataclass
from typing import Protocol

from tests.faults.cluster import (
    NOTICE_TIMEOUT_S,
    PARTITIONS,
    SESSION_TIMEOUT_MS,
    Cluster,
)
from tests.waiting import wait_for, wait_until

# The producers' request timeout: pauses outlast it, delayed answers straddle it.
PRODUCER_REQUEST_TIMEOUT_MS = 3000

# What a fault harms; faults harming the same thing never overlap.
NODE, GATEWAY, CLIENT_LINK, CLIENT = "node", "gateway", "client-link", "client"


class Fault(Protocol):
    name: str
    target: str  # NODE, GATEWAY or CLIENT_LINK

    def start(self, cluster: Cluster, rng: random.Random) -> str: ...
    def heal(self, cluster: Cluster) -> None: ...


def pick_node(cluster: Cluster, rng: random.Random) -> tuple[int, str]:
    """A node, half the time the leader of a random partition."""
    if rng.random() < 0.5:
        partition = rng.randrange(PARTITIONS)
        leader = cluster.leader_of(partition)
        if leader in cluster.nodes:
            return leader, f"node {leader} (leader of p{partition})"
    node_id = rng.choice(sorted(cluster.nodes))
    return node_id, f"node {node_id}"


def restart_node_if_down(cluster: Cluster, node_id: int) -> None:
    node = cluster.nodes.get(node_id)
    if node is not None and not node.alive():
        node.start()


@dataclass
class OnANode:
    """A fault on one storage node that heals by starting the node again if it is down."""

    target: str = NODE
    node_id: int = -1

    def heal(self, cluster: Cluster) -> None:
        restart_node_if_down(cluster, self.node_id)


@dataclass
class NodeKill(OnANode):
    """SIGKILL a node and restart it at once."""

    name: str = "node-kill"

    def start(self, cluster: Cluster, rng: random.Random) -> str:
        node_id, which = pick_node(cluster, rng)
        self.node_id = node_id
        cluster.nodes[node_id].kill()
        cluster.nodes[node_id].start()
        return f"SIGKILL {which}, restarted at once"


@dataclass
class NodeCrash(OnANode):
    """SIGKILL a node; it comes back only once the registry noticed it gone."""

    name: str = "node-crash"

    def start(self, cluster: Cluster, rng: random.Random) -> str:
        self.node_id, which = pick_node(cluster, rng)
        cluster.nodes[self.node_id].kill()
        wait_for(lambda: not cluster.live(self.node_id), NOTICE_TIMEOUT_S, "the crash noticed")
        return f"SIGKILL {which}, down until healed"


@dataclass
class NodePause:
    """SIGSTOP a node for longer than its session and the producer's request timeout."""

    name: str = "node-pause"
    target: str = NODE
    node_id: int = -1
    stopped_at: float = 0.0

    def start(self, cluster: Cluster, rng: random.Random) -> str:
        self.node_id, which = pick_node(cluster, rng)
        os.kill(cluster.nodes[self.node_id].pid, signal.SIGSTOP)
        self.stopped_at = time.monotonic()
        return f"SIGSTOP {which}"

    def heal(self, cluster: Cluster) -> None:
        if self.node_id not in cluster.nodes:
            return
        try:
            wait_for(lambda: not cluster.live(self.node_id), NOTICE_TIMEOUT_S, "the pause noticed")
            # and past the producers' request timeout, so they retry what they sent it
            request_timeout_s = PRODUCER_REQUEST_TIMEOUT_MS / 1000 + 1
            time.sleep(max(0.0, self.stopped_at + request_timeout_s - time.monotonic()))
        finally:
            os.kill(cluster.nodes[self.node_id].pid, signal.SIGCONT)


@dataclass
class NodeTerm(OnANode):
    """SIGTERM a node (controlled shutdown); restarted when healed."""

    name: str = "node-term"

    def start(self, cluster: Cluster, rng: random.Random) -> str:
        self.node_id, which = pick_node(cluster, rng)
        cluster.nodes[self.node_id].stop()
        return f"SIGTERM {which}"


@dataclass
class ClientKill:
    """SIGKILL a producer or a consumer of the workload; another takes its place."""

    name: str = "client-kill"
    target: str = CLIENT

    def start(self, cluster: Cluster, rng: random.Random) -> str:
        return str(cluster.clients.kill_and_replace(rng))

    def heal(self, cluster: Cluster) -> None:
        pass


def pick_gateway(cluster: Cluster, rng: random.Random) -> tuple[int, str]:
    """A gateway, half the time the controller (the only one when there is one)."""
    if len(cluster.gateways) == 1:
        return 0, "the gateway"
    index = cluster.controller() if rng.random() < 0.5 else rng.randrange(len(cluster.gateways))
    role = " (the controller)" if index == cluster.controller() else ""
    return index, f"gateway {index}{role}"


@dataclass
class GatewayKill:
    name: str = "gateway-kill"
    target: str = GATEWAY
    index: int = 0

    def start(self, cluster: Cluster, rng: random.Random) -> str:
        self.index, which = pick_gateway(cluster, rng)
        cluster.gateways[self.index].kill()
        cluster.restart_gateway(self.index)
        return f"SIGKILL {which}, restarted at once"

    def heal(self, cluster: Cluster) -> None:
        if not cluster.gateways[self.index].alive():
            cluster.restart_gateway(self.index)


@dataclass
class GatewayTerm:
    name: str = "gateway-term"
    target: str = GATEWAY
    index: int = 0

    def start(self, cluster: Cluster, rng: random.Random) -> str:
        self.index, which = pick_gateway(cluster, rng)
        cluster.gateways[self.index].stop()
        return f"SIGTERM {which}"

    def heal(self, cluster: Cluster) -> None:
        if not cluster.gateways[self.index].alive():
            cluster.restart_gateway(self.index)


@dataclass
class GatewayPause:
    """SIGSTOP a gateway past the sessions and the producer's request timeout."""

    name: str = "gateway-pause"
    target: str = GATEWAY
    index: int = 0
    stopped_at: float = 0.0

    def start(self, cluster: Cluster, rng: random.Random) -> str:
        self.index, which = pick_gateway(cluster, rng)
        os.kill(cluster.gateways[self.index].pid, signal.SIGSTOP)
        self.stopped_at = time.monotonic()
        return f"SIGSTOP {which}"

    def heal(self, cluster: Cluster) -> None:
        if not self.stopped_at:
            return
        pause_s = max(SESSION_TIMEOUT_MS, PRODUCER_REQUEST_TIMEOUT_MS) / 1000 + 1
        time.sleep(max(0.0, self.stopped_at + pause_s - time.monotonic()))  # the pause's length
        os.kill(cluster.gateways[self.index].pid, signal.SIGCONT)


@dataclass
class EtcdKill:
    """SIGKILL the registry's etcd and restart it at once (its data kept)."""

    name: str = "etcd-kill"
    target: str = GATEWAY

    def start(self, cluster: Cluster, rng: random.Random) -> str:
        cluster.etcd.kill()
        cluster.etcd.start()
        return "SIGKILL etcd, restarted at once"

    def heal(self, cluster: Cluster) -> None:
        if not cluster.etcd.alive():
            cluster.etcd.start()


@dataclass
class EtcdPause:
    """SIGSTOP the registry's etcd for longer than the sessions it holds."""

    name: str = "etcd-pause"
    target: str = GATEWAY
    stopped_at: float = 0.0

    def start(self, cluster: Cluster, rng: random.Random) -> str:
        os.kill(cluster.etcd.pid, signal.SIGSTOP)
        self.stopped_at = time.monotonic()
        return "SIGSTOP etcd"

    def heal(self, cluster: Cluster) -> None:
        if not self.stopped_at:
            return
        pause_s = SESSION_TIMEOUT_MS / 1000 + 1
        time.sleep(max(0.0, self.stopped_at + pause_s - time.monotonic()))  # the pause's length
        os.kill(cluster.etcd.pid, signal.SIGCONT)


@dataclass
class LeaderCutFromFollowers:
    """The leader of a partition cut from the other nodes (the gateway and clients still
    reach it)."""

    name: str = "partition-leader-from-followers"
    target: str = NODE

    def start(self, cluster: Cluster, rng: random.Random) -> str:
        partition = rng.randrange(PARTITIONS)
        leader = cluster.leader_of(partition)
        if leader not in cluster.nodes:
            leader = rng.choice(sorted(cluster.nodes))
        others = [f"node-{n}" for n in cluster.nodes if n != leader]
        cluster.lab.cut([f"node-{leader}"], others)
        hold_network_fault(rng)
        return f"cut node {leader} (leader of p{partition}) from its followers"

    def heal(self, cluster: Cluster) -> None:
        cluster.lab.heal()


@dataclass
class LeaderCutFromGateway:
    """The leader of a partition cut from the gateway (the controller); its followers and
    the clients still reach it."""

    name: str = "partition-leader-from-gateway"
    target: str = NODE

    def start(self, cluster: Cluster, rng: random.Random) -> str:
        partition = rng.randrange(PARTITIONS)
        leader = cluster.leader_of(partition)
        if leader not in cluster.nodes:
            leader = rng.choice(sorted(cluster.nodes))
        cluster.lab.cut([f"node-{leader}"], ["gateway"])
        hold_network_fault(rng)
        return f"cut node {leader} (leader of p{partition}) from the gateway"

    def heal(self, cluster: Cluster) -> None:
        cluster.lab.heal()


@dataclass
class SlowFollower:
    name: str = "slow-follower"
    target: str = NODE

    def start(self, cluster: Cluster, rng: random.Random) -> str:
        partition = rng.randrange(PARTITIONS)
        leader = cluster.leader_of(partition)
        followers = sorted(n for n in cluster.nodes if n != leader)
        node_id = rng.choice(followers)
        rate_kbit = rng.choice((64, 256, 1024))
        cluster.lab.slow(f"node-{node_id}", rate_kbit=rate_kbit, delay_ms=rng.choice((0, 200)))
        hold_network_fault(rng)
        return f"slowed node {node_id} (a follower of p{partition}) to {rate_kbit} kbit/s"

    def heal(self, cluster: Cluster) -> None:
        cluster.lab.heal()


@dataclass
class DropAnswers:
    """The gateway's next answers to clients lost on the way (the requests did land)."""

    name: str = "drop-answers"
    target: str = CLIENT_LINK

    def start(self, cluster: Cluster, rng: random.Random) -> str:
        count = rng.randint(1, 5)
        before = cluster.answers_dropped()
        # Armed on every proxy (clients use the gateway they last reached); whatever was not
        # dropped when `count` were is disarmed by heal.
        for proxy in cluster.answer_proxies():
            proxy.drop_answers(count)
        # Overlapping a fault that stops all answers (the gateway paused or down), fewer may
        # pass in the time: the schedule then says how many were dropped, not a failure.
        if wait_until(lambda: cluster.answers_dropped() >= before + count, NOTICE_TIMEOUT_S):
            return f"dropped {count} answers"
        dropped = cluster.answers_dropped() - before
        return f"dropped {dropped} of {count} answers armed (few answers flowed)"

    def heal(self, cluster: Cluster) -> None:
        for proxy in cluster.answer_proxies():
            proxy.heal()


@dataclass
class DelayAnswers:
    """Answers held past the producer's request timeout, so it retries what landed."""

    name: str = "delay-answers"
    target: str = CLIENT_LINK

    def start(self, cluster: Cluster, rng: random.Random) -> str:
        delay_ms = PRODUCER_REQUEST_TIMEOUT_MS + rng.choice((-2000, 500, 2000))
        for proxy in cluster.answer_proxies():
            proxy.delay_answers(delay_ms)
        hold_network_fault(rng)
        return f"delayed answers by {delay_ms} ms"

    def heal(self, cluster: Cluster) -> None:
        for proxy in cluster.answer_proxies():
            proxy.heal()


def hold_network_fault(rng: random.Random) -> None:
    """A network fault lasts a random few seconds (its duration is part of the fault)."""
    time.sleep(rng.uniform(2.0, 6.0))
