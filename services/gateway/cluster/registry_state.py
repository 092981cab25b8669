"""The registry's state and how it changes: the metadata image (metadata_image.py) built from
the metadata log (registry_store.py), each storage node's session, and the reads the rest of
the gateway makes of them (node assignments, counts; the data plane's routes are
registry_routes.py's, the nodes' liveness node_liveness.py's, held as `liveness`).

The registry (registry.py) holds one RegistryState and part objects that each make one kind
of decision on it (node_registrations.py, reassignments.py, topic_decisions.py): every part
works on the same fields, image and log under the same lock, as one class did before.

Every change is one batch of records, stored first (`_commit`: fsync'd, or an etcd
transaction) and then applied to the image, exactly as a batch another gateway wrote is
applied when the store's watch brings it (`_watched`). A stale write (another gateway wrote
first) takes the stored log again (`reload`) and the decision is made anew (`retrying`).

Liveness is not in the log: a node's heartbeats or etcd session (node_liveness.py).
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from seglog.security.acls import AclBinding
from services import long_lived

from ..coordination.election import Fence
from ..coordination.node_sessions import EtcdNodeSessions
from . import registry_bootstrap
from .metadata_file_store import FileMetadataStore
from .metadata_image import Applied, MetadataImage, Topic
from .metadata_records import MetadataRecordError, Record, partition_record
from .node_liveness import NodeLiveness
from .node_state import Node, NodeView
from .partition_changes import PartitionAssignment, PartitionChange
from .registry_store import Batch, ControllerFencedError, MetadataStore, StaleRegistryError

logger = logging.getLogger(__name__)

REGISTRY_FILE = registry_bootstrap.REGISTRY_FILE  # the former whole document, migrated once
METADATA_DIR = registry_bootstrap.METADATA_DIR
MIN_ISR_CONFIG = "min.insync.replicas"
# A change that keeps meeting newer state is given up after this many tries (each retry
# means another gateway's change landed in between: the cluster is making progress).
_STALE_RETRIES = 20
_T = TypeVar("_T")


class RegistryPart(Protocol):
    """A part of the registry: it decides on the one RegistryState it is given."""

    _state: RegistryState


def retry_stale(state: RegistryState, attempt: Callable[[], _T]) -> _T:
    """Run a change again on the stored state when another gateway wrote first: the failed
    attempt changed nothing in memory (decisions are made on copies). A controller's fenced
    decision is not retried: that controller has been deposed."""
    for tries in range(_STALE_RETRIES):
        try:
            return attempt()
        except ControllerFencedError:
            state.reload()
            raise
        except StaleRegistryError:
            state.reload()
            if tries == _STALE_RETRIES - 1:
                raise
    raise AssertionError("unreachable")


def retrying(method: Callable[..., _T]) -> Callable[..., _T]:
    """A part's change, run by `retry_stale` on the state the part decides on."""

    @functools.wraps(method)
    def run(self: RegistryPart, *args: Any, **kwargs: Any) -> _T:
        return retry_stale(self._state, lambda: method(self, *args, **kwargs))

    return run


