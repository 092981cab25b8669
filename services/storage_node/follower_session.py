"""The follower's side of a fetch session (Kafka's FetchSessionHandler; the leader's side and
the protocol are in fetch_sessions.py): what the leader's session holds for each partition,
so that each request names only what changed.

A request is full while there is no session (none opened yet, or the last round did not end
with a whole answer, or the leader answered a session error): it names every partition ready
to fetch. Otherwise it is incremental: of the partitions the caller reports as possibly
changed, it names those whose fetch state (offset, leader epoch, last fetched epoch, log
start) differs from what the session holds, and forgets those no longer fetched (removed, or
backing off after an error). `sent` is updated as the request is built; any failure drops
the session whole, so a lost answer never leaves the two sides disagreeing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from seglog.v1 import common_pb2

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class PartitionFetch:
    """One partition's fetch state as a request carries it."""

    fetch_offset: int
    leader_epoch: int
    last_fetched_epoch: int  # -1: none
    log_start_offset: int
    max_bytes: int = 0  # 0: the fetcher's replica.fetch.max.bytes (else a throttled share)


class FollowerSession:
    def __init__(self) -> None:
        self.session_id = 0
        self.next_epoch = 0  # 0: the next request is a full one opening a session
        self.sent: dict[TopicPartition, PartitionFetch] = {}

    @property
    def is_open(self) -> bool:
        return self.session_id != 0

    def reset(self) -> None:
        """Start over with a full request (the last round failed, or the session is gone)."""
        self.session_id = 0
        self.next_epoch = 0
        self.sent = {}

    def fill(
        self,
        request: common_pb2.FetchRequest,
        ready: Mapping[TopicPartition, PartitionFetch],
        changed: Iterable[TopicPartition],
        partition_max_bytes: int,
    ) -> bool:
        """Name in `request` what the session must learn: with a session open, those of
        `changed` whose state differs (`ready` holds the partitions fetchable now among
        them); without, every partition of `ready`. False when the request would ask about
        nothing at all (no session partitions and none to add)."""
        request.session_id = self.session_id
        request.session_epoch = self.next_epoch
        if not self.is_open:
            self.sent = {}
            changed = ready.keys()
        for tp in changed:
            wanted = ready.get(tp)
            if wanted is None:
                if self.sent.pop(tp, None) is not None:
                    request.forgotten_partitions.add(topic=tp[0], partition=tp[1])
                continue
            if self.sent.get(tp) == wanted:
                continue
            self.sent[tp] = wanted
            part = request.partitions.add(
                topic=tp[0],
                partition=tp[1],
                fetch_offset=wanted.fetch_offset,
                partition_max_bytes=wanted.max_bytes or partition_max_bytes,
                current_leader_epoch=wanted.leader_epoch,
                log_start_offset=wanted.log_start_offset,
            )
            if wanted.last_fetched_epoch >= 0:
                part.last_fetched_epoch = wanted.last_fetched_epoch
        return bool(self.sent) or bool(request.forgotten_partitions)

    def forget_sent(self, tp: TopicPartition) -> None:
        """The leader's answer for `tp` was not applied (it came for a registration this
        node has since replaced): the next request names `tp` again, so the leader answers it
        afresh. Its session answers an error or a diverging epoch once and remembers it;
        without this, a dropped one would never be answered again."""
        self.sent.pop(tp, None)

    def header(self, session_id: int, error: int) -> bool:
        """The answer's session header; False (and the session dropped) on a session error."""
        if error != common_pb2.FETCH_SESSION_NONE:
            self.reset()
            return False
        self.session_id = session_id
        return True

    def answered(self) -> None:
        """The whole answer arrived: the next request is the session's next epoch."""
        if self.is_open:
            self.next_epoch += 1
