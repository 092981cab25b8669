"""Faults on a node's files and disk (fault_kinds.py says what a fault is): a bit flipped,
a power cut losing what the filesystem had not flushed, a full disk, and the last replica
standing losing its page cache (Kafka's KIP-966 case: the replicas holding the committed
records are out of the ISR, unreachable, when the one left in it loses them)."""

from __future__ import annotations

import os
import random
import signal
from dataclasses import dataclass, field

from tests.faults.cluster import NOTICE_TIMEOUT_S, PARTITIONS, TOPIC, Cluster
from tests.faults.fault_kinds import (
    NODE,
    OnANode,
    hold_network_fault,
    pick_node,
    restart_node_if_down,
)
from tests.waiting import wait_for


@dataclass
class DiskBitflip(OnANode):
    """SIGKILL a node, flip one bit in one of its files of the campaign topic, restart it:
    recovery must find what the CRC does not cover, and the replica repair from its peers."""

    name: str = "disk-bitflip"

    def start(self, cluster: Cluster, rng: random.Random) -> str:
        from tests.faults.disks import flip_a_bit

        # half the time the leader of the partition damaged
        partition = rng.randrange(PARTITIONS)
        leader = cluster.leader_of(partition)
        if rng.random() < 0.5 and leader in cluster.nodes:
            self.node_id, which = leader, f"node {leader} (leader of p{partition})"
        else:
            self.node_id = rng.choice(sorted(cluster.nodes))
            which = f"node {self.node_id}"
        cluster.nodes[self.node_id].kill()
        flipped = flip_a_bit(cluster.root / f"node-{self.node_id}" / f"{TOPIC}-{partition}", rng)
        cluster.nodes[self.node_id].start()
        return f"SIGKILL {which}, {flipped}, restarted"


@dataclass
class DiskPowerCut:
    """SIGKILL a node and lose what its filesystem had not flushed (EXT4_IOC_SHUTDOWN
    without flushing, then what the device held mounted again), restart it."""

    name: str = "disk-power-cut"
    target: str = NODE
    node_id: int = -1

    def start(self, cluster: Cluster, rng: random.Random) -> str:
        _require_disks(cluster, "disk-power-cut")
        self.node_id, which = pick_node(cluster, rng)
        cluster.nodes[self.node_id].kill()
        cluster.disks.cut_power(self.node_id)
        cluster.nodes[self.node_id].start()
        return f"SIGKILL {which} and cut its disk's power, restarted"

    def heal(self, cluster: Cluster) -> None:
        restart_node_if_down(cluster, self.node_id)


@dataclass
class DiskFull:
    """A node's filesystem filled by a ballast file for a few seconds, so its appends fail;
    the ballast is removed when healed."""

    name: str = "disk-full"
    target: str = NODE
    node_id: int = -1

    def start(self, cluster: Cluster, rng: random.Random) -> str:
        _require_disks(cluster, "disk-full")
        self.node_id, which = pick_node(cluster, rng)
        ballast_bytes = cluster.disks.fill(self.node_id)
        hold_network_fault(rng)
        return f"filled the disk of {which} ({ballast_bytes} bytes of ballast)"

    def heal(self, cluster: Cluster) -> None:
        if self.node_id < 0 or cluster.disks is None:
            return
        cluster.disks.free(self.node_id)
        restart_node_if_down(cluster, self.node_id)  # a node may give up on a full disk


@dataclass
class LastReplicaStanding:
    """SIGSTOP both followers of a partition until the registry fences them (the ISR falls
    to its leader alone), then SIGKILL the leader and cut its disk's power and restart it:
    it comes back without what it had not flushed, the one replica left in the ISR. The
    followers, which hold every committed record, are resumed when healed. One node loses
    data; the other two are only unreachable for a while."""

    name: str = "last-replica-standing"
    target: str = NODE
    node_id: int = -1
    paused: list[int] = field(default_factory=list)

    def start(self, cluster: Cluster, rng: random.Random) -> str:
        _require_disks(cluster, "last-replica-standing")
        partition = rng.randrange(PARTITIONS)
        leader = cluster.leader_of(partition)
        if leader not in cluster.nodes:
            leader = rng.choice(sorted(cluster.nodes))
        self.node_id = leader
        self.paused = [n for n in sorted(cluster.nodes) if n != leader]
        for node_id in self.paused:
            os.kill(cluster.nodes[node_id].pid, signal.SIGSTOP)
        for node_id in self.paused:
            wait_for(lambda n=node_id: not cluster.live(n), NOTICE_TIMEOUT_S, "the pause noticed")
        cluster.nodes[leader].kill()
        cluster.disks.cut_power(leader)
        cluster.nodes[leader].start()
        return (
            f"SIGSTOP nodes {self.paused} until fenced, then SIGKILL node {leader} (leader of "
            f"p{partition}, alone in the ISR) and cut its disk's power, restarted"
        )

    def heal(self, cluster: Cluster) -> None:
        for node_id in self.paused:
            if node_id in cluster.nodes and cluster.nodes[node_id].alive():
                os.kill(cluster.nodes[node_id].pid, signal.SIGCONT)
        restart_node_if_down(cluster, self.node_id)


def _require_disks(cluster: Cluster, fault: str) -> None:
    if cluster.disks is None:
        raise RuntimeError(f"{fault} needs the nodes on disks of their own")