class RegistryState:
    """The fields, image, lock and log every part of the registry shares."""

    def __init__(
        self,
        data_dir: Path,
        *,
        session_timeout_s: float,
        store: MetadataStore | None = None,
        sessions: EtcdNodeSessions | None = None,
    ) -> None:
        self.store: MetadataStore = (
            store
            if store is not None
            else FileMetadataStore(
                data_dir / METADATA_DIR, legacy_document=data_dir / REGISTRY_FILE
            )
        )
        self.session_timeout_s = session_timeout_s
        # Called (outside the lock) with the partitions whose registration changed.
        self.listeners: list[Callable[[list[PartitionChange]], object]] = []
        # Called (outside the lock) with every ACL after a change, and the metadata offset
        # they stand at.
        self.acl_listeners: list[Callable[[list[AclBinding], int], object]] = []
        # One notification at a time: each reads the image after the one before, so the
        # listeners never see an older state after a newer one.
        self._acl_notifications = threading.Lock()
        self._lock = threading.RLock()
        self.image = MetadataImage()
        self.nodes: dict[int, Node] = {}
        # Partition registrations copied for the controller's decisions: what a tick costs.
        self.partitions_examined = 0
        # The eligible nodes and the offset at the last election of leaderless partitions:
        # until either changes another election would find no leader either.
        self.last_election: tuple[frozenset[int], int] | None = None
        # Node sessions as etcd leases (several gateways), else heartbeats to this one.
        self.sessions = sessions
        self.liveness = NodeLiveness(
            self.nodes, self._lock, session_timeout_s=session_timeout_s, sessions=sessions
        )
        if sessions is not None:
            sessions.listeners.append(self.liveness.session_changed)
        data_dir.mkdir(parents=True, exist_ok=True)
        self._reset(self.store.load())
        self._bootstrap(data_dir, file_backend=isinstance(self.store, FileMetadataStore))
        self.store.watch(self._watched, self._watched_reset)

    def _bootstrap(self, data_dir: Path, *, file_backend: bool) -> None:
        """The cluster id made once, or another backend's registry adopted
        (registry_bootstrap.py); another gateway bootstrapping first makes this one take
        its batch and look again."""
        retry_stale(self, lambda: self._bootstrap_once(data_dir, file_backend=file_backend))

    def _bootstrap_once(self, data_dir: Path, *, file_backend: bool) -> None:
        with self._lock:
            step = registry_bootstrap.plan(self.image, data_dir, file_backend=file_backend)
            if step.records:
                self._commit(step.records)
                logger.info("registry bootstrapped: cluster id %s", self.image.cluster_id)
            if step.move_file_registry_aside:
                registry_bootstrap.move_file_registry_aside(data_dir)
                logger.warning(
                    "the file registry of %s was copied into this registry (cluster %s, %d "
                    "topics) and moved aside as %s%s",
                    data_dir,
                    self.image.cluster_id,
                    len(self.image.topics),
                    METADATA_DIR,
                    registry_bootstrap.MOVED_TO_ETCD,
                )

    @property
    def cluster_id(self) -> str:
        """The cluster's id (Kafka's form), set once when the registry was bootstrapped."""
        return self.image.cluster_id

    @property
    def topics(self) -> dict[str, Topic]:
        return self.image.topics

    @property
    def acls(self) -> list[AclBinding]:
        return self.image.acls

    @property
    def client_quotas(self) -> dict[tuple[tuple[str, str], ...], dict[str, float]]:
        """entity (sorted (entity type, name) pairs) -> quota key -> bytes/s"""
        return self.image.client_quotas

    @property
    def next_producer_id_block(self) -> int:
        return self.image.next_producer_id_block

    @property
    def metadata_offset(self) -> int:
        return self.image.offset

    @property
    def acls_narrowed_offset(self) -> int:
        return self.image.acls_narrowed_offset

    # -- the log -------------------------------------------------------------------------

    def _commit(self, records: list[Record], fence: Fence | None = None) -> Applied:
        """Store one batch, then apply it (call with the lock held)."""
        offset = self.store.append(records, self.image.offset, fence)
        applied = self.image.apply(offset, records)
        self.liveness.recorded(applied.nodes, self.image.node_addresses)
        if applied.created:
            long_lived.settle()
        if self.store.wants_snapshot():
            try:
                self.store.snapshot(self.image.offset, self.image.records())
            except Exception:  # the log still holds every batch: recovery is only longer
                logger.exception("taking a metadata snapshot failed")
        return applied

    def _watched(self, offset: int, records: list[Record]) -> None:
        """Another gateway's batch, from the store's watch."""
        with self._lock:
            if offset <= self.image.offset:
                return  # this registry's own write, or one it has already taken
            try:
                applied = self.image.apply(offset, records)
            except MetadataRecordError:  # the image may be half changed: take the log whole
                logger.exception("a watched metadata batch at offset %d did not apply", offset)
                self.reload()
                return
            self.liveness.recorded(applied.nodes, self.image.node_addresses)
        if applied.created:
            long_lived.settle()
        self._notify(applied.partitions)
        if applied.acls:
            self._notify_acls()

    def _watched_reset(self, batches: list[Batch]) -> None:
        with self._lock:
            if (batches[-1][0] if batches else 0) == self.image.offset:
                return  # nothing this image lacks (the watch's first snapshot, usually)
        self._take(batches)

    def reload(self) -> None:
        """Take the stored log now (after a write found it newer than this image)."""
        with self._lock:
            self._take(self.store.load())

    def _take(self, batches: list[Batch]) -> None:
        """Bring the image to the stored log's end: as deltas when the log still holds
        every batch after the image's offset (its snapshot is not newer than the image),
        so nodes keep getting deltas; else as a whole new image."""
        with self._lock:
            acls_before = list(self.image.acls)
            created = False
            if batches and batches[0][0] <= self.image.offset:
                changed = set()
                for offset, records in batches:
                    if offset > self.image.offset:
                        applied = self.image.apply(offset, records)
                        self.liveness.recorded(applied.nodes, self.image.node_addresses)
                        changed |= applied.partitions
                        created = created or applied.created
            else:
                changed = self._reset(batches)
                created = True  # a whole new image
            acls_changed = self.image.acls != acls_before
        if created:  # not on every reload: a write that lost a race reloads too
            long_lived.settle()
        self._notify(changed)
        if acls_changed:
            self._notify_acls()

    def _reset(self, batches: list[Batch]) -> set[PartitionChange]:
        """A whole image from a snapshot and its tail; the partitions whose registration
        differs from before."""
        image = MetadataImage.from_batches(batches)
        before = self.image
        changed = set()
        for name in before.topics.keys() | image.topics.keys():
            old, new = before.topics.get(name), image.topics.get(name)
            old_parts = old.partitions if old else []
            new_parts = new.partitions if new else []
            for i in range(max(len(old_parts), len(new_parts))):
                if i >= len(old_parts) or i >= len(new_parts) or old_parts[i] != new_parts[i]:
                    changed.add((name, i))
        with self._lock:
            self.image = image
            self.liveness.recorded(set(image.node_addresses), image.node_addresses)
        return changed

    def _notify(self, changed: set[PartitionChange]) -> list[PartitionChange]:
        ordered = sorted(changed)
        if ordered:
            for listener in self.listeners:
                try:
                    listener(ordered)
                except Exception:
                    logger.exception("a registry listener failed")
        return ordered

    def _notify_acls(self) -> None:
        with self._acl_notifications:
            # The offset read first: a batch applied meanwhile makes the ACLs newer than it
            # says, never older (grants made under them are then refused sooner, not later).
            offset = self.image.offset
            current = list(self.image.acls)
            for listener in self.acl_listeners:
                listener(current, offset)

    def _working(
        self, wanted: Iterable[PartitionChange]
    ) -> dict[PartitionChange, PartitionAssignment]:
        """Copies of the wanted registrations, for a decision that must change nothing
        until its records are stored."""
        working = {}
        for tp in wanted:
            p = self.image.partition(tp)
            if p is not None:
                working[tp] = p.copy()
        self.partitions_examined += len(working)
        return working

    @staticmethod
    def _partition_records(
        working: dict[PartitionChange, PartitionAssignment], changed: Iterable[PartitionChange]
    ) -> list[Record]:
        return [partition_record(tp[0], tp[1], working[tp].to_json()) for tp in sorted(changed)]

    # -- node liveness (node_liveness.py) -------------------------------------------------

    def is_live(self, node_id: int) -> bool:
        return self.liveness.is_live(node_id)

    def live_nodes(self) -> list[int]:
        return self.liveness.live_nodes()

    def _min_isr(self, topic_name: str) -> int:
        """A topic's min.insync.replicas as its nodes count it: the topic's setting, else the
        largest default the nodes registered with (their --config log.min.insync.replicas,
        kept in their node records, so known at once after a restart). The largest, because
        a replica counted eligible (ELR) must hold what any node's leader may have
        committed."""
        topic = self.image.topics.get(topic_name)
        configured = min_isr_setting(topic.configs.get(MIN_ISR_CONFIG)) if topic else None
        return configured or self.image.min_isr_default

    def _eligible(self, node_id: int) -> bool:
        """May lead or join an ISR: registered, live, not fenced, not shutting down."""
        return self.liveness.eligible(node_id)

    @property
    def _avoided(self) -> set[int]:
        """Nodes that lead only where no other can: the decommissioned ones."""
        return self.image.decommissioned

    # -- reads ---------------------------------------------------------------------------

    def leader_counts(self) -> dict[int, int]:
        with self._lock:
            counts = {n: len(self.image.led.get(n, ())) for n in self.nodes}
            counts.update((n, len(tps)) for n, tps in self.image.led.items() if tps)
            return counts

    def decommissioned_nodes(self) -> set[int]:
        with self._lock:
            return set(self.image.decommissioned)

    def offline_partition_count(self) -> int:
        """Partitions with no leader or a leader whose session is not live (Kafka's
        OfflinePartitionsCount), from the per-leader index: one pass over topics and nodes."""
        with self._lock:
            total = sum(len(topic.partitions) for topic in self.image.topics.values())
            led_live = sum(len(tps) for n, tps in self.image.led.items() if self.is_live(n))
            return total - led_live

    def replica_counts(self) -> dict[int, int]:
        with self._lock:
            counts = {n: len(self.image.hosted.get(n, ())) for n in self.nodes}
            counts.update((n, len(tps)) for n, tps in self.image.hosted.items() if tps)
            return counts

    def partitions_of(
        self, wanted: list[PartitionChange]
    ) -> list[tuple[Topic, int, PartitionAssignment]]:
        """The named partitions that still exist, each with a copy of its registration."""
        with self._lock:
            out = []
            for name, i in wanted:
                topic = self.image.topics.get(name)
                if topic is not None and 0 <= i < len(topic.partitions):
                    out.append((topic, i, topic.partitions[i].copy()))
            return out

    def addresses(self) -> dict[int, str]:
        with self._lock:
            return {n: node.address for n, node in self.nodes.items()}

    def bulk_addresses(self) -> dict[int, str]:
        with self._lock:
            return {n: node.bulk_address for n, node in self.nodes.items() if node.bulk_address}

    def assignment_for(self, node_id: int) -> list[tuple[Topic, int, PartitionAssignment]]:
        with self._lock:
            return self.partitions_of(sorted(self.image.hosted.get(node_id, ())))

    def node_view(self, node_id: int, since: int) -> NodeView:
        """The states `node_id` needs after metadata offset `since`: a delta, or its whole
        assignment when `since` is 0, older than the retained history, or ahead of this
        registry (an offset from another registry)."""
        with self._lock:
            offset = self.image.offset
            changes = None
            if 0 < since <= offset:
                changes = self.image.history.since(node_id, since)
            if changes is None:
                return NodeView(offset, True, self.assignment_for(node_id), [])
            return NodeView(
                offset, False, self.partitions_of(sorted(changes.changed)), sorted(changes.removed)
            )

    def pushed(self, node_id: int, offset: int) -> None:
        """A push that brings the node to `offset` was delivered."""
        with self._lock:
            node = self.nodes.get(node_id)
            if node is not None and offset > node.metadata_offset:
                node.metadata_offset = offset


def min_isr_setting(value: str | None) -> int | None:
    """A min.insync.replicas value as set (a topic's config, a node's default); None when
    unset or not a number."""
    try:
        return max(int(value), 1) if value is not None else None
    except ValueError:
        return None
