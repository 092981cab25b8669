"""The storage node's domain object (Kafka's ReplicaManager): the partitions it hosts (each a
`Partition`: log, role, followers, ISR, high watermark), appends, fetches that wait for data,
and replication: the fetchers that copy from leaders (follower_fetchers.py) and the ISR changes
it proposes to the registry. The gRPC servicer (service.py) only translates calls to and from
it, and the registry session feeds it the partition states the registry decides.

Append: the whole request is checked (every partition led here at the caller's leader epoch,
with enough in-sync replicas for acks=all, every batch validated by the engine) before any
partition is appended; a failure there fails the call and writes nothing. acks=all then
waits (Kafka's DelayedProduce) until the high watermark passes each partition's batches.

Fetch: the leader's side of fetches is leader_fetches.py. An append or a high-watermark move
on a partition wakes only what waits on that partition (fetch_waits.py).

Fencing: the registry session fences the node (`fence`) when its heartbeats have gone
unanswered for its session timeout, and lifts it (`unfence`) once one is answered and the
answer's partition states are applied; meanwhile every partition it led refuses to act as
leader (partition.py), and acks=all appends still waiting fail NOT_LEADER_OR_FOLLOWER at
once, as for a leadership that moved.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from seglog.errors import NotLeaderError, SeglogError
from seglog.security.tls import TlsFiles
from seglog.storage import Log, log_files
from seglog.storage.log import TimestampAndOffset
from seglog.storage.log_manager import LogManager
from seglog.storage.log_reads import Split
from seglog.storage.txn_verification import check_open_transaction
from seglog.storage.validation import ValidatedRecords
from seglog.v1 import common_pb2

from . import tiered_offsets
from .delayed_produce import AppendResult, wait_for_replication
from .fetch_reads import CONSUMER, READ_COMMITTED, FetchChunk, FetchState, read_chunks, tiered
from .fetch_sessions import SessionRound
from .fetch_waits import PartitionWaiters, Waiter
from .follower_fetchers import FollowerFetchers
from .isr_updates import IsrUpdates
from .leader_fetches import LeaderFetches
from .partition import Partition, Registration
from .record_deletion import delete_records_as_leader, move_remote_log_start
from .remote_fetches import RemoteFetches
from .replica_fetcher import FetcherSettings

logger = logging.getLogger(__name__)

DEFAULT_CHUNK_BYTES = 1024 * 1024
NO_EPOCH = -1
ACKS_ALL = -1
TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class ReplicationSettings:
    """Kafka's replica.* settings, with its defaults."""

    replica_lag_time_max_ms: int = 30_000
    fetcher: FetcherSettings = FetcherSettings()


@dataclass(frozen=True)
class PartitionDescription:
    topic: str
    partition: int
    leader_epoch: int
    log_start_offset: int = -1
    log_end_offset: int = -1
    size_bytes: int = 0
    segment_count: int = 0
    error: SeglogError | None = None
    high_watermark: int = -1
    role: str = ""


