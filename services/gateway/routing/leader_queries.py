"""The gateway's per-partition requests for leaders: ListOffsets, SplitPoints and
DeleteRecords (for the core: data_plane.py, record_deletion.py), each request split by the
leader of each partition, one call per node, all in flight together, the answers put back in
the request's order (a partition that cannot be routed, or whose node fails, answers its
error in its place)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import grpc

from seglog.errors import SeglogError
from seglog.rpc.status import error_code_for
from seglog.v1 import common_pb2

DEFAULT_TIMEOUT_MS = 30_000


class LeaderQueries:
    def __init__(
        self,
        target_of: Callable[[Any], Any],
        node_failure: Callable[[Any, grpc.RpcError], SeglogError],
    ) -> None:
        """`target_of(part)`: the routed node (`node_id`, `connection`) for a request part,
        or SeglogError; `node_failure(target, rpc_error)`: the error its partitions get."""
        self.target_of = target_of
        self.node_failure = node_failure

    def per_leader_list_offsets(
        self, parts: Sequence[common_pb2.ListOffsetsPartition]
    ) -> list[common_pb2.ListOffsetsResult]:
        return self._per_leader(
            parts, common_pb2.ListOffsetsRequest, lambda stub: stub.ListOffsets, _list_offsets_error
        )

    def split_points(
        self, parts: Sequence[common_pb2.SplitPointsPartition]
    ) -> list[common_pb2.SplitPointsResult]:
        return self._per_leader(
            parts, common_pb2.SplitPointsRequest, lambda stub: stub.SplitPoints, _split_points_error
        )

    def delete_records(
        self, partitions: Sequence[common_pb2.DeleteRecordsPartition]
    ) -> list[common_pb2.DeleteRecordsResult]:
        """Each partition's records below its offset deleted by its leader, in order (for the
        core's RecordDeletion)."""
        return self._per_leader(
            partitions,
            common_pb2.DeleteRecordsRequest,
            lambda stub: stub.DeleteRecords,
            _delete_records_error,
        )

    def _per_leader(
        self,
        parts: Sequence[Any],
        request_type: type[Any],
        method: Callable[[Any], Any],
        error_result: Callable[[Any, SeglogError], Any],
    ) -> list[Any]:
        """A per-partition request answered by each partition's leader: one call per node,
        all in flight together, the answers put back in the request's order."""
        results: dict[int, Any] = {}
        by_node: dict[int, tuple[Any, list[int]]] = {}
        for i, p in enumerate(parts):
            try:
                target = self.target_of(p)
            except SeglogError as exc:
                results[i] = error_result(p, exc)
                continue
            by_node.setdefault(target.node_id, (target, []))[1].append(i)
        calls = {}
        for node_id, (target, indexes) in by_node.items():
            sub = request_type()
            sub.partitions.extend(parts[i] for i in indexes)
            calls[node_id] = method(target.connection.stub).future(
                sub, timeout=DEFAULT_TIMEOUT_MS / 1000
            )
        for node_id, (target, indexes) in by_node.items():
            try:
                answered = calls[node_id].result().partitions
                for i, result in zip(indexes, answered, strict=True):
                    results[i] = result
            except grpc.RpcError as exc:
                error = self.node_failure(target, exc)
                for i in indexes:
                    results[i] = error_result(parts[i], error)
        return [results[i] for i in range(len(parts))]


def _list_offsets_error(
    p: common_pb2.ListOffsetsPartition, error: SeglogError
) -> common_pb2.ListOffsetsResult:
    return common_pb2.ListOffsetsResult(
        topic=p.topic,
        partition=p.partition,
        error=error_code_for(error),
        error_message=str(error),
        offset=-1,
        timestamp=-1,
    )


def _split_points_error(
    p: common_pb2.SplitPointsPartition, error: SeglogError
) -> common_pb2.SplitPointsResult:
    return common_pb2.SplitPointsResult(
        topic=p.topic,
        partition=p.partition,
        error=error_code_for(error),
        error_message=str(error),
    )


def _delete_records_error(
    p: common_pb2.DeleteRecordsPartition, error: SeglogError
) -> common_pb2.DeleteRecordsResult:
    return common_pb2.DeleteRecordsResult(
        topic=p.topic,
        partition=p.partition,
        error=error_code_for(error),
        error_message=str(error),
        low_watermark=-1,
    )
