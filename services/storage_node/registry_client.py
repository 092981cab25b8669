"""The node's session with the gateway's registry: register at start, heartbeat every
`heartbeat_interval_ms`, and bring the hosted partitions in line with each answer.

Reconciliation: an assigned partition the node lacks is created (with its leader epoch and
topic configs); a hosted partition no longer assigned (its topic was deleted while the node
was away) is closed and set aside as `<topic>-<partition>-stray`, kept on disk rather than
deleted, so a registry mistake cannot destroy data.

Nothing one partition does may end the session: any error while reconciling a partition
(an OSError such as EMFILE, EFBIG or ENAMETOOLONG included) takes that partition offline
with the reason, which the next heartbeat reports, and the loop goes on; a failure of the
loop itself is logged and the next interval tries again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

import grpc
from opentelemetry import trace

from seglog.rpc.channels import open_channel
from seglog.v1 import gateway_pb2, gateway_pb2_grpc

from .replica_manager import ReplicaManager

logger = logging.getLogger(__name__)


class RegistrySession:
    def __init__(
        self,
        gateway: str,
        node_id: int,
        address: str,
        replicas: ReplicaManager,
        *,
        heartbeat_interval_ms: int = 2000,
        tracer_provider: trace.TracerProvider | None = None,
        log_config_defaults: Mapping[str, str] | None = None,
    ) -> None:
        self.log_config_defaults = dict(log_config_defaults or {})
        self.node_id = node_id
        self.address = address
        self.replicas = replicas
        self.interval_s = heartbeat_interval_ms / 1000
        self._channel = open_channel(gateway)
        self._stub = gateway_pb2_grpc.RegistryStub(self._channel)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="registry-session", daemon=True)
        self.registered = threading.Event()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._channel.close()

    def _heartbeat_message(self) -> gateway_pb2.NodeHeartbeat:
        message = gateway_pb2.NodeHeartbeat(
            node_id=self.node_id,
            address=self.address,
            log_config_defaults=self.log_config_defaults,
        )
        for topic, partition in self.replicas.hosted():
            message.partitions.add(topic=topic, partition=partition)
        for (topic, partition), reason in sorted(self.replicas.offline().items()):
            message.partitions.add(topic=topic, partition=partition, offline_reason=reason)
        return message

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._beat()
            except Exception:  # the session outlives any one failure; next interval retries
                logger.exception("registry session step failed")
            self._stop.wait(self.interval_s)

    def _beat(self) -> None:
        call = self._stub.Heartbeat if self.registered.is_set() else self._stub.RegisterNode
        try:
            assignment = call(self._heartbeat_message(), timeout=max(self.interval_s, 1.0))
        except grpc.RpcError as exc:
            if self.registered.is_set():
                logger.warning("heartbeat to the gateway failed: %s", exc.code())
            self.registered.clear()  # register afresh once the gateway is back
            return
        if not self.registered.is_set():
            logger.info("registered with the gateway as node %d", self.node_id)
        self.registered.set()
        if assignment.heartbeat_interval_ms > 0:
            self.interval_s = assignment.heartbeat_interval_ms / 1000
        self.reconcile(assignment)

    def reconcile(self, assignment: gateway_pb2.NodeAssignment) -> None:
        hosted = set(self.replicas.hosted())
        offline = self.replicas.offline()
        assigned = set()
        for p in assignment.partitions:
            tp = (p.topic, p.partition)
            assigned.add(tp)
            known_epoch = self.replicas.leader_epoch(p.topic, p.partition)
            if (
                tp not in hosted
                or known_epoch != p.leader_epoch
                or self.replicas.topic_configs(p.topic) != dict(p.configs)
            ):
                try:
                    self.replicas.create_partition(p.topic, p.partition, p.leader_epoch, p.configs)
                except Exception as exc:
                    self._partition_failed(tp, "create", exc, offline.get(tp))
        for tp in hosted - assigned:
            try:
                path = self.replicas.set_aside_partition(*tp)
                logger.warning(
                    "partition %s-%d is no longer assigned here: set aside as %s",
                    tp[0],
                    tp[1],
                    path.name,
                )
            except Exception as exc:
                self._partition_failed(tp, "set aside", exc, offline.get(tp))
        for tp in set(offline) - assigned:
            self.replicas.forget_offline(*tp)  # its topic is gone: nothing to report

    def _partition_failed(
        self, tp: tuple[str, int], action: str, exc: Exception, previous_reason: str | None
    ) -> None:
        reason = f"cannot {action} {tp[0]}-{tp[1]}: {exc}"
        self.replicas.mark_offline(*tp, reason)
        if previous_reason is None:  # once, not every heartbeat while it stays offline
            logger.error("partition %s-%d is offline: %s", tp[0], tp[1], exc)
