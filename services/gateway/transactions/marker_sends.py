"""One round of a transaction's markers (markers.py schedules the rounds): the partitions
still without their marker grouped by leader, one `WriteTxnMarkers` call (storage.proto) per
leader with all its partitions, the calls to different leaders at once, and each partition's
outcome noted on the `MarkerRound`.

The calls are blocking stub calls, on reused threads for every leader but the first: a
`.future()` call made while the channel has no other call in flight starts grpc's channel
spin thread for it (a thread start per round, about a sixth of the gateway's CPU per
transaction at 100 records a transaction, and a millisecond or two of its latency under load).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

import grpc

from seglog.reused_threads import ReusedThreads
from seglog.v1 import common_pb2, storage_pb2

from ..cluster.registry import Registry
from ..node_connections import NodeConnections
from .log_formats import TopicPartition

MARKER_TIMEOUT_MS = 30_000  # Kafka's request.timeout.ms for its marker requests
_RPC_SLACK_S = 5.0
# Errors meaning "no marker needed" once the topic is gone (deleted while completing).
_GONE_ERRORS = (common_pb2.UNKNOWN_TOPIC_OR_PARTITION, common_pb2.INVALID_PRODUCER_EPOCH)

_CALLS = ReusedThreads("txn-marker-calls")


@dataclass(frozen=True)
class Completion:
    """A transaction logged in its Prepare state, whose markers are due."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool
    coordinator_epoch: int
    partitions: frozenset[TopicPartition]
    groups: frozenset[str] = frozenset()


@dataclass
class MarkerRound:
    """What is left of one completion's markers, and why the last round left it."""

    completion: Completion
    remaining: set[TopicPartition]
    last_errors: dict[TopicPartition, str] = field(default_factory=dict)


def marker_request(
    completion: Completion, partitions: list[TopicPartition]
) -> storage_pb2.WriteTxnMarkersRequest:
    request = storage_pb2.WriteTxnMarkersRequest(timeout_ms=MARKER_TIMEOUT_MS)
    request.markers.add(
        producer_id=completion.producer_id,
        producer_epoch=completion.producer_epoch,
        committed=completion.committed,
        coordinator_epoch=completion.coordinator_epoch,
        partitions=[storage_pb2.HostedPartitionRef(topic=t, partition=p) for t, p in partitions],
    )
    return request


def send_round(registry: Registry, connections: NodeConnections, state: MarkerRound) -> int:
    """Send the remaining markers once; returns the calls made. A partition without a live
    leader now keeps its marker for the next round; a deleted topic's needs none."""
    by_leader: dict[tuple[int, str], list[TopicPartition]] = {}
    for topic, partition in sorted(state.remaining):
        if topic not in registry.topics:
            state.remaining.discard((topic, partition))
            continue
        try:
            route = registry.route(topic, partition)
        except Exception as exc:  # no leader now: the next round
            state.last_errors[(topic, partition)] = str(exc)
            continue
        if not route.live or route.address is None:
            state.last_errors[(topic, partition)] = f"node {route.leader} is not live"
            continue
        by_leader.setdefault((route.leader, route.address), []).append((topic, partition))
    calls: list[tuple[list[TopicPartition], Callable[[], storage_pb2.WriteTxnMarkersResponse]]]
    calls = []
    for (node, address), partitions in by_leader.items():
        stub = connections.get(node, address).stub
        request = marker_request(state.completion, partitions)
        calls.append((partitions, _call(stub, request)))
    started: list[tuple[list[TopicPartition], Future[storage_pb2.WriteTxnMarkersResponse]]] = [
        (partitions, _CALLS.submit(call)) for partitions, call in calls[1:]
    ]
    if calls:
        partitions, call = calls[0]
        _note(registry, state, partitions, _outcome(call))
    for partitions, future in started:
        _note(registry, state, partitions, _outcome(future.result))
    return len(calls)


def _call(
    stub: object, request: storage_pb2.WriteTxnMarkersRequest
) -> Callable[[], storage_pb2.WriteTxnMarkersResponse]:
    timeout_s = MARKER_TIMEOUT_MS / 1000 + _RPC_SLACK_S
    return lambda: stub.WriteTxnMarkers(request, timeout=timeout_s)  # type: ignore[attr-defined]


def _outcome(
    call: Callable[[], storage_pb2.WriteTxnMarkersResponse],
) -> storage_pb2.WriteTxnMarkersResponse | str:
    """The call's answer, or why it failed (a node down, not serving the RPC yet)."""
    try:
        return call()
    except grpc.RpcError as exc:
        return f"{exc.code().name}: {exc.details()}"


def _note(
    registry: Registry,
    state: MarkerRound,
    partitions: list[TopicPartition],
    outcome: storage_pb2.WriteTxnMarkersResponse | str,
) -> None:
    if isinstance(outcome, str):
        state.last_errors.update({tp: outcome for tp in partitions})
        return
    for result in outcome.markers[0].partitions if outcome.markers else []:
        tp = (result.topic, result.partition)
        if result.error == common_pb2.NONE or (
            result.error in _GONE_ERRORS and result.topic not in registry.topics
        ):
            state.remaining.discard(tp)
            state.last_errors.pop(tp, None)
        else:
            state.last_errors[tp] = (
                f"{common_pb2.ErrorCode.Name(result.error)}: {result.error_message}"
            )
