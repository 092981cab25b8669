"""Channels to seglog servers, with the options every caller needs."""

from __future__ import annotations

from typing import Any

import grpc
from opentelemetry import trace

from .. import tracing

# Kafka's socket.request.max.bytes: the largest request a seglog server accepts.
MAX_REQUEST_BYTES = 100 * 1024 * 1024


def channel_options() -> list[tuple[str, Any]]:
    return [
        ("grpc.max_receive_message_length", -1),
        ("grpc.max_send_message_length", MAX_REQUEST_BYTES),
        # One connection per target per process: do not share subchannels across channels
        # created for the same address, so closing one cannot disturb another.
        ("grpc.use_local_subchannel_pool", 1),
    ]


def open_channel(
    address: str,
    *,
    traced: bool = False,
    tracer_provider: trace.TracerProvider | None = None,
    credentials: grpc.ChannelCredentials | None = None,
) -> grpc.Channel:
    """A channel to a seglog server; TLS when `credentials` are given (security/tls.py)."""
    if credentials is not None:
        channel = grpc.secure_channel(address, credentials, options=channel_options())
    else:
        channel = grpc.insecure_channel(address, options=channel_options())
    if traced:
        return tracing.traced_channel(channel, tracer_provider)
    return channel
