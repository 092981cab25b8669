"""One partition's replica on this node (Kafka's Partition): its log, its role (leader or
follower) under the registration the registry gave it, and on the leader the state of each
follower, the ISR and the high watermark.

The rules are Kafka's (core/cluster/Partition.scala, Replica.scala):
- A follower's fetch at offset O says it holds everything below O: its log end offset
  becomes O. It is caught up at the fetch time when O reaches the leader's log end offset,
  or at the previous fetch's time when O reaches the log end offset the leader had then.
- Out of sync: not caught up for more than `replica.lag.time.max.ms` (and not at the
  leader's log end offset).
- ISR expansion: a follower not in the ISR whose log end offset reached both the high
  watermark and the start offset of the leader's current epoch.
- The high watermark is the lowest log end offset over the leader and the maximal ISR (the
  committed ISR plus a pending addition, KIP-497); it never moves back, and it stays put
  while the committed ISR is smaller than min(min.insync.replicas, replicas) (KIP-966).
- An ISR change is proposed to the registry (AlterPartition) and takes effect when it
  answers; one proposal at a time.
- A fenced node (its heartbeats unanswered for its session timeout: the registry may have
  elected another leader since, Kafka's fenced broker) leads nothing on its own authority:
  it refuses produce and reads as leader (NOT_LEADER_OR_FOLLOWER, retriable), serves no
  follower, and neither moves its high watermark nor proposes ISR changes, until a
  heartbeat is answered again and its registration is current.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from seglog.errors import (
    FencedLeaderEpochError,
    NotEnoughReplicasError,
    NotLeaderError,
    UnknownLeaderEpochError,
)
from seglog.storage import Log

NO_LEADER = -1


def now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass(frozen=True)
class Registration:
    """The registry's state of a partition (Kafka's PartitionRegistration)."""

    leader: int
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    # A reassignment under way: the replicas it adds, and the bytes/s their catch-up may
    # take (0: unthrottled; replication_throttle.py).
    adding: tuple[int, ...] = ()
    throttle_bytes_per_s: int = 0
    topic_id: str = ""  # KIP-516's ("": a registry from before topic ids)

    def throttles(self, replica: int) -> int:
        """The bytes/s `replica`'s fetches are held to (0: none): an adding replica's, until
        it is in sync (Kafka never throttles an in-sync replica: acks=all waits on it)."""
        if replica in self.adding and replica not in self.isr:
            return self.throttle_bytes_per_s
        return 0

    def newer_than(self, other: Registration | None) -> bool:
        if other is None:
            return True
        return (self.leader_epoch, self.partition_epoch) > (
            other.leader_epoch,
            other.partition_epoch,
        )


@dataclass
class FollowerState:
    log_end_offset: int = -1  # unknown until it fetches from this leader
    log_start_offset: int = -1
    last_fetch_leader_log_end_offset: int = -1
    last_fetch_time_ms: int = 0
    last_caught_up_time_ms: int = 0


@dataclass(frozen=True)
class IsrProposal:
    """An AlterPartition this leader sends: the ISR it wants, from the registration it has."""

    topic: str
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]


@dataclass
class Partition:
    topic: str
    partition: int
    log: Log
    local_node_id: int
    registration: Registration | None = None
    followers: dict[int, FollowerState] = field(default_factory=dict)
    pending_isr: tuple[int, ...] | None = None  # an AlterPartition in flight
    fenced: str | None = None  # why this node cannot vouch for its role now (None: it can)
    _lock: threading.RLock = field(default_factory=threading.RLock)

    # -- role ------------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        r = self.registration
        return r is not None and r.leader == self.local_node_id

    @property
    def leader_epoch(self) -> int:
        return -1 if self.registration is None else self.registration.leader_epoch

    @property
    def isr(self) -> tuple[int, ...]:
        return () if self.registration is None else self.registration.isr

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        if self.pending_isr is None:
            return self.isr
        return tuple(sorted(set(self.isr) | set(self.pending_isr)))

    def apply(self, registration: Registration) -> bool:
        """Take a newer registration; True when it changes the leader epoch (a new term:
        a follower restarts fetching, a leader starts its epoch)."""
        with self._lock:
            if not registration.newer_than(self.registration):
                return False
            previous = self.registration
            new_term = previous is None or registration.leader_epoch != previous.leader_epoch
            self.registration = registration
            self.pending_isr = None
            if registration.leader == self.local_node_id and new_term:
                self._start_leading()
            elif registration.leader != self.local_node_id:
                self.followers = {}
            else:
                self._track_replicas(registration.replicas)
            return new_term

    def _track_replicas(self, replicas: tuple[int, ...]) -> None:
        """The same term with other replicas (a reassignment adds or drops some): an added
        one is tracked from its first fetch (so it can join the ISR once it catches up), a
        dropped one forgotten (Kafka's updateAssignmentAndIsr)."""
        wanted = {r for r in replicas if r != self.local_node_id}
        self.followers = {r: s for r, s in self.followers.items() if r in wanted}
        for replica in wanted - self.followers.keys():
            self.followers[replica] = FollowerState()

    def _start_leading(self) -> None:
        """Kafka's makeLeader: the new epoch starts at the log end offset; followers'
        offsets are forgotten; ISR members count as caught up now."""
        r = self.registration
        assert r is not None
        log = self.log
        # A new partition's log holds no batch: its first entry is written without fsync,
        # which the log's next flush makes up for (leader_epoch_cache.py says why that is
        # safe); creating thousands of partitions otherwise costs two fsyncs per leader.
        log.leader_epochs.assign(
            r.leader_epoch,
            log.log_end_offset,
            log_holds_batches=log.log_end_offset > log.log_start_offset,
        )
        now = now_ms()
        self.followers = {
            replica: FollowerState(last_caught_up_time_ms=now if replica in r.isr else 0)
            for replica in r.replicas
            if replica != self.local_node_id
        }
        self.maybe_increment_high_watermark()

    def check_leader_epoch(self, requested_epoch: int) -> None:
        """Kafka's checkCurrentLeaderEpoch for requests that name an epoch (-1: any)."""
        if requested_epoch < 0:
            return
        if requested_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(
                f"{self.topic}-{self.partition}: leader epoch {requested_epoch} is older than "
                f"{self.leader_epoch}"
            )
        if requested_epoch > self.leader_epoch:
            raise UnknownLeaderEpochError(
                f"{self.topic}-{self.partition}: leader epoch {requested_epoch} is newer than "
                f"this replica knows ({self.leader_epoch})"
            )

    def require_leader(self, client_epoch: int) -> None:
        if self.fenced is not None and self.is_leader:
            raise NotLeaderError(
                f"{self.topic}-{self.partition}: node {self.local_node_id} led epoch "
                f"{self.leader_epoch} but is fenced ({self.fenced}); refresh metadata"
            )
        if not self.is_leader:
            leader = NO_LEADER if self.registration is None else self.registration.leader
            raise NotLeaderError(
                f"{self.topic}-{self.partition}: node {self.local_node_id} is not its leader "
                f"(leader: {leader}, epoch {self.leader_epoch}); refresh metadata"
            )
        if client_epoch >= 0 and client_epoch != self.leader_epoch:
            raise NotLeaderError(
                f"{self.topic}-{self.partition}: request carries leader epoch {client_epoch}, "
                f"this node leads epoch {self.leader_epoch}; refresh metadata"
            )

    # -- leader: followers, ISR, high watermark --------------------------------------------

    def check_enough_replicas(self) -> None:
        """acks=all refuses before writing when the ISR is below min.insync.replicas."""
        needed = self.log.config.min_insync_replicas
        if len(self.isr) < needed:
            raise NotEnoughReplicasError(
                f"{self.topic}-{self.partition}: {len(self.isr)} in-sync replicas "
                f"{list(self.isr)}, min.insync.replicas is {needed}; nothing was written"
            )

    def enough_replicas_after_append(self) -> bool:
        return len(self.maximal_isr) >= self.log.config.min_insync_replicas

    def record_follower_fetch(
        self, replica: int, fetch_offset: int, log_start_offset: int
    ) -> IsrProposal | None:
        """A follower fetched at `fetch_offset`: update its state (Kafka's
        updateFollowerFetchState), move the high watermark; an ISR expansion to propose,
        if it now qualifies."""
        with self._lock:
            state = self.followers.get(replica)
            if state is None or not self.is_leader:
                return None
            now = now_ms()
            leader_end = self.log.log_end_offset
            if fetch_offset >= leader_end:
                state.last_caught_up_time_ms = max(state.last_caught_up_time_ms, now)
            elif fetch_offset >= state.last_fetch_leader_log_end_offset >= 0:
                state.last_caught_up_time_ms = max(
                    state.last_caught_up_time_ms, state.last_fetch_time_ms
                )
            state.log_end_offset = fetch_offset
            state.log_start_offset = log_start_offset
            state.last_fetch_leader_log_end_offset = leader_end
            state.last_fetch_time_ms = now
            self.maybe_increment_high_watermark()
            return self._expansion(replica, state)

    def _expansion(self, replica: int, state: FollowerState) -> IsrProposal | None:
        r = self.registration
        if r is None or replica in r.isr or self.pending_isr is not None:
            return None
        if self.fenced is not None:
            return None
        epoch_start = self.log.leader_epochs.start_offset_of(r.leader_epoch)
        if state.log_end_offset < self.log.high_watermark or (
            epoch_start is not None and state.log_end_offset < epoch_start
        ):
            return None
        new_isr = tuple(x for x in r.replicas if x in r.isr or x == replica)
        self.pending_isr = new_isr
        return IsrProposal(self.topic, self.partition, r.leader_epoch, r.partition_epoch, new_isr)

    def shrink_proposal(self, lag_time_max_ms: int) -> IsrProposal | None:
        """Followers in the ISR that have not caught up within `lag_time_max_ms` leave it."""
        r = self.registration
        if r is None or r.leader != self.local_node_id or len(r.isr) <= 1:
            # Nothing to shrink; decided without the lock, as the periodic check asks every
            # hosted partition and most are followers or lead alone.
            return None
        with self._lock:
            r = self.registration
            if r is None or not self.is_leader or self.pending_isr is not None:
                return None
            if self.fenced is not None:
                return None
            now = now_ms()
            leader_end = self.log.log_end_offset
            lagging = {
                replica
                for replica in r.isr
                if replica != self.local_node_id
                and (state := self.followers.get(replica)) is not None
                and state.log_end_offset != leader_end
                and now - state.last_caught_up_time_ms > lag_time_max_ms
            }
            if not lagging:
                return None
            new_isr = tuple(x for x in r.isr if x not in lagging)
            self.pending_isr = new_isr
            return IsrProposal(
                self.topic, self.partition, r.leader_epoch, r.partition_epoch, new_isr
            )

    def proposal_failed(self) -> None:
        with self._lock:
            self.pending_isr = None

    def maybe_increment_high_watermark(self) -> bool:
        """Kafka's maybeIncrementLeaderHW; True when the high watermark moved."""
        with self._lock:
            r = self.registration
            if r is None or not self.is_leader or self.fenced is not None:
                return False
            effective_min_isr = min(self.log.config.min_insync_replicas, len(r.replicas))
            if len(r.isr) < effective_min_isr:
                return False
            low = self.log.log_end_offset
            for replica in self.maximal_isr:
                if replica == self.local_node_id:
                    continue
                state = self.followers.get(replica)
                if state is None or state.log_end_offset < 0:
                    return False  # an ISR member not heard from in this term: wait for it
                low = min(low, state.log_end_offset)
            return self.log.maybe_increment_high_watermark(low)

    def replica_log_end_offsets(self) -> dict[int, int]:
        """The leader's view of each replica's log end offset (-1: not heard from)."""
        with self._lock:
            out = {self.local_node_id: self.log.log_end_offset}
            for replica, state in self.followers.items():
                out[replica] = state.log_end_offset
            return out
