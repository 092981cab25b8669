"""The leader's side of fetches (Kafka's ReplicaManager.fetchMessages and DelayedFetch): what
consumers and followers ask of the partitions this node hosts. The replica manager hosts the
partitions and appends to them; this module only reads their state and wakes their waiters.

Fetch: a long poll. `wait_for_fetch` returns as soon as `min_bytes` are available across the
requested partitions (counted from file positions, never by reading) or `max_wait_ms` passes;
an append or a high-watermark move on a partition wakes only the fetches and acks=all appends
waiting on that partition (fetch_waits.py; no polling). Consumers read below the high
watermark; a follower (`replica_id` >= 0) reads to the log end, and its fetch offset tells the
leader how far it has copied (which may move the high watermark or propose an ISR expansion).
Followers fetch through sessions (fetch_sessions.py: an idle round costs O(1)), so before an
append moves a log end, `note_idle_followers` records the followers a session holds there as
caught up. The answer's chunks are cut by fetch_reads.py (`ReplicaManager.read_chunks`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from seglog.errors import InvalidRequestError, OffsetOutOfRangeError, SeglogError
from seglog.v1 import common_pb2

from .fetch_reads import CONSUMER, FetchState, available_bytes
from .fetch_sessions import FetchSessionCache, SessionRound, session_round
from .fetch_waits import PartitionWaiters, Waiter
from .isr_updates import IsrUpdates
from .partition import Partition


class LeaderFetches:
    def __init__(
        self,
        partition: Callable[[str, int], Partition],
        waiters: PartitionWaiters,
        isr_updates: IsrUpdates,
        is_stopping: Callable[[], bool],
    ) -> None:
        """`partition` finds a hosted partition or raises its precise error; `waiters` are
        shared with acks=all appends; `is_stopping` tells when the node stops."""
        self._partition = partition
        self._waiters = waiters
        self._isr_updates = isr_updates
        self._is_stopping = is_stopping
        self.sessions = FetchSessionCache(waiters)

    def fetch_states(
        self,
        wanted: Sequence[tuple[str, int, int, int, int, int]],
        replica_id: int = CONSUMER,
    ) -> list[FetchState]:
        """(topic, partition, fetch offset, partition max bytes, client leader epoch, last
        fetched epoch) each. A follower's fetch is checked against the leader's epochs
        (Kafka's FENCED/UNKNOWN_LEADER_EPOCH, diverging epoch) and records how far it has
        copied."""
        states = []
        for topic, number, offset, max_bytes, client_epoch, last_fetched_epoch in wanted:
            state = FetchState(topic, number, offset, max_bytes, None, replica_id=replica_id)
            try:
                held = self._partition(topic, number)
                state.log = held.log
                if max_bytes <= 0:
                    raise InvalidRequestError(f"{topic}-{number}: partition_max_bytes must be > 0")
                if replica_id >= 0:
                    self._follower_fetch(held, state, client_epoch, last_fetched_epoch)
                else:
                    held.require_leader(client_epoch)
            except SeglogError as exc:
                state.error = exc
            states.append(state)
        return states

    def _follower_fetch(
        self, held: Partition, state: FetchState, client_epoch: int, last_fetched_epoch: int
    ) -> None:
        held.require_leader(-1)
        held.check_leader_epoch(client_epoch)
        if state.replica_id not in (held.registration.replicas if held.registration else ()):
            raise InvalidRequestError(
                f"{held.topic}-{held.partition}: node {state.replica_id} is not a replica"
            )
        log = held.log
        if last_fetched_epoch >= 0:
            epoch, end = log.end_offset_for_epoch(last_fetched_epoch)
            if epoch < last_fetched_epoch or end < state.offset:
                state.diverging = (epoch, end)
                return
        if not log.log_start_offset <= state.offset <= log.log_end_offset:
            raise OffsetOutOfRangeError(
                f"{held.topic}-{held.partition}: follower fetch offset {state.offset} is outside "
                f"[{log.log_start_offset}, {log.log_end_offset}]"
            )
        high_watermark = log.high_watermark
        proposal = held.record_follower_fetch(state.replica_id, state.offset, log.log_start_offset)
        if proposal is not None:
            self._isr_updates.propose(proposal)
        if log.high_watermark != high_watermark:  # acks=all and consumers wait on it
            self._waiters.wake((held.topic, held.partition), records=False)

    def wait_for_fetch(
        self,
        states: list[FetchState],
        min_bytes: int,
        max_wait_ms: int,
        is_active: Callable[[], bool],
        waiter: Waiter | None = None,
    ) -> None:
        """Kafka's delayed fetch: return once `min_bytes` are available, the wait is over,
        the caller went away (its `waiter` notified), or the node is stopping. Only the
        fetch's own partitions wake it."""
        deadline = time.monotonic() + max_wait_ms / 1000
        waiter = waiter or Waiter(wakes_on_records=_replica_fetch(states))
        watched = [(s.topic, s.partition) for s in states if s.log is not None]
        self._waiters.register(waiter, watched)
        try:
            while is_active() and not self._is_stopping():
                waiter.event.clear()
                if available_bytes(states, min_bytes) >= min_bytes:
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                waiter.event.wait(remaining)
        finally:
            self._waiters.unregister(waiter, watched)

    def session_fetch(
        self,
        request: common_pb2.FetchRequest,
        client_epoch: Callable[[common_pb2.FetchPartition], int],
        is_active: Callable[[], bool],
    ) -> SessionRound:
        """A follower's fetch-session request (fetch_sessions.py): the session header and
        the states with news, after waiting for some up to `max_wait_ms`."""
        if not request.HasField("replica_id") or request.replica_id < 0:
            raise InvalidRequestError("fetch sessions are for replica fetches only")
        return session_round(
            self.sessions,
            request,
            request.replica_id,
            self.fetch_states,
            client_epoch,
            lambda: is_active() and not self._is_stopping(),
        )

    def note_idle_followers(self, held: Partition) -> None:
        """Before the log end moves: followers whose fetch session holds the partition at
        the log end were caught up as of their last request (fetch_sessions.py), as a
        Kafka follower fetching every partition every round would have been recorded."""
        end = held.log.log_end_offset
        with held._lock:
            for replica, state in held.followers.items():
                if state.log_end_offset != end:
                    continue
                seen = self.sessions.caught_up_ms(replica, (held.topic, held.partition), end)
                if seen is not None and seen > state.last_caught_up_time_ms:
                    state.last_caught_up_time_ms = seen


def _replica_fetch(states: list[FetchState]) -> bool:
    """A follower's fetch waits for records; a consumer's for the high watermark."""
    return any(state.replica_id >= 0 for state in states)
