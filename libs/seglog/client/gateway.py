"""A thin, typed client of the Gateway service: one channel, the generated stub, seglog errors
instead of raw gRPC ones. It carries the calls the producer, the consumer and the Spark
reader make (produce, fetch, producer ids, offsets, split points, topic metadata); every
admin operation, for programs and the CLI alike, is Admin's (admin.py), built on it."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import grpc
from opentelemetry import trace

from ..errors import SeglogError
from ..rpc import wire
from ..rpc.channels import channel_target, open_channel, tls_server_name
from ..rpc.status import error_from_code, error_from_rpc
from ..security.tls import ClientSecurity
from ..v1 import common_pb2, gateway_pb2, gateway_pb2_grpc
from .coordinators import GroupCoordinators
from .structs import OffsetAndTimestamp, TopicPartition
from .transactions import TxnCoordinatorCalls

DEFAULT_BOOTSTRAP = "127.0.0.1:7070"
_PRODUCE = "/seglog.v1.Gateway/Produce"
LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3  # the record with the largest timestamp (Kafka's OffsetSpec.maxTimestamp)


DEFAULT_PORT = 7070


# Set by programs that trace their own calls (the CLI, from OTEL_* variables): every client
# they make then passes trace context to the gateway.
_tracer_provider: trace.TracerProvider | None = None


def trace_client_calls(provider: trace.TracerProvider | None) -> None:
    global _tracer_provider
    _tracer_provider = provider


def default_bootstrap() -> str:
    return os.environ.get("SEGLOG_BOOTSTRAP", DEFAULT_BOOTSTRAP)


def with_default_port(address: str) -> str:
    """`host` -> `host:7070` (gRPC would otherwise try 443); `host:port`, `[v6]:port` and
    `unix:` targets are kept as they are; several comma-separated addresses become one
    target that fails over between them (rpc/channels.py)."""
    return channel_target(address, DEFAULT_PORT)


@dataclass(frozen=True)
class FetchPosition:
    topic: str
    partition: int
    offset: int
    max_bytes: int = 1024 * 1024
    leader_epoch: int = -1


_FROM_ENV = ClientSecurity(ca=Path("-"))  # sentinel: resolve from the environment


class GatewayClient:
    def __init__(
        self,
        bootstrap: str | None = None,
        *,
        timeout_s: float = 30.0,
        security: ClientSecurity | None = _FROM_ENV,
        client_id: str | None = None,
    ) -> None:
        """`security`: TLS settings (None: plaintext); by default from SEGLOG_TLS_CA,
        SEGLOG_TLS_CERT and SEGLOG_TLS_KEY when set. `client_id`: Kafka's client.id, sent
        with every call, to every gateway (rpc/client_id.py)."""
        given = bootstrap or default_bootstrap()
        self.bootstrap = with_default_port(given)
        self.timeout_s = timeout_s
        self.client_id = client_id
        self.security = ClientSecurity.resolve() if security is _FROM_ENV else security
        self._channel = self._open(self.bootstrap, tls_server_name(given))
        self._extra_channels: list[grpc.Channel] = []
        # Group calls go to each group's coordinating gateway (coordinators.py).
        self.group_coordinators = GroupCoordinators(self._channel, self._open_extra)
        # Transactional calls to each transactional id's (and group's) coordinator.
        self.txn_coordinators = TxnCoordinatorCalls(self._channel, self._open_extra)
        self._stub = gateway_pb2_grpc.GatewayStub(self._channel)
        # Produce with the request already in wire bytes (rpc/wire.py): the producer's path.
        self.produce_raw = self._channel.unary_unary(
            _PRODUCE,
            request_serializer=wire.identity,
            response_deserializer=common_pb2.ProduceResponse.FromString,
        )

    def _open(self, target: str, server_name: str | None = None) -> grpc.Channel:
        provider = _tracer_provider
        return open_channel(
            target,
            traced=provider is not None,
            tracer_provider=provider,
            credentials=None if self.security is None else self.security.channel_credentials(),
            server_name=server_name,
            client_id=self.client_id,
        )

    def _open_extra(self, address: str) -> grpc.Channel:
        """A channel to one gateway named by the cluster (a group's coordinator)."""
        channel = self._open(with_default_port(address))
        self._extra_channels.append(channel)
        return channel

    def channel_to(self, address: str) -> grpc.Channel:
        """A channel to a gateway the cluster named ("" : the bootstrap gateways'); the
        caller keeps it (each call opens another)."""
        return self._channel if not address else self._open_extra(address)

    def close(self) -> None:
        self._channel.close()
        for channel in self._extra_channels:
            channel.close()

    def __enter__(self) -> GatewayClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, method: str, request: object, timeout_s: float | None = None) -> object:
        """One unary call of the Gateway service, its gRPC error raised as a seglog error."""
        try:
            return getattr(self._stub, method)(request, timeout=timeout_s or self.timeout_s)
        except grpc.RpcError as exc:
            raise error_from_rpc(exc) from None

    # -- topic metadata: what the clients' metadata (metadata.py) and the Spark reader's
    # planning read (Admin, admin.py, shows the same answers to users) -------------------

    def list_topics(self, include_internal: bool = False) -> list[gateway_pb2.TopicListing]:
        request = gateway_pb2.ListTopicsRequest(include_internal=include_internal)
        return list(self.call("ListTopics", request).topics)  # type: ignore[attr-defined]

    def describe_topics(
        self, names: Iterable[str] = (), *, allow_auto_topic_creation: bool = False
    ) -> list[gateway_pb2.TopicDescription]:
        """Every topic when `names` is empty; an unknown name comes back with its error set
        (or is created first, with `allow_auto_topic_creation` and the gateway's
        auto.create.topics.enable, as Kafka's Metadata)."""
        request = gateway_pb2.DescribeTopicsRequest(
            names=list(names), allow_auto_topic_creation=allow_auto_topic_creation
        )
        return list(self.call("DescribeTopics", request).topics)  # type: ignore[attr-defined]

    # -- data ----------------------------------------------------------------------------

    def produce(
        self,
        topic: str,
        batches: Mapping[int, bytes],
        *,
        acks: int = 1,
        timeout_ms: int = 30_000,
        leader_epochs: Mapping[int, int] | None = None,
    ) -> list[common_pb2.PartitionProduceResult]:
        """Send encoded batches per partition; per-partition results (errors not raised)."""
        request = common_pb2.ProduceRequest(topic=topic, acks=acks, timeout_ms=timeout_ms)
        for partition, records in batches.items():
            epoch = (leader_epochs or {}).get(partition, -1)
            request.partitions.add(partition=partition, records=records, current_leader_epoch=epoch)
        response = self.call("Produce", request, timeout_ms / 1000 + 5)
        return list(response.partitions)  # type: ignore[attr-defined]

    def fetch(
        self,
        positions: Iterable[FetchPosition],
        *,
        min_bytes: int = 1,
        max_wait_ms: int = 500,
        max_bytes: int = 50 * 1024 * 1024,
    ) -> Iterator[common_pb2.FetchResponse]:
        request = common_pb2.FetchRequest(
            min_bytes=min_bytes, max_wait_ms=max_wait_ms, max_bytes=max_bytes
        )
        for p in positions:
            request.partitions.add(
                topic=p.topic,
                partition=p.partition,
                fetch_offset=p.offset,
                partition_max_bytes=p.max_bytes,
                current_leader_epoch=p.leader_epoch,
            )
        try:
            yield from self._stub.Fetch(request, timeout=max_wait_ms / 1000 + self.timeout_s)
        except grpc.RpcError as exc:
            raise error_from_rpc(exc) from None

    def init_producer_id(self) -> tuple[int, int]:
        """Kafka's InitProducerId: (producer id, epoch) for an idempotent producer."""
        response = self.call("InitProducerId", gateway_pb2.InitProducerIdRequest())
        if response.error:  # type: ignore[attr-defined]
            raise error_from_code(response.error, response.error_message)  # type: ignore[attr-defined]
        return response.producer_id, response.producer_epoch  # type: ignore[attr-defined]

    def list_offsets(
        self, topic: str, timestamps: Mapping[int, int]
    ) -> dict[int, common_pb2.ListOffsetsResult]:
        """partition -> timestamp (LATEST, EARLIEST, MAX_TIMESTAMP or ms) in; partition ->
        result out."""
        request = common_pb2.ListOffsetsRequest()
        for partition, timestamp in timestamps.items():
            request.partitions.add(topic=topic, partition=partition, timestamp=timestamp)
        response = self.call("ListOffsets", request)
        return {r.partition: r for r in response.partitions}  # type: ignore[attr-defined]


