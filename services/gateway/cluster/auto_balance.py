"""Automatic balancing (`auto.balance.enable`, off by default): when the set of eligible
nodes changes (a node joins, or one is decommissioned or leaves: a decommissioned node is
never a target, reassignments.py's `placement`), the controller spreads
replicas, then preferred leaders, over the eligible nodes to within one of each other, with
the reassignment machinery (reassignments.py: a new replica catches up, throttled, before
an old one is dropped) and the plan `seglog nodes balance` runs (reassignment_plans.py).

Bounds, so a join never turns into a storm:
- at most `auto.balance.max.moves` replicas are being added at once, counted over every
  reassignment under way (an operator's too); the next round tops it up;
- each catch-up is held to `auto.balance.throttle.bytes.per.s`;
- only a partition at rest with its whole ISR on eligible nodes is ever moved, and nothing
  moves at all while a node that is not eligible still holds replicas (a node restarting,
  or down: the counts would be wrong, and its partitions are under-replicated anyway).

Why only on a change of the node set, not continuously: `seglog nodes decommission` empties a
node that stays up until it is stopped; a continuous balancer would fill it again. An
operator's reassignment (one this balancer did not start, such as a decommission's) takes
precedence: seeing one, the balancer drops what it had pending, so the node being emptied
stays empty; once it is stopped the set shrinks and the rest is balanced. The balancer goes
idle again when a round finds nothing to move. (What it started is remembered by this
controller only: a newly elected one treats moves under way as an operator's and waits.)
"""

from __future__ import annotations

import logging

from seglog.client.reassignment_plans import balance
from seglog.client.structs import TopicPartition

from ..coordination.election import Fence
from .reassignments import Placement
from .registry import Registry

logger = logging.getLogger(__name__)

DEFAULT_AUTO_BALANCE_MAX_MOVES = 4
DEFAULT_AUTO_BALANCE_THROTTLE_BYTES_PER_S = 10 * 1024 * 1024
DEFAULT_AUTO_BALANCE_INTERVAL_MS = 10_000


class AutoBalancer:
    def __init__(
        self,
        registry: Registry,
        *,
        max_moves: int = DEFAULT_AUTO_BALANCE_MAX_MOVES,
        throttle_bytes_per_s: int = DEFAULT_AUTO_BALANCE_THROTTLE_BYTES_PER_S,
    ) -> None:
        if max_moves < 1:
            raise ValueError(f"auto.balance.max.moves must be at least 1, not {max_moves}")
        if throttle_bytes_per_s < 0:
            raise ValueError(f"auto.balance.throttle.bytes.per.s {throttle_bytes_per_s} < 0")
        self.registry = registry
        self.max_moves = max_moves
        self.throttle_bytes_per_s = throttle_bytes_per_s
        self._nodes_seen: list[int] | None = None  # None: not looked yet (a new controller)
        self.pending = False  # a change of the node set not yet balanced
        self.rounds = 0  # rounds that started moves (for tests and logs)
        self._started: dict[tuple[str, int], list[int]] = {}  # what it moves, and where to

    def tick(self, controller: Fence | None = None) -> None:
        """One round: note a change of the node set, then, while one is pending, start
        the moves the bound allows; idle once nothing is left to move."""
        placement = self.registry.placement()
        nodes = placement.eligible_nodes
        if self._nodes_seen is None:
            # A new controller looks once: a node that joined before its first round (a
            # StatefulSet scaled right after a start) is otherwise never seen joining.
            self.pending = True
        elif nodes != self._nodes_seen:
            logger.info("auto balance: eligible nodes %s -> %s", self._nodes_seen, nodes)
            self.pending = True
        self._nodes_seen = nodes
        moving = placement.reassigning
        self._started = {tp: t for tp, t in self._started.items() if moving.get(tp) == t}
        if any(self._started.get(tp) != target for tp, target in moving.items()):
            if self.pending:
                logger.info("auto balance: an operator's reassignment under way; standing by")
            self.pending = False
            return
        if not self.pending or placement.absent_holders or len(nodes) < 2:
            return
        budget = self.max_moves - placement.moves_in_flight
        if budget <= 0:
            return  # moves under way: top up once some finish
        plan = balance(
            {TopicPartition(*tp): r for tp, r in placement.replicas.items()},
            nodes,
            budget,
            movable={TopicPartition(*tp) for tp in placement.movable},
        )
        if plan:
            self._start(plan, placement)
            return
        if placement.moves_in_flight:
            return
        if placement.misled:  # the moves left leaders off their preferred replicas
            self.registry.rebalance_leaders(controller)
            if self.registry.placement().misled:
                return  # a preferred replica not yet in sync: next round
        logger.info("auto balance: nodes %s balanced", nodes)
        self.pending = False

    def _start(self, plan: dict[TopicPartition, list[int]], placement: Placement) -> None:
        moves = sum(
            len(set(target) - set(placement.replicas[(tp.topic, tp.partition)]))
            for tp, target in plan.items()
        )
        logger.info(
            "auto balance: %d partition(s), %d replica move(s) (%d in flight): %s",
            len(plan),
            moves,
            placement.moves_in_flight,
            {f"{tp.topic}-{tp.partition}": target for tp, target in sorted(plan.items())},
        )
        targets = {(tp.topic, tp.partition): target for tp, target in plan.items()}
        self._started.update(targets)  # before: one may complete before the call returns
        self.registry.alter_reassignments(targets, self.throttle_bytes_per_s)
        self.rounds += 1
