"""The node's readiness for Kubernetes: the health service `seglog.in-sync` (the standard gRPC
health protocol, beside "" and the API's own name, which say only that the logs are loaded)
answers SERVING once the node is registered with the registry, not fenced, and in the ISR of
every partition it holds a replica of, replicas a reassignment is still adding aside (they
count for no partition's durability yet). A StatefulSet's rolling update waits for a pod to
be Ready before it stops the next one, and the PodDisruptionBudget counts a pod that is not
Ready as unavailable, so neither a rolling update nor a node drain takes a second node down
while the first is still catching up: a partition with RF 3 and min.insync.replicas 2 keeps
taking acks=all writes throughout.

Why a readiness condition, not a PodDisruptionBudget on under-replicated partitions: a PDB
counts Ready pods and nothing else, and a StatefulSet's rolling update ignores PDBs; the
node's own view of its ISRs is what both respect. The node knows every ISR it belongs to:
the controller pushes each registration change to every replica (Kafka's LeaderAndIsr).

Checked every `interval_s` (the heartbeat interval), over the partitions the node holds: a
control-plane loop, never on the data path. Once ready, the scan is repeated only when the
node has applied new metadata (`metadata_version`): every ISR change reaches the node as
metadata, so an idle node's check costs nothing per partition.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from grpc_health.v1 import health, health_pb2

from .replica_manager import ReplicaManager

logger = logging.getLogger(__name__)

IN_SYNC_SERVICE = "seglog.in-sync"


def out_of_sync(replicas: ReplicaManager, node_id: int) -> list[str]:
    """The partitions (as topic-partition) whose ISR lacks this node although it is one of
    their replicas, not being added."""
    behind = []
    for topic, partition in replicas.hosted():
        r = replicas.registration(topic, partition)
        if r is None or node_id not in r.replicas or node_id in r.adding:
            continue
        if node_id not in r.isr:
            behind.append(f"{topic}-{partition}")
    return sorted(behind)


class InSyncReadiness:
    def __init__(
        self,
        health_servicer: health.HealthServicer,
        replicas: ReplicaManager,
        node_id: int,
        registered: Callable[[], bool],
        interval_s: float,
        metadata_version: Callable[[], int] = lambda: -1,
    ) -> None:
        self.health = health_servicer
        self.replicas = replicas
        self.node_id = node_id
        self.registered = registered
        self.interval_s = interval_s
        self.metadata_version = metadata_version
        self._ready_at_version: int | None = None  # the metadata a ready scan saw
        self.ready = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="in-sync-readiness", daemon=True)
        self._set(False)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Not ready from now on (draining), and the checks end."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._set(False)

    def check(self) -> bool:
        if not self.registered() or self.replicas.fenced is not None:
            ready, why = False, "not registered with the registry"
        elif self.ready and self._ready_at_version == self.metadata_version() != -1:
            return True  # nothing applied since a scan found every ISR with this node
        else:
            version = self.metadata_version()
            behind = out_of_sync(self.replicas, self.node_id)
            self._ready_at_version = version if not behind else None
            ready = not behind
            why = f"not in the ISR of {len(behind)} partition(s): {', '.join(behind[:5])}"
        if ready != self.ready:
            logger.info("in sync: %s", "ready" if ready else why)
        self._set(ready)
        return ready

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.check()
            except Exception:
                logger.exception("readiness check failed")

    def _set(self, ready: bool) -> None:
        self.ready = ready
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if ready and not self._stop.is_set()
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        self.health.set(IN_SYNC_SERVICE, status)