@dataclass(frozen=True)
class RangeSplits:
    """A partition range cut by its leader into byte-balanced pieces (SplitPoints):
    each piece's first offset and bytes; the range as clamped to [log start, HW]."""

    topic: str
    partition: int
    start_offset: int
    end_offset: int
    split_offsets: tuple[int, ...]
    split_bytes: tuple[int, ...]

    @property
    def size_bytes(self) -> int:
        return sum(self.split_bytes)


def split_points(
    client: GatewayClient,
    ranges: Mapping[TopicPartition, tuple[int, int]],
    target_bytes: int,
) -> dict[TopicPartition, RangeSplits]:
    """Byte-balanced pieces of each partition's [start, end) (end < 0: the high watermark),
    about `target_bytes` each (<= 0: one piece); a partition's error raises."""
    request = common_pb2.SplitPointsRequest()
    for tp, (start, end) in ranges.items():
        request.partitions.add(
            topic=tp.topic,
            partition=tp.partition,
            start_offset=start,
            end_offset=end,
            target_bytes=target_bytes,
        )
    response = client.call("SplitPoints", request)
    out = {}
    for r in response.partitions:  # type: ignore[attr-defined]
        if r.error:
            raise error_from_code(r.error, r.error_message)
        out[TopicPartition(r.topic, r.partition)] = RangeSplits(
            r.topic,
            r.partition,
            r.start_offset,
            r.end_offset,
            tuple(r.split_offsets),
            tuple(r.split_bytes),
        )
    return out


