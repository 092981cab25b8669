"""A gateway flooded by clients, as a campaign fault (fault_kinds.py says what a fault is);
the flood itself, its connections and calls, is client_flood.py. What it checks: the nodes'
sessions and heartbeats, read from the servers' logs."""

from __future__ import annotations

import datetime
import random
import re
import time
from dataclasses import dataclass
from pathlib import Path

from tests.faults.cluster import NOTICE_TIMEOUT_S, SESSION_TIMEOUT_MS, Cluster
from tests.faults.fault_kinds import GATEWAY, pick_gateway
from tests.waiting import wait_for

# A client flood is held this long: three of the registry's session timeouts.
FLOOD_HOLD_S = 3 * SESSION_TIMEOUT_MS / 1000
# What nodes log when a heartbeat is not answered (services/storage_node/registry_client.py),
# and the registry when it fences a node whose session expired (node_registrations.py).
HEARTBEAT_FAILED = b"heartbeat to the gateway failed"
HEARTBEAT_REFUSED = HEARTBEAT_FAILED + b": StatusCode.RESOURCE_EXHAUSTED"
SESSION_EXPIRED = re.compile(rb"node (\d+) fenced: its session expired")


@dataclass
class ClientFlooding:
    """A gateway flooded by clients that never finish what they start (client_flood.py):
    stalled gRPC calls holding every server thread of its client listener, Produce calls
    larger than what its request pool has free, Kafka connections announcing 100 MiB
    frames; held FLOOD_HOLD_S (three session timeouts), then released. The nodes'
    heartbeats go to the gateway's internal listener, which none of it reaches. Findings:
    the registry fencing more than one node meanwhile (a session expired; a node fault
    overlapping may harm one), or any heartbeat refused RESOURCE_EXHAUSTED (only client
    load fills a pool or a call limit)."""

    name: str = "client-flood"
    target: str = GATEWAY
    index: int = 0
    flood: object = None
    started_at: float = 0.0
    gateway_logs: dict[Path, int] | None = None
    node_logs: dict[Path, int] | None = None

    def start(self, cluster: Cluster, rng: random.Random) -> str:
        from tests.faults.client_flood import ClientFlood

        self.index, which = pick_gateway(cluster, rng)
        # Sessions lapsed before the flood (a gateway just restarted) are not its doing: it
        # starts once the nodes are live and none has missed a heartbeat for a session
        # timeout (but one: another fault may be harming it).
        wait_for(
            lambda: _nodes_heartbeating(cluster) >= len(cluster.nodes) - 1,
            NOTICE_TIMEOUT_S,
            "the nodes' heartbeats answered for a session timeout",
        )
        self.gateway_logs = {path: _size(path) for path in _gateway_logs(cluster)}
        self.node_logs = {path: _size(path) for path in _node_logs(cluster)}
        flood = ClientFlood(
            cluster.gateways[self.index].address, cluster.kafka_addresses[self.index]
        )
        self.flood, self.started_at = flood, time.monotonic()
        shape = flood.shape
        return (
            f"client flood of {which} for {FLOOD_HOLD_S:g} s: "
            f"{sum(c.opened for c in flood.stalled)} stalled gRPC calls, "
            f"{shape.produce_callers} callers of {shape.produce_bytes >> 20} MiB produces, "
            f"{len(flood.kafka)} Kafka connections announcing {shape.kafka_frame_bytes >> 20} MiB"
        )

    def heal(self, cluster: Cluster) -> None:
        from tests.faults.client_flood import ClientFlood

        flood = self.flood
        if not isinstance(flood, ClientFlood):
            return
        try:
            time.sleep(max(0.0, self.started_at + FLOOD_HOLD_S - time.monotonic()))  # its hold
        finally:
            flood.release()
        fenced = sorted(
            {
                int(found)
                for path, offset in (self.gateway_logs or {}).items()
                for found in SESSION_EXPIRED.findall(_tail(path, offset))
            }
        )
        if len(fenced) > 1:
            raise AssertionError(
                f"the registry fenced nodes {fenced} (sessions expired) while clients flooded "
                f"gateway {self.index}"
            )
        # Refused for want of memory or call slots: only client load could do that.
        refused = [
            path.name
            for path, offset in (self.node_logs or {}).items()
            if HEARTBEAT_REFUSED in _tail(path, offset)
        ]
        if refused:
            raise AssertionError(f"heartbeats refused RESOURCE_EXHAUSTED: {sorted(refused)}")


def _gateway_logs(cluster: Cluster) -> list[Path]:
    return [g.stderr_path for g in cluster.gateways if g.stderr_path is not None]


def _node_logs(cluster: Cluster) -> list[Path]:
    return [n.stderr_path for n in cluster.nodes.values() if n.stderr_path is not None]


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _tail(path: Path, offset: int) -> bytes:
    if not path.exists():
        return b""
    with open(path, "rb") as log:
        log.seek(offset)
        return log.read()


def _nodes_heartbeating(cluster: Cluster) -> int:
    """How many nodes the registry counts live that logged no failed heartbeat lately."""
    try:
        live = {n.node_id for n in cluster.admin.describe_cluster().nodes if n.live}
    except Exception:
        return 0
    return sum(1 for n in cluster.nodes if n in live and _heartbeats_answered_lately(cluster, n))


def _heartbeats_answered_lately(cluster: Cluster, node_id: int) -> bool:
    """No failed heartbeat in the node's log for the last session timeout (its lines start
    with their local time, services/serving.py's format)."""
    path = cluster.nodes[node_id].stderr_path
    if path is None:
        return True
    recent = _tail(path, max(0, _size(path) - 65536))
    failed = [line for line in recent.splitlines() if HEARTBEAT_FAILED in line]
    if not failed:
        return True
    try:
        logged = datetime.datetime.strptime(failed[-1][:23].decode(), "%Y-%m-%d %H:%M:%S,%f")
    except ValueError:
        return False  # a line cut by the tail: the next poll reads it whole
    quiet_s = (datetime.datetime.now() - logged).total_seconds()
    return quiet_s > SESSION_TIMEOUT_MS / 1000
