"""A ProduceRequest's wire bytes to its ProduceResponse: what the node does for one, however
it came (the gRPC Append, or the bulk listener, bulk_produce.py: the gateway's relay or a
producer under its produce grant).
The records stay views of the received bytes from here to the file, with no protobuf message
parsed around them; the layout is the one `seglog.rpc.wire` documents and scans. What is not
well-formed fails the whole request before anything is written."""

from __future__ import annotations

import time

from seglog.errors import InvalidRequestError, SeglogError
from seglog.metrics import error_reason
from seglog.rpc import check_produce_request, client_leader_epoch, wire
from seglog.rpc.status import set_error
from seglog.v1 import common_pb2

from .node_metrics import NodeMetrics
from .replica_manager import ACKS_ALL, ReplicaManager

DEFAULT_PRODUCE_TIMEOUT_MS = 30_000


def answer_produce(
    replicas: ReplicaManager,
    metrics: NodeMetrics,
    raw: bytes | memoryview,
    *,
    open_transactions_only: bool = False,
) -> common_pb2.ProduceResponse:
    """Append the request's batches (and, for acks=all, wait for the in-sync replicas);
    the per-partition outcomes. SeglogError when the request is refused as a whole.
    `open_transactions_only`: a producer's own request, whose transactional batches no
    coordinator verified (storage/txn_verification.py)."""
    started = time.perf_counter()
    try:
        request = _scan_produce(raw)
        check_produce_request(request)
        results = replicas.append(
            request.topic,
            [(p.partition, p.records, client_leader_epoch(p)) for p in request.partitions],
            request.acks,
            open_transactions_only=open_transactions_only,
        )
    except SeglogError as exc:
        metrics.request("Append", started, {error_reason(exc): 1})
        raise
    if request.acks == ACKS_ALL:
        results = replicas.wait_for_replication(
            request.topic, results, request.timeout_ms or DEFAULT_PRODUCE_TIMEOUT_MS
        )
    response = common_pb2.ProduceResponse(topic=request.topic)
    for appended in results:
        result = response.partitions.add(partition=appended.partition)
        if appended.info is None:
            assert appended.error is not None
            set_error(result, appended.error)
            result.base_offset = result.last_offset = -1
            continue
        info = appended.info
        result.base_offset = info.first_offset
        result.last_offset = info.last_offset
        result.log_append_time_ms = info.log_append_time_ms
        result.log_start_offset = info.log_start_offset
    metrics.appended(request.topic, results, started)
    return response


def _scan_produce(raw: bytes | memoryview) -> wire.ScannedProduce:
    try:
        return wire.scan_produce_request(raw)
    except ValueError as exc:  # a UnicodeDecodeError (the topic) included
        raise InvalidRequestError(f"malformed ProduceRequest: {exc}") from None
