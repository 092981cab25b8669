"""Keeps a channel's event thread alive between calls.

gRPC Python runs a channel's streaming calls and futures (its "managed" calls) on a thread of
the channel's own, which it starts when a call begins on a channel with none in flight and
which exits when the last one ends. `Thread.start` waits until the new thread has run, so on
a channel with one call at a time — a follower fetching from its leader, the gateway
relaying a fetch to a node, a producer at a modest rate — every call paid a thread start and
a GIL hand-off before it was even sent (measured with py-spy: 5-9% of a node's and the
gateway's samples in `_channel.create`, all of it thread creation).

`keep_spin_thread` holds one call open for the channel's life: the gRPC health service's
Watch, which every seglog server serves without holding a server thread (the health
servicer answers it through callbacks) and which sends a message only when a status
changes. When it ends (the server restarted, or does not serve Watch), it is opened again
after REOPEN_DELAY_S; once the channel is closed, reopening fails and the keeper stops.
"""

from __future__ import annotations

import logging
import threading

import grpc
from grpc_health.v1 import health_pb2

logger = logging.getLogger(__name__)

_WATCH = "/grpc.health.v1.Health/Watch"
REOPEN_DELAY_S = 1.0


def keep_spin_thread(channel: grpc.Channel) -> None:
    watch = channel.unary_stream(
        _WATCH,
        request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
        response_deserializer=health_pb2.HealthCheckResponse.FromString,
    )

    def reopen() -> None:
        try:
            call = watch(health_pb2.HealthCheckRequest(service=""))
        except ValueError:  # the channel was closed
            return
        call.add_done_callback(ended)  # type: ignore[attr-defined]

    def ended(_: object) -> None:
        timer = threading.Timer(REOPEN_DELAY_S, reopen)
        timer.daemon = True
        timer.start()

    reopen()
