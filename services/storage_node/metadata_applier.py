"""The node's metadata applier (Kafka's broker metadata publisher): one thread that brings
the hosted partitions in line with the partition states the registry sends — heartbeat
answers and the registry's pushes (StorageNode.UpdatePartitions) — in bounded steps, so
neither the registry session nor a gRPC thread ever applies thousands of partitions.

Submissions are queued as they arrive and merged, in arrival order, into the states still
to apply: per partition the newest state wins (by leader epoch, then partition epoch; an
equal one replaces the queued one, its configs may be newer), a state already held is
dropped at once, and a removal replaces any queued state. Each step then applies up to
`step_partitions` of them, states of partitions already hosted (role changes: a failover
must not wait behind a creation) before new partitions, checking for newer submissions
between steps (a step ends after `step_partitions`, or sooner after STEP_TIME_BUDGET_S).

A `full` submission names the node's whole assignment (unless its offset is older than one
already received: then it is merged as states only): queued states of partitions it does
not name are dropped, and once everything queued is applied, hosted partitions named
neither by it nor by any later submission are closed and set aside as
`<topic>-<partition>-stray` (kept on disk: a registry mistake cannot destroy data), as are
`removed` ones. Nothing one partition does stops the applier: a partition that fails goes
offline with the reason (the session's heartbeats report it), the next goes on, and the
failed state is applied again with each later submission until it succeeds or the
partition is no longer assigned.

A state naming another topic id than the hosted log's (the topic deleted and made again
under its name while this node was away) is applied whatever its epochs, the new topic's
starting again from 0: the log manager sets the old log aside and the partition starts empty.
A log from before topic ids adopts the id of the first state naming one.

Only a submission from a registry of the node's own cluster (its cluster id the data
directory's, cluster_identity.py) removes partitions: from any other, `removed` is ignored
and a `full` one sweeps nothing — a registry that does not know the node's partitions
cannot strand them.

A creation's costly part runs paced on a thread of its own at a lower OS priority
(partition_creator.py) while the applier thread waits; the applier thread then gives those
partitions their roles. Roles, role changes and removals stay on the applier thread at the
node's priority. Large batches are logged as they go (apply_progress.py).

Progress: `received_offset` is the registry's metadata offset up to which states were
queued (the heartbeat's metadata_offset); `applied_offset` the one whose states are all
applied, reached when nothing queued remains (the heartbeat's applied_metadata_offset);
tickets number submissions so the session can unfence once the answer that ended a lapse
is applied (registry_client.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from seglog.errors import UnknownTopicOrPartitionError
from seglog.v1 import gateway_pb2
from services import long_lived

from .acl_narrowings import AclNarrowings
from .apply_progress import ApplyProgress
from .cluster_identity import ClusterIdentity
from .partition import Registration
from .partition_creator import PartitionCreator
from .replica_manager import ReplicaManager

logger = logging.getLogger(__name__)

DEFAULT_STEP_PARTITIONS = 200
# A step also ends after this long (creations cost fsyncs, slow on a busy disk): newer
# submissions, a failover's push among them, wait at most about this long to be merged.
STEP_TIME_BUDGET_S = 0.1
# Created partitions are settled (long_lived.settle) every this many and when the queue of
# creations empties: a full collection while thousands are created walks only the last few
# hundred (about 40 objects each), never the whole node.
SETTLE_EVERY_CREATED = 250
TopicPartition = tuple[str, int]
# A queued state to apply, or None: set the partition aside (removed from the node).
Queued = gateway_pb2.AssignedPartition | None


def registration_of(p: gateway_pb2.AssignedPartition) -> Registration:
    return Registration(
        p.leader,
        p.leader_epoch,
        p.partition_epoch,
        tuple(p.replicas),
        tuple(p.isr),
        tuple(p.adding_replicas),
        p.throttle_bytes_per_s,
        p.topic_id,
    )


class MetadataApplier:
    def __init__(
        self,
        replicas: ReplicaManager,
        *,
        step_partitions: int = DEFAULT_STEP_PARTITIONS,
        identity: ClusterIdentity | None = None,
    ) -> None:
        self.replicas = replicas
        # The data directory's cluster: removals only on its registry's word. None: every
        # submission is trusted (an applier tested on its own).
        self.identity = identity
        self.step_partitions = step_partitions
        # Taken as a submission arrives, not queued behind creations: a revoked ACL is not
        # kept waiting by partitions to create.
        self.acl_narrowings = AclNarrowings()
        # Called on the applier thread each time every submission so far is applied.
        self.on_applied: Callable[[int], None] | None = None
        self._cond = threading.Condition()
        self._queue: list[tuple[int, gateway_pb2.NodeAssignment]] = []  # (ticket, submission)
        self._submitted_ticket = 0
        self._merged_ticket = 0
        self._applied_ticket = 0
        self.received_offset = 0
        self.applied_offset = 0
        self._merged_offset = 0
        # Applier thread only: what is left to apply, role changes of hosted partitions
        # apart from creations (dicts keep arrival order).
        self._changes: dict[TopicPartition, Queued] = {}
        self._creations: dict[TopicPartition, Queued] = {}
        # The partitions named since the last full submission, until its sweep.
        self._named_since_full: set[TopicPartition] | None = None
        self._last_full: gateway_pb2.NodeAssignment | None = None
        # States whose apply failed (the partition went offline): applied again with each
        # later submission, so a partition comes back once its obstacle is gone (a heartbeat
        # answer arrives every interval even when nothing changed).
        self._failed: dict[TopicPartition, gateway_pb2.AssignedPartition] = {}
        self._progress = ApplyProgress()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="metadata-applier", daemon=True)
        self._creator = PartitionCreator(replicas)
        self._created_since_settle = 0  # partitions created since long_lived.settle()

    # -- the callers' side ---------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self._creator.close()

    def submit(self, assignment: gateway_pb2.NodeAssignment) -> int:
        """Queue an answer's or a push's states; returns its ticket. O(1): the caller (the
        session thread, a gRPC thread) does no per-partition work."""
        self.acl_narrowings.note(assignment.acls_narrowed_offset)
        with self._cond:
            self._submitted_ticket += 1
            ticket = self._submitted_ticket
            self._queue.append((ticket, assignment))
            self.received_offset = _advanced(self.received_offset, assignment)
            self._cond.notify_all()
        return ticket

    @property
    def applied_ticket(self) -> int:
        return self._applied_ticket

    @property
    def pending_partitions(self) -> int:
        return len(self._changes) + len(self._creations)

    def wait_applied(self, ticket: int, timeout_s: float) -> bool:
        """True once every submission up to `ticket` is applied, False at the timeout."""
        with self._cond:
            return self._cond.wait_for(
                lambda: self._stopping or self._applied_ticket >= ticket, timeout_s
            )

    def wait_partitions_applied(
        self, ticket: int, partitions: Iterable[TopicPartition], timeout_s: float
    ) -> bool:
        """True once submission `ticket` is merged and none of `partitions` is still queued
        (a push's own states, which need not wait for a large creation queued before it)."""
        wanted = list(partitions)

        def applied() -> bool:
            if self._stopping or self._applied_ticket >= ticket:
                return True
            if self._merged_ticket < ticket:
                return False
            return not any(tp in self._changes or tp in self._creations for tp in wanted)

        with self._cond:
            return self._cond.wait_for(applied, timeout_s)

    # -- the applier thread --------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(self._has_work, self._rest_s())
                if not self._has_work():
                    continue
                if self._stopping:
                    return
                batch, self._queue = self._queue, []
            try:
                self._step(batch)
            except Exception:  # the applier outlives any one failure; the next step retries
                logger.exception("applying partition states failed")
                time.sleep(0.1)  # not a busy loop if the failure repeats

    def _rest_s(self) -> float | None:
        """How long creations still rest (None: not resting, wait for a submission)."""
        if not self._creations or self._changes:
            return None
        return self._creator.rest_s()

    def _has_work(self) -> bool:
        return bool(
            self._stopping
            or self._queue
            or self._changes
            or (self._creations and not self._creator.resting())
            or (not self.pending_partitions and self._applied_ticket < self._merged_ticket)
        )

    def _step(self, batch: list[tuple[int, gateway_pb2.NodeAssignment]]) -> None:
        for ticket, assignment in batch:
            try:
                self._merge(assignment)
            except Exception:  # one bad submission does not hold up the ones after it
                logger.exception("merging partition states failed")
            self._merged_ticket = ticket
        if batch:
            self._retry_failed()
            self._progress.note_pending(self.pending_partitions, self.step_partitions)
        if self._changes or (self._creations and not self._creator.resting()):
            self._apply_some()
        if self.pending_partitions:
            with self._cond:
                self._cond.notify_all()  # pushes waiting for their own partitions
            return
        if self._named_since_full is not None:
            self._sweep(self._named_since_full)
            self._named_since_full = None
        self._progress.finish()
        with self._cond:
            self._applied_ticket = self._merged_ticket
            self.applied_offset = self._merged_offset
            self._cond.notify_all()
        if self.on_applied is not None:
            self.on_applied(self._applied_ticket)

    def _merge(self, assignment: gateway_pb2.NodeAssignment) -> None:
        if (
            assignment.full
            and assignment == self._last_full
            and not self.replicas.offline()  # a failed creation is retried on each answer
        ):
            # The whole assignment as the registry sent it last time (a registry without
            # deltas answers every heartbeat so): its states are queued or applied already,
            # and comparing costs far less than re-checking every partition.
            self._merged_offset = _advanced(self._merged_offset, assignment)
            return
        if assignment.full:
            self._last_full = assignment
        self.replicas.node_addresses.update(assignment.node_addresses)
        self.replicas.node_bulk_addresses.update(assignment.node_bulk_addresses)
        # A whole assignment older than what this node already received (a gateway whose
        # etcd watch is a moment behind another's): its states are merged, newest winning,
        # but what it does not name may have been created since, so nothing is swept. The
        # node takes its offset, and the next answer brings the changes after it.
        behind = 0 < assignment.metadata_offset < self._merged_offset
        trusted = self.identity is None or self.identity.verified(assignment.cluster_id)
        if not trusted and (assignment.removed or assignment.full):
            logger.warning(
                "partition states from a registry of cluster %r, not this node's %r: "
                "nothing is set aside on its word",
                assignment.cluster_id,
                self.identity.cluster_id if self.identity is not None else "",
            )
        if assignment.full and not behind and trusted:
            named = {(p.topic, p.partition) for p in assignment.partitions}
            for waiting in (self._changes, self._creations):
                for tp in [tp for tp in waiting if tp not in named]:
                    del waiting[tp]
            self._named_since_full = named
        configs_held: dict[str, dict[str, str]] = {}
        for p in assignment.partitions:
            tp = (p.topic, p.partition)
            if self._named_since_full is not None:
                self._named_since_full.add(tp)
            queued = self._changes.get(tp)
            if queued is None:
                queued = self._creations.get(tp)
            if queued is not None:
                if (queued.leader_epoch, queued.partition_epoch) <= (
                    p.leader_epoch,
                    p.partition_epoch,
                ) or _other_topic(queued.topic_id, p.topic_id):
                    # At least as new: it wins (its configs may be newer).
                    (self._changes if tp in self._changes else self._creations)[tp] = p
                continue
            self._changes.pop(tp, None)  # a queued removal: the partition is assigned again
            self._creations.pop(tp, None)
            held = self.replicas.registration(p.topic, p.partition)
            if held is None:
                self._creations[tp] = p
                continue
            if p.topic not in configs_held:
                configs_held[p.topic] = self.replicas.topic_configs(p.topic)
            newer = (p.leader_epoch, p.partition_epoch) > (held.leader_epoch, held.partition_epoch)
            # Another topic's log (replaced), or one from before topic ids (adopts this id).
            if p.topic_id and self.replicas.logs.topic_id(p.topic, p.partition) != p.topic_id:
                newer = True
            if newer or dict(p.configs) != configs_held[p.topic]:
                self._changes[tp] = p
        for removed in assignment.removed if trusted else ():
            tp = (removed.topic, removed.partition)
            if self._named_since_full is not None:
                self._named_since_full.discard(tp)
            self._creations.pop(tp, None)
            self._changes[tp] = None
        self._merged_offset = _advanced(self._merged_offset, assignment)

    def _retry_failed(self) -> None:
        for tp, state in list(self._failed.items()):
            if tp not in self._changes and tp not in self._creations:
                self._creations[tp] = state

    def _apply_some(self) -> None:
        """One step: role changes and removals here, then (when none is left and creations
        are not resting) a step of creations on the creation thread, waited for."""
        offline = self.replicas.offline()
        started = time.monotonic()
        applied = 0
        while self._changes and applied < self.step_partitions:
            if time.monotonic() - started > STEP_TIME_BUDGET_S:
                break
            self._apply_first(self._changes, offline)
            applied += 1
        if (
            not self._changes
            and self._creations
            and applied < self.step_partitions
            and not self._creator.resting()
        ):
            started = time.monotonic()
            for tp, error in self._creator.step(self._creations, self.step_partitions - applied):
                if error is None:
                    self._apply_one(self._creations, tp, offline)
                    self._created_since_settle += 1
                else:
                    state = self._creations.pop(tp)
                    if state is not None:
                        self._failed[tp] = state
                    partition_failed(self.replicas, tp, "create", error, offline.get(tp))
                    self._progress.applied += 1
            self._creator.rest_after(started)
            if self._created_since_settle >= SETTLE_EVERY_CREATED or (
                self._created_since_settle and not self._creations
            ):
                self._created_since_settle = 0
                long_lived.settle()
        self._progress.log(self.pending_partitions)

    def _apply_first(
        self, queue: dict[TopicPartition, Queued], offline: dict[TopicPartition, str]
    ) -> None:
        self._apply_one(queue, next(iter(queue)), offline)

    def _apply_one(
        self,
        queue: dict[TopicPartition, Queued],
        tp: TopicPartition,
        offline: dict[TopicPartition, str],
    ) -> None:
        queued = queue[tp]
        if queued is None:
            self._failed.pop(tp, None)
            self._set_aside(tp, offline.get(tp), told=True)
        else:
            try:
                self.replicas.apply_state(tp[0], tp[1], queued.configs, registration_of(queued))
                self._failed.pop(tp, None)
            except Exception as exc:
                self._failed[tp] = queued
                partition_failed(self.replicas, tp, "create", exc, offline.get(tp))
        del queue[tp]  # after applying: a push waiting for it sees it done
        self._progress.applied += 1

    def _set_aside(
        self, tp: TopicPartition, previous_reason: str | None, *, told: bool = False
    ) -> None:
        """`told`: the registry named the partition removed (a move, a deleted topic): said
        at INFO; one a whole assignment merely leaves out is a WARNING, as it may be a
        registry's mistake the operator should see."""
        try:
            path = self.replicas.set_aside_partition(*tp)
        except UnknownTopicOrPartitionError:
            self.replicas.forget_offline(*tp)  # not hosted, or offline: nothing to report
            return
        except Exception as exc:
            partition_failed(self.replicas, tp, "set aside", exc, previous_reason)
            return
        if path is None:
            logger.info("partition %s-%d of a deleted topic: deleted", *tp)
            return
        logger.log(
            logging.INFO if told else logging.WARNING,
            "partition %s-%d is no longer assigned here: set aside as %s",
            *tp,
            path.name,
        )

    def _sweep(self, assigned: set[TopicPartition]) -> None:
        """After a full submission: what the node holds and is not assigned goes."""
        offline = self.replicas.offline()
        for tp in set(self._failed) - assigned:
            del self._failed[tp]
        for tp in set(self.replicas.hosted()) - assigned:
            self._set_aside(tp, offline.get(tp))
        for tp in set(offline) - assigned:
            self.replicas.forget_offline(*tp)  # its topic is gone: nothing to report


def _other_topic(held: str, received: str) -> bool:
    """A state of a topic deleted and made again under the same name: it replaces what is
    held whatever the epochs (the new topic's start again from 0)."""
    return bool(held and received and held != received)


def _advanced(offset: int, assignment: gateway_pb2.NodeAssignment) -> int:
    """The metadata offset a submission brings the node to: a full one's own (the registry
    may have started a new history), else the larger (a push may carry 0: no change)."""
    if assignment.full:
        return assignment.metadata_offset
    return max(offset, assignment.metadata_offset)


def partition_failed(
    replicas: ReplicaManager,
    tp: TopicPartition,
    action: str,
    exc: Exception,
    previous_reason: str | None,
) -> None:
    reason = f"cannot {action} {tp[0]}-{tp[1]}: {exc}"
    replicas.mark_offline(*tp, reason)
    if previous_reason is None:  # once, not every answer while it stays offline
        logger.error("partition %s-%d is offline: %s", tp[0], tp[1], exc)
