"""The StorageNode gRPC servicer: a thin layer over the ReplicaManager (replica_manager.py),
as Kafka's KafkaApis over its ReplicaManager. It checks request fields, translates protobuf
to and from the manager's calls, and bounds how many fetches may wait at once; what the node
does with partitions lives in the manager.

Append takes its request as wire bytes and Fetch answers stream the manager's chunks as wire
bytes (seglog.rpc.wire), so neither builds nor parses a protobuf message around the records.
A follower's fetch-session request (FetchRequest.session_id, fetch_sessions.py) is answered
with the session header first, then only the partitions with news.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import grpc

from seglog.errors import (
    InconsistentClusterIdError,
    NotLeaderError,
    SeglogError,
    ServerBusyError,
    UnknownTopicOrPartitionError,
)
from seglog.rpc import check_fetch_request, client_leader_epoch, wire
from seglog.rpc.addresses import check_host_port
from seglog.rpc.status import abort, error_code_for, set_error
from seglog.storage import log_files
from seglog.v1 import common_pb2, gateway_pb2, storage_pb2
from services.wait_slots import DEFAULT_MAX_WAITING_CALLS, SERVER_MAX_WORKERS, WaitSlots

from .fetch_reads import CONSUMER, FetchChunk, counted
from .fetch_waits import Waiter
from .metadata_applier import MetadataApplier
from .node_metrics import NodeMetrics
from .produce_requests import answer_produce
from .replica_manager import ReplicaManager
from .txn_markers import write_txn_markers

# A push waits this long at most for its states to be applied (the caller's deadline, less a
# margin, when shorter): a small push answers once its leaders serve, a large one (thousands
# of partitions) answers while the applier goes on in the background.
MAX_PUSH_APPLY_WAIT_S = 5.0
PUSH_ANSWER_MARGIN_S = 0.2

FETCH_METHOD = "/seglog.v1.StorageNode/Fetch"
# Fetches run on a pool of their own (serving.MethodThreadPools), so appends and the
# registry's pushes never queue behind them, however many gateways relay long polls here.
FETCH_POOL_THREADS = SERVER_MAX_WORKERS
# Consumers' fetches (relayed by gateways) may hold at most this many of that pool's threads;
# past it they are refused at once with the retriable SERVER_BUSY, so followers' fetches —
# one per follower and leader, the replication acks=all produce waits for — always find one.
MAX_CONSUMER_FETCH_THREADS = FETCH_POOL_THREADS * 3 // 4
# Long polls that may wait at once: as many consumers' as one gateway relays, and on top
# the rest of the pool's threads for followers' (a follower that cannot wait fetches again
# at once, in a loop).
MAX_WAITING_CONSUMER_FETCHES = DEFAULT_MAX_WAITING_CALLS
MAX_WAITING_FETCHES = MAX_WAITING_CONSUMER_FETCHES + FETCH_POOL_THREADS - MAX_CONSUMER_FETCH_THREADS

logger = logging.getLogger(__name__)


class StorageNodeService:
    def __init__(
        self,
        replicas: ReplicaManager,
        applier: MetadataApplier,
        *,
        max_waiting_fetches: int = MAX_WAITING_FETCHES,
        metrics: NodeMetrics | None = None,
    ) -> None:
        self.replicas = replicas
        self.applier = applier
        self.metrics = metrics or NodeMetrics(None, replicas)
        self.waiting_fetches = WaitSlots(max_waiting_fetches)
        self.consumer_fetches = WaitSlots(MAX_CONSUMER_FETCH_THREADS)
        self.waiting_consumer_fetches = WaitSlots(
            min(MAX_WAITING_CONSUMER_FETCHES, max_waiting_fetches)
        )

    # -- Append --------------------------------------------------------------------------

    def Append(self, raw: bytes, context: grpc.ServicerContext) -> common_pb2.ProduceResponse:
        """A ProduceRequest taken as its wire bytes (server.py registers no deserializer):
        a 1 MiB request was copied twice on the way in when parsed (into the message, then
        out of it as `records`). produce_requests.py does the rest, as for the gateway's
        relay over the bulk listener."""
        try:
            return answer_produce(self.replicas, self.metrics, raw)
        except SeglogError as exc:
            abort(context, exc)

    # -- Fetch ---------------------------------------------------------------------------

    def Fetch(
        self, request: common_pb2.FetchRequest, context: grpc.ServicerContext
    ) -> Iterator[bytes]:
        started = time.perf_counter()
        try:
            check_fetch_request(request)
        except SeglogError as exc:
            abort(context, exc)
        replica_id = request.replica_id if request.HasField("replica_id") else CONSUMER
        if request.HasField("session_id"):
            yield from self._session_fetch(request, context, started)
            return
        if replica_id != CONSUMER:
            yield from self._fetch(request, context, started, replica_id)
            return
        if not self.consumer_fetches.try_acquire():
            abort(
                context,
                ServerBusyError(
                    f"{self.consumer_fetches.limit} consumer fetches already hold this node's "
                    f"fetch threads; retry after a back-off"
                ),
            )
        try:
            yield from self._fetch(request, context, started, replica_id)
        finally:
            self.consumer_fetches.release()

    def _fetch(
        self,
        request: common_pb2.FetchRequest,
        context: grpc.ServicerContext,
        started: float,
        replica_id: int,
    ) -> Iterator[bytes]:
        states = self.replicas.fetch_states(
            [
                (
                    p.topic,
                    p.partition,
                    p.fetch_offset,
                    p.partition_max_bytes,
                    client_leader_epoch(p),
                    p.last_fetched_epoch if p.HasField("last_fetched_epoch") else -1,
                )
                for p in request.partitions
            ],
            replica_id,
        )
        for state in states:
            state.isolation_level = request.isolation_level
        # A long poll holds a server thread: only `waiting_fetches.limit` may wait at once,
        # and the rest answer with what they have now, as if max_wait_ms had passed.
        if request.max_wait_ms > 0 and self._take_wait_slot(replica_id):
            waiter = Waiter(wakes_on_records=replica_id >= 0)
            try:
                # Runs when the call ends: a call cancelled while it waits stops waiting.
                context.add_callback(lambda: waiter.notify(None))
                self.replicas.wait_for_fetch(
                    states,
                    max(request.min_bytes, 0),
                    request.max_wait_ms,
                    context.is_active,
                    waiter,
                )
            finally:
                self._give_wait_slot(replica_id)
        if not context.is_active():
            return
        chunks = self.replicas.read_chunks(states, request.max_bytes or (1 << 31) - 1)
        for chunk in counted(chunks, self.metrics, "Fetch", started, replica_id >= 0):
            yield _encode_chunk(chunk, replica_id >= 0)

    def _take_wait_slot(self, replica_id: int) -> bool:
        """A waiting slot; consumers may hold only their share of them, so a follower's
        long poll can always wait (without one it would fetch again at once, in a loop)."""
        consumer = replica_id == CONSUMER
        if consumer and not self.waiting_consumer_fetches.try_acquire():
            return False
        if self.waiting_fetches.try_acquire():
            return True
        if consumer:
            self.waiting_consumer_fetches.release()
        return False

    def _give_wait_slot(self, replica_id: int) -> None:
        self.waiting_fetches.release()
        if replica_id == CONSUMER:
            self.waiting_consumer_fetches.release()

    def _session_fetch(
        self, request: common_pb2.FetchRequest, context: grpc.ServicerContext, started: float
    ) -> Iterator[bytes]:
        """A follower's fetch-session round. It waits on its session's own event; it holds
        a waiting slot like any long poll, and without one answers what it has now."""
        waits = request.max_wait_ms > 0 and self.waiting_fetches.try_acquire()
        if not waits:
            request.max_wait_ms = 0
        try:
            try:
                found = self.replicas.session_fetch(request, client_leader_epoch, context.is_active)
            except SeglogError as exc:
                abort(context, exc)
        finally:
            if waits:
                self.waiting_fetches.release()
        yield common_pb2.FetchResponse(
            session_id=found.session_id, session_error=found.error
        ).SerializeToString()
        if found.error or not context.is_active():
            return
        chunks = found.answered(
            self.replicas.read_chunks(list(found.states), request.max_bytes or (1 << 31) - 1)
        )
        for chunk in counted(chunks, self.metrics, "Fetch", started, True):
            yield _encode_chunk(chunk, True)

    # -- ListOffsets, SplitPoints, DeleteRecords, partition states and descriptions --------

    def ListOffsets(
        self, request: common_pb2.ListOffsetsRequest, context: grpc.ServicerContext
    ) -> common_pb2.ListOffsetsResponse:
        response = common_pb2.ListOffsetsResponse()
        for p in request.partitions:
            result = response.partitions.add(topic=p.topic, partition=p.partition)
            try:
                found = self.replicas.list_offset(
                    p.topic, p.partition, p.timestamp, client_leader_epoch(p), p.isolation_level
                )
            except SeglogError as exc:
                set_error(result, exc)
                result.offset = result.timestamp = -1
                continue
            result.offset = -1 if found is None else found.offset
            result.timestamp = -1 if found is None else found.timestamp_ms
            # No offset (none at or after the time, or LATEST_TIERED on an untiered log): no
            # epoch either, as Kafka answers.
            result.leader_epoch = (
                -1 if result.offset < 0 else self.replicas.leader_epoch(p.topic, p.partition)
            )
        return response

    def SplitPoints(
        self, request: common_pb2.SplitPointsRequest, context: grpc.ServicerContext
    ) -> common_pb2.SplitPointsResponse:
        response = common_pb2.SplitPointsResponse()
        for p in request.partitions:
            result = response.partitions.add(topic=p.topic, partition=p.partition)
            try:
                start, end, pieces = self.replicas.split_points(
                    p.topic,
                    p.partition,
                    p.start_offset,
                    p.end_offset,
                    p.target_bytes,
                    client_leader_epoch(p),
                )
            except SeglogError as exc:
                set_error(result, exc)
                continue
            result.start_offset, result.end_offset = start, end
            result.split_offsets.extend(piece.start_offset for piece in pieces)
            result.split_bytes.extend(piece.size_bytes for piece in pieces)
        return response

    def DeleteRecords(
        self, request: common_pb2.DeleteRecordsRequest, context: grpc.ServicerContext
    ) -> common_pb2.DeleteRecordsResponse:
        response = common_pb2.DeleteRecordsResponse()
        for p in request.partitions:
            result = response.partitions.add(topic=p.topic, partition=p.partition)
            try:
                result.low_watermark = self.replicas.delete_records(
                    p.topic, p.partition, p.offset, client_leader_epoch(p)
                )
            except SeglogError as exc:
                set_error(result, exc)
                result.low_watermark = -1
        return response

    def UpdatePartitions(
        self, request: gateway_pb2.NodeAssignment, context: grpc.ServicerContext
    ) -> storage_pb2.UpdatePartitionsResponse:
        # Checked before anything is queued: the node's API is reachable by any caller.
        try:
            for p in request.partitions:
                log_files.check_topic_name(p.topic)
            for removed in request.removed:
                log_files.check_topic_name(removed.topic)
            # Followers dial these over plain TCP (a gRPC address is gRPC's to parse).
            for node_id, address in request.node_bulk_addresses.items():
                if address:  # "": that node has no bulk listener
                    check_host_port(address, f"node {node_id}'s bulk address")
            self._check_cluster(request.cluster_id)
        except SeglogError as exc:
            abort(context, exc)
        # The applier's thread applies them, never this one; it waits for them, bounded.
        ticket = self.applier.submit(request)
        wait_s = MAX_PUSH_APPLY_WAIT_S
        remaining_s = context.time_remaining()
        if remaining_s is not None:
            wait_s = min(wait_s, remaining_s - PUSH_ANSWER_MARGIN_S)
        if wait_s > 0:
            named = [(p.topic, p.partition) for p in request.partitions]
            self.applier.wait_partitions_applied(ticket, named, wait_s)
        return storage_pb2.UpdatePartitionsResponse()

    def _check_cluster(self, cluster_id: str) -> None:
        """A push or deletion from a registry of another cluster is refused whole (a push
        naming no cluster is taken, but sets nothing aside: metadata_applier.py)."""
        identity = self.applier.identity
        if identity is None or not cluster_id or not identity.cluster_id:
            return
        if cluster_id != identity.cluster_id:
            raise InconsistentClusterIdError(
                f"partition states from a registry of cluster {cluster_id}; this node's data "
                f"directory belongs to cluster {identity.cluster_id}"
            )

    def DeletePartition(
        self, request: storage_pb2.DeletePartitionRequest, context: grpc.ServicerContext
    ) -> storage_pb2.DeletePartitionResponse:
        try:
            log_files.check_topic_name(request.topic)
            self._check_cluster(request.cluster_id)
            tp = (request.topic, request.partition)
            # Remembered before anything: a set-aside under way now, or a creation the
            # registry's earlier push still has queued, deletes its log rather than keep it.
            self.replicas.logs.deleted_topics.add(request.topic_id)
            if self.replicas.logs.holds_other_topic(*tp, request.topic_id):
                # A late delete of a topic made again since: the new one is not its to delete.
                return storage_pb2.DeletePartitionResponse()
            try:
                self.replicas.delete_partition(*tp)
            except UnknownTopicOrPartitionError:
                if not request.topic_id:
                    raise  # a moved replica's delete: a copy set aside stays for the operator
                # A deleted topic's partition the registry's push set aside before this call
                # came (or never here): its copy goes, as Kafka deletes a deleted topic's logs.
                self.replicas.logs.delete_set_aside(*tp, request.topic_id)
            if request.topic_id and self.replicas.remote_deletions is not None:
                # A deleted topic (a moved replica's delete names no id): its remote copies go.
                self.replicas.remote_deletions(request.topic, request.topic_id, request.partition)
        except SeglogError as exc:
            abort(context, exc)
        return storage_pb2.DeletePartitionResponse()

    def DescribePartitions(
        self, request: storage_pb2.DescribePartitionsRequest, context: grpc.ServicerContext
    ) -> storage_pb2.DescribePartitionsResponse:
        response = storage_pb2.DescribePartitionsResponse()
        wanted = [(p.topic, p.partition) for p in request.partitions] or self.replicas.hosted()
        for topic, partition in wanted:
            described = self.replicas.describe(topic, partition)
            state = response.partitions.add(
                topic=topic, partition=partition, leader_epoch=described.leader_epoch
            )
            if described.error is not None:
                state.error = error_code_for(described.error)
                state.log_start_offset = state.log_end_offset = -1
                continue
            state.log_start_offset = described.log_start_offset
            state.log_end_offset = described.log_end_offset
            state.size_bytes = described.size_bytes
            state.segment_count = described.segment_count
            state.high_watermark = described.high_watermark
            state.role = described.role
        return response

    def WriteTxnMarkers(
        self, request: storage_pb2.WriteTxnMarkersRequest, context: grpc.ServicerContext
    ) -> storage_pb2.WriteTxnMarkersResponse:
        try:
            return write_txn_markers(self.replicas, request)
        except SeglogError as exc:
            abort(context, exc)

    def DescribeProducers(
        self, request: storage_pb2.DescribeProducersRequest, context: grpc.ServicerContext
    ) -> storage_pb2.DescribeProducersResponse:
        """Each partition's idempotent producers, from the leader's producer state (a
        follower's may lag it, so only the leader answers, as Kafka's broker does)."""
        response = storage_pb2.DescribeProducersResponse()
        for ref in request.partitions:
            answer = response.partitions.add(topic=ref.topic, partition=ref.partition)
            try:
                held = self.replicas.partition(ref.topic, ref.partition)
                if not held.is_leader or held.fenced is not None:
                    raise NotLeaderError(f"{ref.topic}-{ref.partition}: not led by this node")
                producers = held.log.active_producers()
            except SeglogError as exc:
                answer.error = error_code_for(exc)
                answer.error_message = str(exc)
                continue
            answer.producers.extend(
                storage_pb2.ProducerState(
                    producer_id=p.producer_id,
                    producer_epoch=p.epoch,
                    last_sequence=p.last_sequence,
                    last_timestamp_ms=p.last_timestamp_ms,
                    coordinator_epoch=p.coordinator_epoch,
                    current_txn_start_offset=p.current_txn_start_offset,
                )
                for p in producers
            )
        return response


def _encode_chunk(chunk: FetchChunk, for_replica: bool) -> bytes:
    epoch, end, base = None, 0, 0
    if for_replica:
        epoch, end = chunk.diverging if chunk.diverging is not None else (None, 0)
        base = chunk.segment_base_offset
    aborted = [(a.producer_id, a.first_offset) for a in chunk.aborted]
    suffix = wire.fetch_response_suffix(epoch, end, base, chunk.last_stable_offset, aborted)
    if chunk.error is None:
        return wire.encode_fetch_response(
            chunk.topic,
            chunk.partition,
            chunk.high_watermark,
            chunk.log_start_offset,
            chunk.read(),
            suffix=suffix,
        )
    return wire.encode_fetch_response(
        chunk.topic,
        chunk.partition,
        chunk.high_watermark,
        chunk.log_start_offset,
        b"",
        error_code_for(chunk.error),
        str(chunk.error),
        suffix=suffix,
    )
