"""Share partitions held by another gateway: their operations (partition_ops.py) sent to the
holder over the ShareState service (proto/seglog/v1/share.proto) on its peer server
(internal_listener.py build_peer_server), and that service served here for the partitions
this gateway holds.

A client's ShareFetch reaches whichever gateway it knows (Kafka clients send it to the
partition leader's broker, which in seglog is a lane of the gateway they bootstrapped from),
so two members of a group may fetch one partition through two gateways; only one of them may
decide what is acquired. The gateway the client called reads the records itself (the data
never crosses twice) and asks the holder only where to read from and what it may acquire of
what it read, a few offsets each way. Authorization is the called gateway's: it checked the
client before asking; the holder serves only gateways (its peer server is secured as the
internal listener is: mutual TLS when the cluster has a CA).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import grpc
from google.protobuf import message_factory

from seglog.errors import CoordinatorNotAvailableError, NotCoordinatorError, SeglogError
from seglog.rpc.channels import open_channel
from seglog.rpc.status import set_error
from seglog.v1 import share_pb2
from services import serving

from ..routing.data_plane import error_of
from .partition_ops import AckBatch, LocalOps, Prepared, ShareStart
from .partition_states import PartitionId
from .share_partition import AcquiredRange, FetchedBatch

logger = logging.getLogger(__name__)

SERVICE_DESCRIPTOR = share_pb2.DESCRIPTOR.services_by_name["ShareState"]
SERVICE_NAME = SERVICE_DESCRIPTOR.full_name
# An acquisition or acknowledgement writes the state acks=all before answering (up to
# share.coordinator.write.timeout.ms, 5 s): room for that and a round trip.
CALL_TIMEOUT_S = 10.0


def _ref(pid: PartitionId) -> share_pb2.SharePartitionRef:
    return share_pb2.SharePartitionRef(group_id=pid[0], topic=pid[1], partition=pid[2])


def _pid(ref: share_pb2.SharePartitionRef) -> PartitionId:
    return (ref.group_id, ref.topic, ref.partition)


def _raise_on(answer: Any) -> None:
    error = error_of(answer.error, answer.error_message)
    if error is not None:
        raise error


class RemoteOps:
    """The operations of partitions the gateway at `address` (its peer server) holds."""

    def __init__(self, address: str, channel: grpc.Channel) -> None:
        self.address = address
        self._calls = {
            name: channel.unary_unary(
                f"/{SERVICE_NAME}/{name}",
                request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=_response_class(name).FromString,
            )
            for name in SERVICE_DESCRIPTOR.methods_by_name
        }

    def _call(self, name: str, request: Any) -> Any:
        try:
            answer = self._calls[name](request, timeout=CALL_TIMEOUT_S)
        except grpc.RpcError as exc:
            raise CoordinatorNotAvailableError(
                f"the gateway holding the share partition ({self.address}) did not answer: "
                f"{exc.code()}"
            ) from None
        _raise_on(answer)
        return answer

    def prepare(self, pid: PartitionId) -> Prepared:
        answer = self._call("Prepare", share_pb2.SharePrepareRequest(partition=_ref(pid)))
        offset = answer.fetch_offset if answer.can_fetch else None
        return Prepared(offset, answer.bytes_per_record)

    def acquire(
        self,
        pid: PartitionId,
        member_id: str,
        fetch_offset: int,
        batches: Sequence[FetchedBatch],
        max_records: int,
        bytes_seen: int,
    ) -> list[AcquiredRange]:
        request = share_pb2.ShareAcquireRequest(
            partition=_ref(pid),
            member_id=member_id,
            fetch_offset=fetch_offset,
            batches=[
                share_pb2.ShareFetchedBatch(
                    base_offset=b.base_offset, last_offset=b.last_offset, is_control=b.is_control
                )
                for b in batches
            ],
            max_records=max_records,
            bytes_seen=bytes_seen,
        )
        answer = self._call("Acquire", request)
        return [
            AcquiredRange(r.first_offset, r.last_offset, r.delivery_count) for r in answer.acquired
        ]

    def acknowledge(self, pid: PartitionId, member_id: str, acks: Sequence[AckBatch]) -> None:
        request = share_pb2.ShareAckRequest(
            partition=_ref(pid),
            member_id=member_id,
            acks=[
                share_pb2.ShareAckBatch(
                    first_offset=a.first_offset, last_offset=a.last_offset, types=list(a.types)
                )
                for a in acks
            ],
        )
        self._call("Acknowledge", request)

    def release_member(self, pid: PartitionId, member_id: str) -> None:
        self._call(
            "ReleaseMember", share_pb2.ShareReleaseRequest(partition=_ref(pid), member_id=member_id)
        )

    def reset_start(self, pid: PartitionId, start_offset: int | None) -> None:
        request = share_pb2.ShareResetRequest(
            partition=_ref(pid), start_offset=start_offset or 0, delete=start_offset is None
        )
        self._call("ResetStart", request)

    def start_offsets(self, group_id: str) -> dict[tuple[str, int], ShareStart]:
        try:
            answer = self._calls["StartOffsets"](
                share_pb2.ShareStartOffsetsRequest(group_id=group_id), timeout=CALL_TIMEOUT_S
            )
        except grpc.RpcError as exc:
            raise CoordinatorNotAvailableError(
                f"the gateway at {self.address} did not answer: {exc.code()}"
            ) from None
        return {
            (o.topic, o.partition): ShareStart(o.start_offset, o.delivery_complete_count)
            for o in answer.offsets
        }


def _response_class(method: str) -> Any:
    output = SERVICE_DESCRIPTOR.methods_by_name[method].output_type
    return message_factory.GetMessageClass(output)


class RemoteGateways:
    """One channel per holding gateway's internal address, made on first use."""

    def __init__(self, credentials: grpc.ChannelCredentials | None = None) -> None:
        self._credentials = credentials
        self._lock = threading.Lock()
        self._ops: dict[str, RemoteOps] = {}

    def __call__(self, address: str) -> RemoteOps:
        with self._lock:
            found = self._ops.get(address)
            if found is None:
                channel = open_channel(address, credentials=self._credentials)
                found = self._ops[address] = RemoteOps(address, channel)
            return found


