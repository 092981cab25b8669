"""The share state topic's leaders reached through the data plane's routing (the same produce
and fetch the data path uses, its start offsets from the leaders' ListOffsets), never through
a node's gRPC stub directly: internal_topics.py's PartitionAccess for the share store."""

from __future__ import annotations

from collections.abc import Iterator

from seglog.errors import CoordinatorNotAvailableError, SeglogError
from seglog.rpc import wire
from seglog.v1 import common_pb2

from ..internal_topics import READ_FETCH_BYTES, Appended, FetchedPiece
from ..routing.call_scope import CallEnd
from ..routing.data_plane import NO_LEADER_EPOCH, error_of
from ..routing.fetch_answers import piece_of
from ..routing.fetch_routing import FetchRouting
from ..routing.leader_queries import LeaderQueries
from ..routing.produce_routing import ProduceRouting


class RoutedAccess:
    def __init__(
        self, producing: ProduceRouting, fetching: FetchRouting, queries: LeaderQueries
    ) -> None:
        self.producing = producing
        self.fetching = fetching
        self.queries = queries

    def log_start(self, topic: str, partition: int) -> int:
        (earliest,) = self.queries.per_leader_list_offsets(
            [common_pb2.ListOffsetsPartition(topic=topic, partition=partition, timestamp=-2)]
        )
        error = error_of(earliest.error, earliest.error_message)
        if error is not None:
            raise error
        return int(earliest.offset)

    def fetch(self, topic: str, partition: int, offset: int) -> Iterator[FetchedPiece]:
        request = common_pb2.FetchRequest(min_bytes=1, max_wait_ms=0, max_bytes=READ_FETCH_BYTES)
        request.partitions.add(
            topic=topic,
            partition=partition,
            fetch_offset=offset,
            partition_max_bytes=READ_FETCH_BYTES,
        )
        scope = CallEnd()
        try:
            for message in self.fetching.fetch_messages(request, scope):
                piece = piece_of(message)
                error = error_of(piece.error, piece.error_message)
                if error is not None:
                    raise error
                yield FetchedPiece(piece.high_watermark, bytes(piece.records))
        finally:
            scope.finish()

    def append(self, topic: str, partition: int, records: bytes, timeout_ms: int) -> Appended:
        raw = wire.encode_produce_request(
            topic, -1, timeout_ms, [(partition, NO_LEADER_EPOCH, [records])]
        )
        # Straight to the leader (the routing's client produce refuses internal topics: only
        # the cluster writes them).
        try:
            target = self.producing.route(topic, partition, NO_LEADER_EPOCH)
            answer = self.producing.appends.append(target, raw, timeout_ms / 1000 + 5)
        except SeglogError as exc:
            raise CoordinatorNotAvailableError(f"{topic}-{partition}: {exc}") from None
        result = common_pb2.ProduceResponse.FromString(answer).partitions[0]
        error = error_of(result.error, result.error_message)
        if error is not None:
            raise error
        return Appended(int(result.base_offset), int(result.last_offset))
