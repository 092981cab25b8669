"""A bound on the gateway's gRPC threads that fetches may hold at once.

The gateway served every gRPC method from one thread pool (serving.build_server), in the
order calls arrive. Fetches past the long-poll bound are answered at once, and their clients
ask again at once: 60 clients looping long polls over 100 partitions kept the pool's queue
full of fetches, so a produce waited behind them, and a node's registry heartbeat did too
until its session expired and its partitions went offline (200 polls of 500 partitions made
one produce wait 99 s). So fetches may hold at most 5/8 of the threads; a fetch past that is
refused at once, before any work, with the retriable SERVER_BUSY (RESOURCE_EXHAUSTED), and
the client backs off (retry_backoff_ms) instead of spinning. Produce, heartbeats and group
calls always find the rest. A client that does not back off still cost produce its place in
the pool's queue (200 of them polling 500 partitions each: produce p50 228 ms), so fetches
now run on a pool of their own (FETCH_POOL_THREADS). The Kafka listener's fetches run on its
connections' own threads, not the pool's, and are not counted here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import grpc

from seglog.errors import ServerBusyError
from seglog.rpc.status import abort
from services.wait_slots import SERVER_MAX_WORKERS, WaitSlots

FETCH_METHOD = "/seglog.v1.Gateway/Fetch"
# Above the long polls' own bound (DEFAULT_MAX_WAITING_CALLS, half the pool), so fetches that
# do not wait still find threads while every long-poll slot is held; below the pool, so
# produce, heartbeats and group joins (a quarter at most) find the rest.
MAX_FETCH_THREADS = SERVER_MAX_WORKERS * 5 // 8
# Fetches run on a pool of their own (serving.MethodThreadPools), so a flood of them queues
# behind fetches only, never ahead of a produce: the bound's threads, and a few more that
# answer the fetches past it SERVER_BUSY at once instead of after a long poll ends.
FETCH_POOL_THREADS = MAX_FETCH_THREADS + 4


class FetchThreadsInterceptor(grpc.ServerInterceptor):  # type: ignore[misc]
    def __init__(self, limit: int = MAX_FETCH_THREADS) -> None:
        self.slots = WaitSlots(limit)
        self.refused = 0

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
        slots = self.slots

        def bounded(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            if not slots.try_acquire():
                self.refused += 1
                abort(
                    context,
                    ServerBusyError(
                        f"{slots.limit} fetches already hold the gateway's threads; retry "
                        f"after a back-off"
                    ),
                )
            try:
                yield from serve(request, context)
            finally:
                slots.release()

        return grpc.unary_stream_rpc_method_handler(
            bounded,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
