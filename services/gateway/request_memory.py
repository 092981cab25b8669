"""Memory for requests in flight, bounded per gateway: Kafka's `queued.max.request.bytes`
(services/memory_pool.py has the pool, which storage nodes' bulk listeners use too).

Every connection shares one pool, gRPC's and the Kafka listener's alike: the bytes of each
request being decoded, validated, relayed or answered are held from the pool until its
answer is sent. Per request, `socket.request.max.bytes` bounds the frame; the pool bounds
the sum, so a thousand connections each sending a large request cannot take a thousand
times that.

When the pool is full, a request waits for room (up to `wait_s`): the Kafka listener does
not read the frame's body meanwhile (it mutes the connection, as Kafka's broker does with
its memory pool, and its network thread serves the others; a frame's bytes are taken only
once its size and header are read and checked: kafka/channel.py), a gRPC call holds its
thread; past the wait the Kafka connection closes
(nothing of the request was read, the client sends it again) and the gRPC call answers
RESOURCE_EXHAUSTED with the retriable reason MEMORY_BUDGET_EXHAUSTED. A request larger than
the whole pool runs when it is alone (Kafka's pool lets one allocation overshoot), so a limit
below socket.request.max.bytes never refuses a request for good. An answer's bytes are added
to its request's share without waiting (its request was admitted; the answer is already
built), so the answers of admitted requests push new requests to wait, never themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from seglog.errors import MemoryBudgetExhaustedError
from seglog.rpc.status import abort
from services.memory_pool import (
    RequestMemoryPool,
)

# gRPC Python decodes a request before any interceptor sees it, and nothing bounded the calls
# it accepts and queues for a thread. Measured with 4 MiB produces and the pool off: a call
# being served holds about three times its request (received, decoded, relayed), one queued
# for a thread its whole request in gRPC's transport buffers (BDP-sized stream windows), one
# refused about half of it while it arrives. 96 looping callers raised a gateway's peak RSS
# by 546-711 MiB; with at most 12 calls at once, 262 MiB; 24, 357; 40, 422. gRPC's own limit
# on calls running or queued (maximum_concurrent_rpcs) refuses the rest RESOURCE_EXHAUSTED
# before a handler reads them, and clients back off. Long polls, group joins, heartbeats and
# health checks count too, so the default leaves every thread of every pool (the server's
# and the fetches') busy and as many calls again queued: it bounds the queue, while the
# threads themselves bound what is being served (threads x socket.request.max.bytes x ~3).
# It is off unless set (Kafka bounds no such thing). Nodes' registry calls never count
# against it nor against the pool: they have a server of their own (internal_listener.py).
# Where set, threads of every pool and as many queued (SERVER_MAX_WORKERS +
# FETCH_POOL_THREADS + SERVER_MAX_WORKERS, 88) is a sensible value.
DEFAULT_MAX_CONCURRENT_REQUESTS = -1
# A gRPC call waits on one of the server's threads, which produce and heartbeats need too:
# briefly, then the client backs off.
GRPC_WAIT_S = 1.0


class RequestMemoryInterceptor(grpc.ServerInterceptor):  # type: ignore[misc]
    """Holds each unary gRPC call's request (its encoded size) from the pool while it is
    served, and its answer once built; the answer's bytes are given back when the handler
    returns, before gRPC writes them (the wire copy is not counted). Streaming methods are
    left alone (the gateway serves none)."""

    def __init__(self, pool: RequestMemoryPool) -> None:
        self.pool = pool

    def intercept_service(
        self, continuation: Callable[[Any], Any], handler_call_details: Any
    ) -> Any:
        handler = continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        serve = handler.unary_unary
        pool = self.pool

        def held(request: Any, context: grpc.ServicerContext) -> Any:
            with pool.holding() as share:
                try:
                    share.acquire(_encoded_size(request), GRPC_WAIT_S)
                except MemoryBudgetExhaustedError as exc:
                    abort(context, exc)
                response = serve(request, context)
                share.add(_encoded_size(response))
                return response

        return grpc.unary_unary_rpc_method_handler(
            held,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


def _encoded_size(message: Any) -> int:
    """A message's encoded size; some methods take or give their bytes undecoded (the
    produce relay forwards a request as it came)."""
    if isinstance(message, bytes | bytearray | memoryview):
        return len(message)
    return int(message.ByteSize())