def partition_offsets(
    client: GatewayClient, specs: Mapping[TopicPartition, int]
) -> dict[TopicPartition, OffsetAndTimestamp]:
    """ListOffsets across topics: per partition EARLIEST, LATEST, MAX_TIMESTAMP or a
    timestamp in ms ->
    (offset, timestamp), offset -1 when no record is that late; a partition's error raises."""
    by_topic: dict[str, dict[int, int]] = {}
    for tp, spec in specs.items():
        by_topic.setdefault(tp.topic, {})[tp.partition] = spec
    out: dict[TopicPartition, OffsetAndTimestamp] = {}
    for topic, wanted in by_topic.items():
        for partition, result in client.list_offsets(topic, wanted).items():
            if result.error:
                raise error_from_code(result.error, result.error_message)
            out[TopicPartition(topic, partition)] = OffsetAndTimestamp(
                result.offset, result.timestamp
            )
    return out


def leader_range(client: GatewayClient, tp: TopicPartition) -> tuple[int, int]:
    """The partition's [log start, high watermark] as its leader answers now: what an
    OFFSET_OUT_OF_RANGE answer is checked against before a reader believes it (an answer
    from a replica that was not, or no longer, the leader judged the offset against a log
    that is not the leader's)."""
    earliest = partition_offsets(client, {tp: EARLIEST})[tp][0]
    latest = partition_offsets(client, {tp: LATEST})[tp][0]
    return earliest, latest


__all__ = ["EARLIEST", "LATEST", "FetchPosition", "GatewayClient", "SeglogError"]
