"""WriteTxnMarkers on the partition leader (Kafka's ReplicaManager.appendRecords with
origin COORDINATOR, for KafkaApis.handleWriteTxnMarkersRequest): for each marker and each
of its partitions, one COMMIT or ABORT control batch (records/control.py) appended through
the log's normal append, so it is replicated, indexed and copied by followers as any batch;
answered once every marker is below the high watermark (acks=all) or the timeout passes.

Per partition errors: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER (also a leader that
lost its term before the marker was replicated), INVALID_PRODUCER_EPOCH (an epoch older than
the producer's), NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT.
"""

from __future__ import annotations

import time

from seglog.errors import InvalidRequestError, SeglogError
from seglog.records.control import ControlMarker
from seglog.rpc.status import set_error
from seglog.v1 import storage_pb2

from .delayed_produce import AppendResult
from .replica_manager import ReplicaManager

DEFAULT_TIMEOUT_MS = 30_000
# A coordinator's request names a transaction's partitions; Kafka bounds nothing more than
# the request size. 100,000 markers x partitions keeps one request's work bounded.
MAX_MARKER_PARTITIONS = 100_000


def write_txn_markers(
    replicas: ReplicaManager, request: storage_pb2.WriteTxnMarkersRequest
) -> storage_pb2.WriteTxnMarkersResponse:
    total = sum(len(m.partitions) for m in request.markers)
    if total > MAX_MARKER_PARTITIONS:
        raise InvalidRequestError(
            f"WriteTxnMarkers names {total} partitions, over {MAX_MARKER_PARTITIONS}"
        )
    started = time.monotonic()
    timeout_ms = request.timeout_ms if request.timeout_ms > 0 else DEFAULT_TIMEOUT_MS
    appended: list[list[tuple[str, AppendResult]]] = []
    for marker in request.markers:
        control = ControlMarker(marker.committed, marker.coordinator_epoch)
        appended.append(
            [
                (ref.topic, _append(replicas, ref.topic, ref.partition, marker, control))
                for ref in marker.partitions
            ]
        )
    response = storage_pb2.WriteTxnMarkersResponse()
    for marker, results in zip(request.markers, appended, strict=True):
        answer = response.markers.add(producer_id=marker.producer_id)
        for topic, result in results:
            if result.info is not None:  # acks=all, within what is left of the timeout
                left_ms = max(int(timeout_ms - (time.monotonic() - started) * 1000), 0)
                result = replicas.wait_for_replication(topic, [result], left_ms)[0]
            item = answer.partitions.add(topic=topic, partition=result.partition)
            if result.error is not None:
                set_error(item, result.error)
    return response


def _append(
    replicas: ReplicaManager,
    topic: str,
    number: int,
    marker: storage_pb2.TxnMarker,
    control: ControlMarker,
) -> AppendResult:
    try:
        held = replicas.partition(topic, number)
        with held._lock:  # as a produce: never after this node stopped leading
            held.require_leader(-1)
            held.check_enough_replicas()
            epoch = held.leader_epoch
            info = held.log.append_marker(
                marker.producer_id, marker.producer_epoch, control, leader_epoch=epoch
            )
    except SeglogError as exc:
        return AppendResult(number, None, exc)
    moved = held.maybe_increment_high_watermark()
    replicas.waiters.wake((topic, number), watermark=moved)
    return AppendResult(number, info, leader_epoch=epoch)
