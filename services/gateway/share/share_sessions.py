"""Share sessions (KIP-932's, like KIP-227's fetch sessions): per (group, member), the
partitions its ShareFetches read and the epoch the next request must carry.

    epoch 0   opens a session (replacing the member's old one) with the request's partitions;
              it may carry no acknowledgements (nothing is acquired yet in it)
    epoch n   the session's next epoch: adds the request's partitions, drops its forgotten
              ones; the session then expects n + 1 (2^31 - 1 wraps to 1)
    epoch -1  acknowledges and closes the session (the member's acquired records released)

SHARE_SESSION_NOT_FOUND for n without a session, INVALID_SHARE_SESSION_EPOCH for a wrong n.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from seglog.coordinator_errors import (
    InvalidShareSessionEpochError,
    ShareSessionLimitReachedError,
    ShareSessionNotFoundError,
)

INITIAL_EPOCH, FINAL_EPOCH = 0, -1
MAX_EPOCH = 2**31 - 1
# group.share.max.share.sessions is Kafka's bound over the broker (2000 by default).
DEFAULT_MAX_SESSIONS = 2000
MAX_SESSION_PARTITIONS = 10_000

PartitionKey = tuple[str, int]  # (topic name, partition)


@dataclass
class ShareSession:
    group_id: str
    member_id: str
    epoch: int = 1
    partitions: dict[PartitionKey, None] = field(default_factory=dict)  # ordered set


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= MAX_EPOCH else epoch + 1


class ShareSessions:
    def __init__(self, max_sessions: int = DEFAULT_MAX_SESSIONS) -> None:
        self.max_sessions = max_sessions
        self._lock = threading.Lock()
        self._sessions: dict[tuple[str, str], ShareSession] = {}

    def use(
        self,
        group_id: str,
        member_id: str,
        epoch: int,
        added: Iterable[PartitionKey],
        forgotten: Iterable[PartitionKey],
    ) -> ShareSession | None:
        """The session this request reads (None for a final request: it is closed)."""
        key = (group_id, member_id)
        with self._lock:
            if epoch == INITIAL_EPOCH:
                if key not in self._sessions and len(self._sessions) >= self.max_sessions:
                    raise ShareSessionLimitReachedError(
                        f"this gateway holds {self.max_sessions} share sessions already"
                    )
                session = ShareSession(group_id, member_id)
                self._sessions[key] = session
            else:
                found = self._sessions.get(key)
                if found is None:
                    raise ShareSessionNotFoundError(
                        f"member {member_id!r} of {group_id!r} has no share session"
                    )
                if epoch == FINAL_EPOCH:
                    del self._sessions[key]
                    return None
                if epoch != found.epoch:
                    raise InvalidShareSessionEpochError(
                        f"share session epoch {epoch}, expected {found.epoch}"
                    )
                found.epoch = next_epoch(epoch)
                session = found
            for partition in forgotten:
                session.partitions.pop(partition, None)
            for partition in added:
                if len(session.partitions) >= MAX_SESSION_PARTITIONS:
                    break
                session.partitions[partition] = None
            return session

    def check(self, group_id: str, member_id: str, epoch: int) -> None:
        """ShareAcknowledge's check: the session exists and `epoch` is its next (or final)."""
        with self._lock:
            session = self._sessions.get((group_id, member_id))
            if session is None:
                raise ShareSessionNotFoundError(
                    f"member {member_id!r} of {group_id!r} has no share session"
                )
            if epoch == FINAL_EPOCH:
                del self._sessions[(group_id, member_id)]
                return
            if epoch != session.epoch:
                raise InvalidShareSessionEpochError(
                    f"share session epoch {epoch}, expected {session.epoch}"
                )
            session.epoch = next_epoch(epoch)

    def drop_member(self, group_id: str, member_id: str) -> None:
        with self._lock:
            self._sessions.pop((group_id, member_id), None)

    def count(self) -> int:
        with self._lock:
            return len(self._sessions)
