"""Fetch answers relayed over gRPC count against the gateway's request memory
(request_memory.py, `queued.max.request.bytes`).

A fetch's answer is the nodes' records, relayed as they arrive; the gateway cannot size it
before asking, and once the nodes have sent it, it is in memory. Measured on a gateway with
the bound off: 40 clients fetching 48 MiB each at once (max_bytes 64 MiB) raised its peak
resident set by 523 MiB, the answers waiting in gRPC's buffers for slow readers. So a fetch
reserves its answer's bytes before it is relayed and asks the nodes for no more than it
holds (its max_bytes lowered to the reservation: the answer is smaller, never refused for
size, as a Kafka broker answers less than fetch.max.bytes). Each fetch may reserve at most
its share of half the pool — the pool over the fetch threads (fetch_threads.py), halved — so
fetches that all run at once never take more than half, and long polls that hold their
reservation while they wait cannot keep produce out. When the pool holds less than that
share, a fetch takes what is free; when less than one chunk is free, it waits up to
GRPC_WAIT_S, then is refused with the retriable MEMORY_BUDGET_EXHAUSTED. A node always sends
a partition's first batch even when it is larger than max_bytes: such excess is added to the
share without waiting (it is already here).

The reservation is given back when the call ends (gRPC's termination callback), not when the
handler's last message is handed to gRPC: gRPC may still hold messages the client has not
read until then. The Kafka listener's fetches are not intercepted: its connections hold each
answer's bytes until sent (kafka/).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from seglog.errors import MemoryBudgetExhaustedError
from seglog.rpc.status import abort
from seglog.rpc.wire import encode_uvarint
from seglog.v1 import common_pb2
from services.memory_pool import RequestMemoryPool, RequestShare

from .fetch_threads import FETCH_METHOD, MAX_FETCH_THREADS
from .request_memory import GRPC_WAIT_S

# A node's answers come in chunks of at most 1 MiB (the node's fetch.chunk.bytes): a fetch
# holding less than one could not take a chunk whole.
MIN_ANSWER_BYTES = 1024 * 1024
UNLIMITED_MAX_BYTES = (1 << 31) - 1
# FetchRequest.max_bytes is field 4, a varint: appended to the request's bytes, it overrides
# the earlier value (protobuf's last-one-wins rule for scalars), so the request need not be
# encoded again.
_MAX_BYTES_TAG = bytes([4 << 3])


class FetchAnswerMemoryInterceptor(grpc.ServerInterceptor):  # type: ignore[misc]
    def __init__(self, pool: RequestMemoryPool, fetch_threads: int = MAX_FETCH_THREADS) -> None:
        self.pool = pool
        self.fetch_threads = fetch_threads
        self.lowered = 0  # fetches answered smaller than asked for lack of room

    @property
    def share_bytes(self) -> int:
        """The most one fetch's answer may reserve (0: the pool is unbounded)."""
        if self.pool.limit_bytes <= 0:
            return 0
        return max(self.pool.limit_bytes // 2 // self.fetch_threads, 1)

    def intercept_service(
        self, continuation: Callable[[Any], Any], handler_call_details: Any
    ) -> Any:
        handler = continuation(handler_call_details)
        if (
            handler is None
            or handler.unary_stream is None
            or handler_call_details.method != FETCH_METHOD
        ):
            return handler
        serve = handler.unary_stream

        def held(raw: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
            hold = _CallHold(self.pool)
            if not context.add_callback(hold.end):
                return  # the call already ended
            taken = RequestShare(self.pool)
            try:
                taken.acquire(len(raw), GRPC_WAIT_S)
                raw, reserved = self._reserve_answer(raw, taken)
            except MemoryBudgetExhaustedError as exc:
                self.pool.release(taken.held_bytes)
                abort(context, exc)
            if not hold.keep(taken.held_bytes):
                return  # cancelled while it waited for room
            relayed = 0
            for message in serve(raw, context):
                relayed += len(message)
                if relayed > reserved:  # a first batch larger than max_bytes
                    hold.add(relayed - reserved)
                    reserved = relayed
                yield message

        return grpc.unary_stream_rpc_method_handler(
            held,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def _reserve_answer(self, raw: bytes, share: RequestShare) -> tuple[bytes, int]:
        """Reserves the answer's bytes in `share`; returns the request to relay (its max_bytes
        lowered to what was reserved) and the bytes reserved."""
        try:
            asked = common_pb2.FetchRequest.FromString(raw).max_bytes
        except DecodeError:
            return raw, 0  # the servicer refuses it with INVALID_ARGUMENT
        if asked < 0:
            return raw, 0  # the servicer refuses it with INVALID_ARGUMENT: left as it is
        asked = asked if asked > 0 else UNLIMITED_MAX_BYTES
        if self.share_bytes == 0:
            return raw, asked
        wanted = min(asked, self.share_bytes)
        if share.try_acquire(wanted):
            reserved = wanted
        else:
            free = self.pool.limit_bytes - self.pool.used_bytes
            floor = min(wanted, MIN_ANSWER_BYTES)
            if free >= floor and share.try_acquire(free):
                reserved = free
            else:
                share.acquire(floor, GRPC_WAIT_S)
                reserved = floor
        if reserved >= asked:
            return raw, reserved
        self.lowered += 1
        return raw + _MAX_BYTES_TAG + encode_uvarint(reserved), reserved


class _CallHold:
    """One call's bytes of the pool, given back when the call ends; bytes kept after that
    (a reservation that was still waiting, a cancelled call's last message) are given back
    at once."""

    def __init__(self, pool: RequestMemoryPool) -> None:
        self.pool = pool
        self._held_bytes = 0
        self._lock = threading.Lock()
        self._ended = False

    def keep(self, nbytes: int) -> bool:
        """Counts `nbytes` already taken from the pool; False (and given back) when the call
        has ended."""
        with self._lock:
            if not self._ended:
                self._held_bytes += nbytes
                return True
        self.pool.release(nbytes)
        return False

    def add(self, nbytes: int) -> None:
        """Takes `nbytes` without waiting (they are already here)."""
        self.pool.add(nbytes)
        self.keep(nbytes)

    def end(self) -> None:
        with self._lock:
            self._ended = True
            held, self._held_bytes = self._held_bytes, 0
        self.pool.release(held)
