"""Reassignment plans, as kafka-reassign-partitions writes and reads them:

    {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [2, 3, 4]}]}

and the plans seglog proposes: `generate` (topics spread over a node list), `decommission`
(every replica off one node, onto the least loaded others) and `balance` (replicas, then
preferred leaders, per node to within one of each other). A plan maps each partition to its
target replicas, the first the preferred leader. Pure functions: the CLI reads the cluster,
asks for a plan and executes it.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence

from ..errors import InvalidReplicaAssignmentError
from .structs import TopicPartition

PLAN_VERSION = 1
Plan = dict[TopicPartition, list[int]]


def parse_plan(text: str) -> Plan:
    """A plan file, checked whole: its shape, each replica list non-empty and without a
    repeated node, no partition twice. (Nodes and partitions that do not exist are the
    gateway's to refuse, also before anything changes.)"""
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise InvalidReplicaAssignmentError(f"the plan is not JSON: {exc}") from None
    if not isinstance(document, dict) or document.get("version") != PLAN_VERSION:
        raise InvalidReplicaAssignmentError(f'a plan is {{"version": {PLAN_VERSION}, ...}}')
    entries = document.get("partitions")
    if not isinstance(entries, list) or not entries:
        raise InvalidReplicaAssignmentError('the plan has no "partitions"')
    plan: Plan = {}
    for entry in entries:
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("topic"), str)
            and type(entry.get("partition")) is int
            and isinstance(entry.get("replicas"), list)
            and all(type(r) is int for r in entry["replicas"])
        ):
            raise InvalidReplicaAssignmentError(
                f"plan entry {entry!r}: expected topic, partition and a list of node ids"
            )
        tp = TopicPartition(entry["topic"], entry["partition"])
        name = f"{tp.topic}-{tp.partition}"
        replicas = list(entry["replicas"])
        if tp in plan:
            raise InvalidReplicaAssignmentError(f"{name} appears twice in the plan")
        if not replicas:
            raise InvalidReplicaAssignmentError(f"{name}: the replica list is empty")
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(f"{name}: replicas {replicas} repeat a node")
        plan[tp] = replicas
    return plan


def plan_json(plan: Mapping[TopicPartition, Sequence[int]]) -> str:
    partitions = [
        {"topic": tp.topic, "partition": tp.partition, "replicas": list(replicas)}
        for tp, replicas in sorted(plan.items())
    ]
    return json.dumps({"version": PLAN_VERSION, "partitions": partitions})


def parse_topics_to_move(text: str) -> list[str]:
    """kafka-reassign-partitions' --topics-to-move-json-file:
    {"version": 1, "topics": [{"topic": "t"}]}."""
    try:
        document = json.loads(text)
        topics = [entry["topic"] for entry in document["topics"]]
    except (ValueError, KeyError, TypeError):
        raise InvalidReplicaAssignmentError(
            'topics to move: {"version": 1, "topics": [{"topic": "name"}]}'
        ) from None
    if not topics or not all(isinstance(t, str) for t in topics):
        raise InvalidReplicaAssignmentError("topics to move: no topic named")
    return topics


def _counts(
    current: Mapping[TopicPartition, Sequence[int]], nodes: Iterable[int]
) -> dict[int, int]:
    counts = {n: 0 for n in nodes}
    for replicas in current.values():
        for r in replicas:
            if r in counts:
                counts[r] += 1
    return counts


