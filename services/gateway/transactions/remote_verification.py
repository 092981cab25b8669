"""KIP-890's verification of a transactional batch whose transactional id another gateway
coordinates: before forwarding it, this gateway asks the coordinating one (its
TransactionCoordinator service's VerifyPartitions, proto/seglog/v1/transactions.proto, on the
clients' gRPC listener, with this gateway's own certificate), in one bounded call per
coordinator and producer that a request needs.

A partition verified is remembered for VERIFIED_FOR_MS per (transactional id, producer id,
epoch, partition), as Kafka's brokers skip verification while a partition's producer state
holds the producer's transaction open (its verification guard). This gateway does not see that
state, so the answer is trusted for that long only: the window in which a producer that
misbehaves right after its commit, sending to a partition without adding it, could still have
a batch forwarded. A failed call verifies nothing (the caller answers it retriable)."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

import grpc

from seglog.errors import CoordinatorNotAvailableError, SeglogError
from seglog.rpc.channels import open_channel
from seglog.rpc.status import error_from_code, error_from_rpc
from seglog.v1 import transactions_pb2 as pb
from seglog.v1 import transactions_pb2_grpc

from .log_formats import TopicPartition

VERIFY_TIMEOUT_S = 2.0  # a produce waits at most this long on the other gateway
VERIFIED_FOR_MS = 500
MAX_REMEMBERED = 100_000  # bounded: the oldest verified partitions go first

Verified = dict[TopicPartition, SeglogError | None]
_Key = tuple[str, int, int, TopicPartition]


class RemoteVerifier:
    def __init__(
        self,
        credentials: grpc.ChannelCredentials | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._credentials = credentials
        self._clock = clock
        self._lock = threading.Lock()
        self._channels: dict[str, grpc.Channel] = {}
        self._remembered: OrderedDict[_Key, float] = OrderedDict()  # -> trusted until (s)
        self.calls = 0  # VerifyPartitions calls made (a figure for tests)

    def _stub(self, address: str) -> transactions_pb2_grpc.TransactionCoordinatorStub:
        with self._lock:
            channel = self._channels.get(address)
            if channel is None:
                channel = self._channels[address] = open_channel(
                    address, credentials=self._credentials
                )
        return transactions_pb2_grpc.TransactionCoordinatorStub(channel)

    def verify(
        self,
        address: str,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> Verified:
        """Each partition's refusal, or None when it is in the producer's transaction."""
        now_s = self._clock()
        out: Verified = {}
        pending: list[TopicPartition] = []
        with self._lock:
            for tp in partitions:
                until_s = self._remembered.get((transactional_id, producer_id, epoch, tp))
                if until_s is not None and until_s > now_s:
                    out[tp] = None
                else:
                    pending.append(tp)
        if not pending:
            return out
        request = pb.TxnVerifyRequest(
            producer=pb.TxnProducer(
                transactional_id=transactional_id, producer_id=producer_id, producer_epoch=epoch
            )
        )
        by_topic: dict[str, list[int]] = {}
        for topic, partition in pending:
            by_topic.setdefault(topic, []).append(partition)
        for topic, numbers in by_topic.items():
            request.topics.add(topic=topic, partitions=numbers)
        self.calls += 1
        try:
            answer = self._stub(address).VerifyPartitions(request, timeout=VERIFY_TIMEOUT_S)
        except grpc.RpcError as exc:
            failed = error_from_rpc(exc)
            return {**out, **dict.fromkeys(pending, failed)}
        asked = set(pending)
        until_s = now_s + VERIFIED_FOR_MS / 1000
        with self._lock:
            for result in answer.partitions:
                tp = (result.topic, result.partition)
                if tp not in asked:
                    continue
                if result.error:
                    out[tp] = error_from_code(result.error, result.error_message)
                    continue
                out[tp] = None
                key = (transactional_id, producer_id, epoch, tp)
                self._remembered[key] = until_s
                self._remembered.move_to_end(key)
            while len(self._remembered) > MAX_REMEMBERED:
                self._remembered.popitem(last=False)
        for tp in pending:
            if tp not in out:
                out[tp] = CoordinatorNotAvailableError(f"{address} did not answer for {tp}")
        return out

    def close(self) -> None:
        with self._lock:
            channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            channel.close()