class ReplicaManager:
    def __init__(
        self,
        logs: LogManager,
        *,
        node_id: int = 0,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        replication: ReplicationSettings | None = None,
    ) -> None:
        self.logs = logs
        self.node_id = node_id
        self.chunk_bytes = chunk_bytes
        self.replication = replication or ReplicationSettings()
        self._partitions: dict[TopicPartition, Partition] = {}
        self._partitions_lock = threading.RLock()
        self.waiters = PartitionWaiters()  # who waits on which partition's progress
        self._stopping = False
        self.node_addresses: dict[int, str] = {}
        self.node_bulk_addresses: dict[int, str] = {}
        self.cluster_secret: bytes | None = None  # set when the node has a bulk listener
        # Tiered storage: deleted topics' partitions whose objects go; reads below local start.
        self.remote_deletions: Callable[[str, str, int], None] | None = None
        self.remote: RemoteFetches | None = None
        self.tls: TlsFiles | None = None  # the node's certificate, for its peers
        self.follower_fetchers = FollowerFetchers(node_id, self.replication.fetcher)
        self._fenced: str | None = None  # why the node is fenced, None while it is not
        self.isr_updates = IsrUpdates(
            lambda topic, number: self._partitions.get((topic, number)),
            lambda: list(self._partitions.values()),
            self.replication.replica_lag_time_max_ms,
            self.wake_partition,
        )
        self.fetches = LeaderFetches(
            self.partition, self.waiters, self.isr_updates, lambda: self._stopping
        )
        self.fetch_sessions = self.fetches.sessions

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start the ISR maintenance (Kafka's isr-expiration and AlterPartition sending)."""
        self.isr_updates.start()

    def stop(self) -> None:
        """Stop fetchers and ISR work; wake every waiting fetch so it answers with what it has."""
        self._stopping = True
        self.isr_updates.stop()
        with self._partitions_lock:
            fetchers = self.follower_fetchers.detach_all()
        for fetcher in fetchers:
            fetcher.shutdown()
        self.wake_fetchers()
        self.fetch_sessions.evict_all()

    # -- fencing -------------------------------------------------------------------------

    @property
    def fenced(self) -> str | None:
        return self._fenced

    def fence(self, reason: str) -> bool:
        """Stop leading on this node's own authority (its standing may have ended); whether
        it was not fenced before (the caller says why, at the level the reason deserves)."""
        with self._partitions_lock:
            was, self._fenced = self._fenced, reason
            for held in self._partitions.values():
                held.fenced = reason
        self.wake_fetchers()  # acks=all waits answer now
        return was is None

    def unfence(self) -> str | None:
        """Lead again on the registry's word; the fence lifted (None: there was none)."""
        lifted = self._fenced
        if lifted is None:
            return None  # every answered heartbeat calls this
        with self._partitions_lock:
            self._fenced = None
            for held in self._partitions.values():
                held.fenced = None
        self.wake_fetchers()
        return lifted

    # -- partitions ----------------------------------------------------------------------

    def partition(self, topic: str, partition: int) -> Partition:
        found = self._partitions.get((topic, partition))
        if found is None:
            self.logs.get_log(topic, partition)  # its precise error: unknown, or offline
            raise NotLeaderError(
                f"{topic}-{partition}: this node has not received its state from the registry "
                f"yet; refresh metadata"
            )
        return found

    def partition_if_hosted(self, topic: str, partition: int) -> Partition | None:
        return self._partitions.get((topic, partition))

    def leader_epoch(self, topic: str, partition: int) -> int:
        found = self._partitions.get((topic, partition))
        return NO_EPOCH if found is None else found.leader_epoch

    def hosted(self) -> list[TopicPartition]:
        return sorted(self.logs.logs())

    def offline(self) -> dict[TopicPartition, str]:
        return self.logs.offline()

    def topic_configs(self, topic: str) -> dict[str, str]:
        """The topic's overrides as the registry last gave them."""
        return {k: str(v) for k, v in self.logs.topic_overrides(topic).items()}

    def registration(self, topic: str, partition: int) -> Registration | None:
        found = self._partitions.get((topic, partition))
        return None if found is None else found.registration

    def apply_state(
        self, topic: str, partition: int, configs: Mapping[str, str], registration: Registration
    ) -> None:
        """Host the partition under the registry's registration (Kafka's LeaderAndIsr): its
        log created if needed (anew if the one held is another topic id's), the role taken,
        fetching started or stopped; an older registration changes nothing but configs."""
        # The same checks the gateway makes: the node's API is reachable by any caller.
        log_files.check_topic_name(topic)
        if dict(configs) != self.topic_configs(topic):
            self.logs.set_topic_overrides(topic, dict(configs))
        tp = (topic, partition)
        with self._partitions_lock:
            held = self._partitions.get(tp)
            topic_id = registration.topic_id
            if held is not None and self.logs.holds_other_topic(topic, partition, topic_id):
                self._forget(topic, partition)  # the log manager sets the old log aside
                held = None
            log = self.logs.create_log(topic, partition, topic_id=topic_id)
            if held is None:
                held = self._partitions[tp] = Partition(
                    topic, partition, log, self.node_id, fenced=self._fenced
                )
            if not held.apply(registration):
                return
            self._update_fetching(held)
        self.wake_partition(topic, partition)

    def create_log(
        self, topic: str, partition: int, configs: Mapping[str, str], topic_id: str = ""
    ) -> None:
        """A new partition's directory and files, without a role (on the applier's
        lower-priority creation thread, so nothing here starts a thread: a thread inherits
        its starter's priority, and a replica fetcher must not run lower)."""
        log_files.check_topic_name(topic)
        if dict(configs) != self.topic_configs(topic):
            self.logs.set_topic_overrides(topic, dict(configs))
        self.logs.create_log(topic, partition, topic_id=topic_id)

    def host_as_sole_leader(
        self, topic: str, partition: int, leader_epoch: int, configs: Mapping[str, str]
    ) -> Log:
        """A partition with this node as its only replica (tests, tools without a registry)."""
        me = (self.node_id,)
        self.apply_state(
            topic, partition, configs, Registration(self.node_id, leader_epoch, 0, me, me)
        )
        return self.logs.get_log(topic, partition)

    def _update_fetching(self, held: Partition) -> None:
        tp = (held.topic, held.partition)
        self.follower_fetchers.unfollow(tp)
        r = held.registration
        if r is None or held.is_leader or r.leader < 0 or self._stopping:
            return
        address = self.node_addresses.get(r.leader)
        if address is None:
            logger.warning("%s-%d: no address known for leader %d", *tp, r.leader)
            return
        bulk_address = self.node_bulk_addresses.get(r.leader, "")
        self.follower_fetchers.follow(
            held, r.leader, address, bulk_address, self.cluster_secret, self.tls
        )

    def delete_partition(self, topic: str, partition: int) -> None:
        log_files.check_topic_name(topic)
        self._forget(topic, partition)
        self.logs.delete_log(topic, partition)
        self.wake_partition(topic, partition)

    def set_aside_partition(self, topic: str, partition: int) -> Path | None:
        self._forget(topic, partition)
        return self.logs.set_aside_log(topic, partition)

    def _forget(self, topic: str, partition: int) -> None:
        with self._partitions_lock:
            self.follower_fetchers.unfollow((topic, partition))
            self._partitions.pop((topic, partition), None)

    def mark_offline(self, topic: str, partition: int, reason: str) -> None:
        self.logs.mark_offline(topic, partition, reason)

    def forget_offline(self, topic: str, partition: int) -> None:
        self.logs.forget_offline(topic, partition)

    # -- append --------------------------------------------------------------------------

    def append(
        self,
        topic: str,
        entries: Sequence[tuple[int, bytes | memoryview, int]],
        acks: int = 1,
        *,
        open_transactions_only: bool = False,
    ) -> list[AppendResult]:
        """Append (partition, records, client leader epoch) entries, all checked first: an
        error raised here wrote nothing; a partition's own failure (too few in-sync replicas
        for acks=all: nothing written there; an append error) is its result's.
        `open_transactions_only`: no coordinator verified the request's transactional
        batches (storage/txn_verification.py)."""
        checked: list[tuple[int, Partition, ValidatedRecords, int]] = []
        for number, records, client_epoch in entries:
            held = self.partition(topic, number)
            held.require_leader(client_epoch)
            try:
                validated = held.log.validate(records, client=True)
                if open_transactions_only:
                    check_open_transaction(held.log.producer_state, validated, "the partition")
                checked.append((number, held, validated, client_epoch))
            except SeglogError as exc:
                raise type(exc)(f"{topic}-{number}: {exc}") from None
        results = []
        wakes = []  # (partition, whether its high watermark moved)
        for number, held, validated, client_epoch in checked:
            try:
                # The role is checked again and the batches written under the partition's
                # lock, which a new registration takes (Kafka's leaderIsrUpdateLock): a
                # produce checked while this node led must not land after it became a
                # follower, stamped with the new leader's epoch.
                with held._lock:
                    held.require_leader(client_epoch)
                    if acks == ACKS_ALL:
                        held.check_enough_replicas()  # Kafka's per-partition refusal
                    epoch = held.leader_epoch
                    self.fetches.note_idle_followers(held)
                    if open_transactions_only:  # again: a marker may have ended it since
                        check_open_transaction(held.log.producer_state, validated, "the partition")
                    info = held.log.append(validated, leader_epoch=epoch)
                results.append(AppendResult(number, info, leader_epoch=epoch))
            except SeglogError as exc:
                results.append(AppendResult(number, None, exc))
            moved = held.maybe_increment_high_watermark()
            wakes.append((number, moved))
        for number, moved in wakes:
            self.waiters.wake((topic, number), watermark=moved)
        return results

    def wait_for_replication(
        self, topic: str, results: list[AppendResult], timeout_ms: int
    ) -> list[AppendResult]:
        """acks=all: delayed_produce.py."""
        return wait_for_replication(
            self.partition_if_hosted,
            self.waiters,
            lambda: self._stopping,
            topic,
            results,
            timeout_ms,
        )

    def wake_fetchers(self) -> None:
        """Wake every waiting fetch, session and acks=all append (stopping, fenced, unfenced)."""
        self.waiters.wake_all()

    def wake_partition(self, topic: str, partition: int) -> None:
        """Wake what waits on this partition (an append; its HW, start or registration moved)."""
        self.waiters.wake((topic, partition))

    # -- fetch (leader_fetches.py) ----------------------------------------------------------

    def fetch_states(
        self, wanted: Sequence[tuple[str, int, int, int, int, int]], replica_id: int = CONSUMER
    ) -> list[FetchState]:
        return self.fetches.fetch_states(wanted, replica_id)

    def wait_for_fetch(
        self,
        states: list[FetchState],
        min_bytes: int,
        max_wait_ms: int,
        is_active: Callable[[], bool],
        waiter: Waiter | None = None,
    ) -> None:
        self.fetches.wait_for_fetch(states, min_bytes, max_wait_ms, is_active, waiter)

    def session_fetch(
        self,
        request: common_pb2.FetchRequest,
        client_epoch: Callable[[common_pb2.FetchPartition], int],
        is_active: Callable[[], bool],
    ) -> SessionRound:
        return self.fetches.session_fetch(request, client_epoch, is_active)

    def read_chunks(self, states: list[FetchState], max_bytes: int) -> Iterator[FetchChunk]:
        return read_chunks(states, max_bytes, self.chunk_bytes, self.remote)

    # -- offsets and descriptions --------------------------------------------------------

    def list_offset(
        self, topic: str, partition: int, timestamp_ms: int, client_epoch: int, isolation: int = 0
    ) -> TimestampAndOffset | None:
        """Kafka's ListOffsets, below the HW (READ_COMMITTED: the LSO); tiered_offsets.py."""
        held = self.partition(topic, partition)
        held.require_leader(client_epoch)
        log = held.log
        bound = log.last_stable_offset if isolation == READ_COMMITTED else log.high_watermark
        return tiered_offsets.list_offset(log, topic, partition, timestamp_ms, self.remote, bound)

    def delete_records(self, topic: str, partition: int, offset: int, client_epoch: int) -> int:
        """Kafka's DeleteRecords on the leader: move the log start offset to `offset` (-1: the
        high watermark), never past the high watermark, so only what consumers could already
        read is deleted. Returns the log start offset now. Followers take it from their next
        fetch answer: their waiting fetches are woken for it."""
        held = self.partition(topic, partition)
        with held._lock:  # as an append: not on a node that became a follower meanwhile
            wanted, start = delete_records_as_leader(held, offset, client_epoch)
        if self.remote is not None and tiered(held.log):
            # Below (or past) the local start, the remote data's start moves too (Kafka's
            # logStartOffset): recorded in the store, outside the partition's lock.
            start = move_remote_log_start(self.remote, topic, partition, wanted, start)
        self.wake_partition(topic, partition)
        return start

    def split_points(
        self,
        topic: str,
        partition: int,
        start_offset: int,
        end_offset: int,
        target_bytes: int,
        client_epoch: int,
    ) -> tuple[int, int, list[Split]]:
        """Byte-balanced pieces of a range a client reads, up to the HW: Log.split_points."""
        held = self.partition(topic, partition)
        held.require_leader(client_epoch)
        return held.log.split_points(start_offset, end_offset, target_bytes)

    def describe(self, topic: str, partition: int) -> PartitionDescription:
        epoch = self.leader_epoch(topic, partition)
        try:
            held = self.partition(topic, partition)
        except SeglogError as exc:
            return PartitionDescription(topic, partition, epoch, error=exc)
        log = held.log
        role = "" if held.registration is None else "leader" if held.is_leader else "follower"
        if role == "leader" and held.fenced is not None:
            role = ""  # it cannot tell whether it still leads
        return PartitionDescription(
            topic,
            partition,
            epoch,
            log.log_start_offset,
            log.log_end_offset,
            log.size_in_bytes,
            len(log.segments),
            high_watermark=log.high_watermark,
            role=role,
        )