class ShareStateService:
    """The ShareState service: the operations other gateways ask of the partitions held
    here; NOT_COORDINATOR for one held elsewhere (the caller's view is behind)."""

    def __init__(self, local: LocalOps, holder_of: Callable[[PartitionId], str]) -> None:
        self.local = local
        self.holder_of = holder_of

    def _held(self, pid: PartitionId) -> None:
        holder = self.holder_of(pid)
        if holder:
            raise NotCoordinatorError(
                f"share partition {pid} is held by the gateway at {holder}", coordinator=holder
            )

    def Prepare(self, request: Any, context: Any) -> Any:
        answer = share_pb2.SharePrepareResponse()
        pid = _pid(request.partition)
        try:
            self._held(pid)
            prepared = self.local.prepare(pid)
        except SeglogError as exc:
            set_error(answer, exc)
            return answer
        answer.can_fetch = prepared.fetch_offset is not None
        answer.fetch_offset = prepared.fetch_offset or 0
        answer.bytes_per_record = prepared.bytes_per_record
        return answer

    def Acquire(self, request: Any, context: Any) -> Any:
        answer = share_pb2.ShareAcquireResponse()
        pid = _pid(request.partition)
        batches = [
            FetchedBatch(b.base_offset, b.last_offset, b.is_control) for b in request.batches
        ]
        try:
            self._held(pid)
            acquired = self.local.acquire(
                pid,
                request.member_id,
                request.fetch_offset,
                batches,
                request.max_records,
                request.bytes_seen,
            )
        except SeglogError as exc:
            set_error(answer, exc)
            return answer
        for r in acquired:
            answer.acquired.add(
                first_offset=r.first_offset,
                last_offset=r.last_offset,
                delivery_count=r.delivery_count,
            )
        return answer

    def Acknowledge(self, request: Any, context: Any) -> Any:
        answer = share_pb2.ShareStateAnswer()
        pid = _pid(request.partition)
        acks = [AckBatch(a.first_offset, a.last_offset, tuple(a.types)) for a in request.acks]
        try:
            self._held(pid)
            self.local.acknowledge(pid, request.member_id, acks)
        except SeglogError as exc:
            set_error(answer, exc)
        return answer

    def ReleaseMember(self, request: Any, context: Any) -> Any:
        answer = share_pb2.ShareStateAnswer()
        pid = _pid(request.partition)
        try:
            self._held(pid)
            self.local.release_member(pid, request.member_id)
        except SeglogError as exc:
            set_error(answer, exc)
        return answer

    def ResetStart(self, request: Any, context: Any) -> Any:
        answer = share_pb2.ShareStateAnswer()
        pid = _pid(request.partition)
        try:
            self._held(pid)
            self.local.reset_start(pid, None if request.delete else request.start_offset)
        except SeglogError as exc:
            set_error(answer, exc)
        return answer

    def StartOffsets(self, request: Any, context: Any) -> Any:
        answer = share_pb2.ShareStartOffsetsResponse()
        for (topic, index), start in self.local.start_offsets(request.group_id).items():
            try:
                held = not self.holder_of((request.group_id, topic, index))
            except SeglogError:
                held = False
            if held:
                answer.offsets.add(
                    topic=topic,
                    partition=index,
                    start_offset=start.start_offset,
                    delivery_complete_count=start.delivery_complete_count,
                )
        return answer

    def handler(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(
            SERVICE_NAME,
            serving.unary_handlers(
                SERVICE_DESCRIPTOR,
                {
                    "Prepare": self.Prepare,
                    "Acquire": self.Acquire,
                    "Acknowledge": self.Acknowledge,
                    "ReleaseMember": self.ReleaseMember,
                    "StartOffsets": self.StartOffsets,
                    "ResetStart": self.ResetStart,
                },
            ),
        )
