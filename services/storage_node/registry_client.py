"""The node's session with the gateway's registry: register at start and heartbeat every
`heartbeat_interval_ms`, on a thread that does nothing else. A heartbeat is liveness and
progress, not state: it carries the registry's metadata offsets up to which the node has
received (queued) and applied partition states, and only the partitions it holds but
cannot serve — nothing that grows with the partitions it hosts.

Each answer's partition states (and the registry's pushes between heartbeats,
StorageNode.UpdatePartitions) go to the metadata applier (metadata_applier.py), which
brings the hosted partitions in line in bounded steps on its own thread: however many
partitions an answer creates, the session keeps heartbeating on time. The session also
carries the manager's ISR changes to the registry (AlterPartition) and the controlled
shutdown: heartbeats saying `want_shutdown` until the registry answers that the node leads
nothing any more.

Fencing (Kafka's fenced broker): a node whose heartbeats have gone unanswered for
`session_timeout_ms` (the gateways' `broker.session.timeout.ms`) may have lost its session —
its lease lapses no later than that after the last heartbeat the registry answered was
sent — and the controller may have moved its leaderships. So from then on it fences itself
(ReplicaManager.fence: no produce, reads, follower fetches or high-watermark moves as
leader), until a heartbeat is answered and the partition states of that answer (and of
every submission before it) are applied: only then are its roles the registry's current
ones. If the session lapses again before they are, it stays fenced for the next answer.
The node counts as registered (`registered`) once its first answer is applied.

Cluster identity (cluster_identity.py): the session says the data directory's cluster id
when it registers and heartbeats, and checks every answer's. A registry of another cluster
(its refusal, INCONSISTENT_CLUSTER_ID, or an answer naming another cluster) ends the
session before anything of that answer is applied, and `on_refused` stops the node.

Nothing one partition does may end the session: a partition that fails to apply goes
offline with the reason, which the next heartbeat reports; a failure of a heartbeat step
itself is logged and the next interval tries again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

import grpc
from opentelemetry import trace

from seglog.errors import InconsistentClusterIdError
from seglog.rpc.channels import channel_target, open_channel, tls_server_name
from seglog.rpc.status import error_from_code, error_from_rpc
from seglog.security.tls import TlsFiles, channel_credentials
from seglog.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc
from services.settings import (
    BROKER_HEARTBEAT_INTERVAL_MS,
    BROKER_SESSION_TIMEOUT_MS,
    GATEWAY_INTERNAL_PORT,
)

from .cluster_identity import ClusterIdentity
from .metadata_applier import MetadataApplier, registration_of
from .partition import IsrProposal, Registration
from .replica_manager import ReplicaManager

logger = logging.getLogger(__name__)

# A heartbeat refused unread by a gateway at its gRPC call limit is sent again after this.
BUSY_RETRY_S = 0.1
# The fence every node starts under until its first answer (server.py): an ordinary start,
# not worth a warning when it is lifted.
STARTING_FENCE = "starting: not registered with the registry yet"


class RegistrySession:
    def __init__(
        self,
        gateway: str,
        node_id: int,
        address: str,
        replicas: ReplicaManager,
        applier: MetadataApplier,
        *,
        heartbeat_interval_ms: int = BROKER_HEARTBEAT_INTERVAL_MS,
        session_timeout_ms: int = BROKER_SESSION_TIMEOUT_MS,
        tracer_provider: trace.TracerProvider | None = None,
        log_config_defaults: Mapping[str, str] | None = None,
        bulk_address: str = "",
        tls: TlsFiles | None = None,
        unclean_shutdown: bool = True,
        identity: ClusterIdentity | None = None,
        on_refused: Callable[[str], None] | None = None,
        on_misdirected: Callable[[str], None] | None = None,
    ) -> None:
        """`on_misdirected(reason)`: the address answers gRPC but serves no Registry there
        (a gateway's clients' listener): no retry can fix that, so the session ends and
        this is called (the node's process stops with the reason)."""
        self.gateway = gateway
        self.on_misdirected = on_misdirected
        # The data directory's cluster; None: a session that checks none (tests of it).
        self.identity = identity
        # Called once, on the session thread, when a registry of another cluster refused
        # the node or answered as another cluster: the node must stop.
        self.on_refused = on_refused
        self.refusal: str | None = None
        self.bulk_address = bulk_address
        # Said when registering: the registry then trusts none of this node's logs with
        # committed records it may have lost (KIP-966).
        self.unclean_shutdown = unclean_shutdown
        self.log_config_defaults = dict(log_config_defaults or {})
        self.node_id = node_id
        self.address = address
        self.replicas = replicas
        self.applier = applier
        self.interval_s = heartbeat_interval_ms / 1000
        self.session_timeout_s = session_timeout_ms / 1000
        # When the last heartbeat the registry answered was sent (time.monotonic()).
        self._answered_sent_at = time.monotonic()
        # The applier's ticket of the last answer: the node unfences once it is applied.
        self._answered_ticket = 0
        # Fencing and unfencing are decided under this lock: the session thread fences on a
        # lapse while the applier thread may be finishing the answer that would unfence.
        self._fencing = threading.Lock()
        # Several gateway addresses (comma-separated): the session fails over between them.
        self._channel = open_channel(
            # The gateway's internal listener; nodes never call the clients' listener.
            channel_target(gateway, GATEWAY_INTERNAL_PORT),
            credentials=None if tls is None else channel_credentials(tls),
            server_name=tls_server_name(gateway),
        )
        self._stub = gateway_pb2_grpc.RegistryStub(self._channel)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="registry-session", daemon=True)
        self._answered_once = False  # heartbeats, not registrations, from then on
        self.registered = threading.Event()  # its first answer is applied
        self.want_shutdown = False
        # A controlled shutdown heartbeats every 50 ms until answered: a gateway gone
        # meanwhile is said once, not ~18 times a second until the shutdown's timeout.
        self._shutdown_failure_said = False
        self._beat_now = threading.Event()
        self.may_shut_down = threading.Event()
        self.heartbeats_sent = 0
        replicas.isr_updates.alter_partition = self.alter_partition
        applier.on_applied = self._applied

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._beat_now.set()
        self._thread.join(timeout=10)
        self._channel.close()

    def _heartbeat_message(self) -> gateway_pb2.NodeHeartbeat:
        message = gateway_pb2.NodeHeartbeat(
            node_id=self.node_id,
            address=self.address,
            log_config_defaults=self.log_config_defaults,
            want_shutdown=self.want_shutdown,
            bulk_address=self.bulk_address,
            metadata_offset=self.applier.received_offset,
            applied_metadata_offset=self.applier.applied_offset,
            unclean_shutdown=self.unclean_shutdown,
        )
        if self.identity is not None:
            message.cluster_id = self.identity.cluster_id
            if not self._answered_once:  # read by a registration only: counted then
                message.held_partitions = len(self.replicas.hosted()) + len(self.replicas.offline())
        for (topic, partition), reason in sorted(self.replicas.offline().items()):
            message.partitions.add(topic=topic, partition=partition, offline_reason=reason)
        return message

    def _run(self) -> None:
        while not self._stop.is_set() and self.refusal is None:
            wait_s = self.interval_s
            try:
                code = self._beat()
                if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    # The internal listener's call limit refused it before reading it (a
                    # burst of registry calls): a heartbeat every interval could miss the
                    # session behind it, so it tries again soon.
                    wait_s = min(self.interval_s, BUSY_RETRY_S)
                elif code == grpc.StatusCode.UNIMPLEMENTED:
                    if not self._answered_once:
                        self._misdirected()
                        return
                    logger.error("%s", self._misdirection())
            except Exception:  # the session outlives any one failure; next interval retries
                logger.exception("registry session step failed")
            self._beat_now.wait(wait_s)
            self._beat_now.clear()

    def _misdirection(self) -> str:
        return (
            f"{self.gateway} answers gRPC but serves no Registry there: --gateway must name "
            f"the gateway's internal listener (its --internal-listen, port "
            f"{GATEWAY_INTERNAL_PORT} unless set), not the clients' listener"
        )

    def _misdirected(self) -> None:
        """Registration answered UNIMPLEMENTED: said once, clearly, and the node stops
        rather than retrying what cannot work."""
        reason = self._misdirection()
        logger.error("cannot register: %s", reason)
        self._stop.set()
        if self.on_misdirected is not None:
            self.on_misdirected(reason)

    def controlled_shutdown(self, timeout_s: float) -> bool:
        """Ask the registry to move this node's leaderships away (Kafka's controlled
        shutdown); True once it answered that the node leads nothing, False at the timeout."""
        if not self.registered.is_set() or self.refusal is not None:
            return False  # no registry of its cluster to ask
        self.want_shutdown = True
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._beat_now.set()  # the session thread heartbeats at once
            if self.may_shut_down.wait(min(0.05, max(deadline - time.monotonic(), 0))):
                return True
        return False

    def _beat(self) -> grpc.StatusCode | None:
        """One heartbeat (or registration); the status code when it failed."""
        # A session is registered once; later heartbeats keep it. A gateway that does not
        # know it (restarted without it, or fenced it after a missed session) answers a
        # heartbeat by registering it anew, so a failed heartbeat is simply retried.
        call = self._stub.Heartbeat if self._answered_once else self._stub.RegisterNode
        sent_at = time.monotonic()
        timeout_s = max(self.interval_s, 1.0)
        if self._answered_once and self.replicas.fenced is None:
            # A call outlasting the session would fence the node late, after an election.
            until_fenced_s = self._answered_sent_at + self.session_timeout_s - sent_at
            timeout_s = min(timeout_s, max(until_fenced_s, 0.05))
        self.heartbeats_sent += 1
        try:
            assignment = call(self._heartbeat_message(), timeout=timeout_s)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.FAILED_PRECONDITION:
                error = error_from_rpc(exc)
                if isinstance(error, InconsistentClusterIdError):
                    self._refused(str(error))
                    return exc.code()
            if self._answered_once:
                self._say_failed(exc.code())
                self._fence_if_lapsed()
            code: grpc.StatusCode = exc.code()
            return code
        if not self._same_cluster(assignment):
            return None
        if assignment.heartbeat_interval_ms > 0:
            self.interval_s = assignment.heartbeat_interval_ms / 1000
        ticket = self.applier.submit(assignment)  # applied on the applier's thread
        with self._fencing:
            self._answered_sent_at = sent_at
            self._answered_ticket = ticket
        self._answered_once = True
        self._applied(self.applier.applied_ticket)
        if self.want_shutdown and assignment.should_shut_down:
            # It steps down as the registry's answer says (its leaderships moved) before the
            # shutdown goes on; the session has nothing else left to do.
            self.applier.wait_applied(ticket, max(self.interval_s, 1.0))
            self.may_shut_down.set()
        return None

    def _say_failed(self, code: grpc.StatusCode) -> None:
        """A failed heartbeat, logged each time (the fault campaigns read when nodes last
        failed one), but once in a controlled shutdown, which retries every 50 ms."""
        if not self.want_shutdown:
            logger.warning("heartbeat to the gateway failed: %s", code)
        elif not self._shutdown_failure_said:
            self._shutdown_failure_said = True
            logger.warning(
                "heartbeat to the gateway failed: %s, in the controlled shutdown (retried "
                "until it is answered or times out, not said again)",
                code,
            )

    def _same_cluster(self, assignment: gateway_pb2.NodeAssignment) -> bool:
        """Whether the answer is from a registry of this node's cluster (a first answer's
        cluster id is written into a data directory that has none)."""
        if self.identity is None:
            return True
        if not assignment.cluster_id:
            # A registry that names no cluster (older than cluster ids): its states are
            # applied, but it never sets a partition aside (cluster_identity.py).
            if not self._answered_once:
                logger.warning("the registry names no cluster id: no partition is set aside")
            return True
        try:
            self.identity.adopt(assignment.cluster_id)
        except InconsistentClusterIdError as exc:
            self._refused(str(exc))
            return False
        return True

    def _refused(self, reason: str) -> None:
        if self.refusal is not None:
            return
        self.refusal = reason
        logger.error("the registry refused this node: %s", reason)
        if self.on_refused is not None:
            self.on_refused(reason)

    def _fence_if_lapsed(self) -> None:
        with self._fencing:
            unanswered_s = time.monotonic() - self._answered_sent_at
            if unanswered_s >= self.session_timeout_s:
                reason = (
                    f"no heartbeat answered for {unanswered_s:.1f} s, past its session "
                    f"timeout of {self.session_timeout_s:g} s"
                )
                if self.replicas.fence(reason):
                    logger.warning(
                        "node %d is fenced (%s): it leads nothing until the registry answers again",
                        self.node_id,
                        reason,
                    )

    def _applied(self, applied_ticket: int) -> None:
        """Unfence (and count as registered) once the last answer's states are applied,
        unless the session lapsed again meanwhile (the next answer will do it)."""
        with self._fencing:
            if applied_ticket < self._answered_ticket or self._answered_ticket == 0:
                return
            if time.monotonic() - self._answered_sent_at >= self.session_timeout_s:
                return
            lifted = self.replicas.unfence()  # its roles are the registry's current ones again
        if lifted is not None and lifted != STARTING_FENCE:
            logger.warning("node %d is no longer fenced: the registry answers again", self.node_id)
        if not self.registered.is_set():
            logger.info("registered with the gateway as node %d", self.node_id)
            self.registered.set()

    def alter_partition(self, proposal: IsrProposal) -> Registration:
        """Kafka's AlterPartition, sent for the replica manager's ISR changes."""
        response = self._stub.AlterPartition(
            gateway_pb2.AlterPartitionRequest(
                node_id=self.node_id,
                topic=proposal.topic,
                partition=proposal.partition,
                leader_epoch=proposal.leader_epoch,
                partition_epoch=proposal.partition_epoch,
                new_isr=proposal.new_isr,
            ),
            timeout=5,
        )
        if response.error != common_pb2.NONE:
            raise error_from_code(response.error, response.error_message)
        return registration_of(response.partition)
