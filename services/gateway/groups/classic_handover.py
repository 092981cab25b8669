"""The classic coordinator's side of an online migration (group_migration.py): handing a
classic group over to the KIP-848 groups, and taking a downgraded one back.

`ClassicHandover` is what ConsumerGroups holds of the classic coordinator (composition: it
sees no more of it). Lock order: a consumer group's own lock, then the coordinator's; the
coordinator never calls into the consumer groups while holding its lock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import Any

from seglog.errors import RebalanceInProgressError

from .classic_waits import settling
from .group_state import CoordinatorParts, Group


class ClassicHandover:
    def __init__(self, coordinator: CoordinatorParts) -> None:
        self._coordinator = coordinator

    def members(self, group_id: str) -> int:
        with self._coordinator._lock:
            group = self._coordinator._groups.get(group_id)
            return len(group.members) if group is not None else 0

    def take(self, group_id: str, accept: Callable[[Group], bool]) -> Group | None:
        """The classic group, removed from the coordinator if `accept(group)` (None, and
        nothing changed, otherwise). Its waiting JoinGroups and SyncGroups are answered
        REBALANCE_IN_PROGRESS (Kafka's completeAllJoinFutures/SyncFutures), so their members
        join the group in its new form."""
        coordinator = self._coordinator
        waiting: list[Future[Any]] = []
        with coordinator._lock:
            group = coordinator._groups.get(group_id)
            if group is None or not accept(group):
                return None
            del coordinator._groups[group_id]
            waiting = [w.future for w in group.waiters]
            group.waiters = []
            for member in group.members.values():
                member.joining = member.awaiting_sync = False
            writer = getattr(coordinator, "_writer", None)
            if writer is not None:
                writer.discard(group_id)
            coordinator._changed.notify_all()
        problem = RebalanceInProgressError(f"group {group_id} moved to the consumer protocol")
        for future in waiting:
            try:
                future.set_exception(problem)
            except InvalidStateError:
                pass  # its client went away meanwhile
        return group

    def adopt(self, group: Group) -> None:
        """A downgraded group taken in: its record written and a rebalance begun at once, so
        its classic members join and their leader assigns (Kafka's prepareRebalance)."""
        coordinator = self._coordinator
        now = time.monotonic()
        with settling(coordinator) as touched:
            coordinator._groups[group.group_id] = group
            touched.append(group)
            coordinator._state_changed(group)
            coordinator._begin_rebalance(group, now)