def generate(current: Mapping[TopicPartition, Sequence[int]], nodes: Sequence[int]) -> Plan:
    """The given partitions spread over `nodes`, each keeping its replication factor: every
    replica on the node holding fewest (ties: a node that already holds it, so less moves),
    the preferred leader the one of them preferred fewest times."""
    if not nodes or len(set(nodes)) != len(nodes):
        raise InvalidReplicaAssignmentError(f"node list {list(nodes)}: empty or repeated")
    held = {n: 0 for n in nodes}
    preferred = {n: 0 for n in nodes}
    plan: Plan = {}
    for tp, replicas in sorted(current.items()):
        if len(replicas) > len(nodes):
            raise InvalidReplicaAssignmentError(
                f"{tp.topic}-{tp.partition} has {len(replicas)} replicas, more than the "
                f"{len(nodes)} nodes {list(nodes)}"
            )
        chosen = sorted(nodes, key=lambda n: (held[n], n not in replicas, n))[: len(replicas)]
        leader = min(chosen, key=lambda n: (preferred[n], n not in replicas[:1], n))
        target = [leader, *(n for n in chosen if n != leader)]
        for n in target:
            held[n] += 1
        preferred[leader] += 1
        plan[tp] = target
    return plan


def decommission(
    current: Mapping[TopicPartition, Sequence[int]], node: int, nodes: Sequence[int]
) -> Plan:
    """Every partition with a replica on `node` gets, in that replica's place, the other node
    of `nodes` holding fewest replicas that does not hold this partition."""
    others = [n for n in nodes if n != node]
    held = _counts(current, others)
    plan: Plan = {}
    for tp, replicas in sorted(current.items()):
        if node not in replicas:
            continue
        free = [n for n in others if n not in replicas]
        if not free:
            raise InvalidReplicaAssignmentError(
                f"{tp.topic}-{tp.partition} has {len(replicas)} replicas: no node of "
                f"{others} is free to take node {node}'s"
            )
        substitute = min(free, key=lambda n: (held[n], n))
        held[substitute] += 1
        plan[tp] = [substitute if r == node else r for r in replicas]
    return plan


def balance(
    current: Mapping[TopicPartition, Sequence[int]],
    nodes: Sequence[int],
    max_moves: int = 0,
    movable: Collection[TopicPartition] | None = None,
) -> Plan:
    """Replicas per node to within one of each other (each move takes a replica from the
    most loaded node to the least loaded one not holding the partition; at most `max_moves`
    replica moves, 0: no bound), then preferred leaders (first replicas) to within one by
    reordering replicas, which moves no data. Only the partitions that change are in it, and
    only partitions of `movable` (None: all) change; the others still count in the load."""
    assigned = {tp: list(replicas) for tp, replicas in current.items()}
    changeable = sorted(assigned if movable is None else set(movable) & set(assigned))
    held = _counts(assigned, nodes)
    moves = 0
    while not max_moves or moves < max_moves:
        most = max(held, key=lambda n: (held[n], -n))
        least = min(held, key=lambda n: (held[n], n))
        if held[most] - held[least] <= 1:
            break
        candidates = (tp for tp in changeable if most in assigned[tp])
        tp = next((tp for tp in candidates if least not in assigned[tp]), None)
        if tp is None:
            break
        assigned[tp] = [least if r == most else r for r in assigned[tp]]
        held[most] -= 1
        held[least] += 1
        moves += 1
    _balance_preferred(assigned, nodes, changeable)
    return {tp: replicas for tp, replicas in assigned.items() if replicas != list(current[tp])}


def _balance_preferred(
    assigned: dict[TopicPartition, list[int]],
    nodes: Sequence[int],
    changeable: Sequence[TopicPartition],
) -> None:
    preferred = {n: 0 for n in nodes}
    for replicas in assigned.values():
        if replicas and replicas[0] in preferred:
            preferred[replicas[0]] += 1
    for _ in range(len(assigned) * max(len(nodes), 1)):
        most = max(preferred, key=lambda n: (preferred[n], -n))
        least = min(preferred, key=lambda n: (preferred[n], n))
        if preferred[most] - preferred[least] <= 1:
            return
        tp = next(
            (tp for tp in changeable if assigned[tp][0] == most and least in assigned[tp]),
            None,
        )
        if tp is None:
            return
        replicas = assigned[tp]
        i = replicas.index(least)
        replicas[0], replicas[i] = replicas[i], replicas[0]
        preferred[most] -= 1
        preferred[least] += 1
