"""A client's id on every gRPC call, as Kafka's request header carries `client.id`: the
`client-id` call metadata, which the gateway reads for `clients` quotas (Kafka's
`producer_byte_rate` / `consumer_byte_rate` per client id) and nothing else trusts — it is
the caller's own label, not an identity.

gRPC metadata values are printable ASCII, so an id is checked once, where a client is
configured, instead of failing every call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import grpc

CLIENT_ID_METADATA = "client-id"  # the gateway's routing/quotas.py reads this name
MAX_CLIENT_ID_CHARS = 32_767  # Kafka's request header: a string with an int16 length


def check_client_id(value: object) -> str:
    """`value` as a client id, or ValueError saying why it cannot be one."""
    if not isinstance(value, str):
        raise ValueError(f"client_id must be a string, got {value!r}")
    if len(value) > MAX_CLIENT_ID_CHARS:
        raise ValueError(f"client_id must be at most {MAX_CLIENT_ID_CHARS} characters")
    if not all(" " <= char <= "~" for char in value):
        raise ValueError(f"client_id must be printable ASCII (gRPC metadata), got {value!r}")
    return value


class _CallDetails(NamedTuple):
    method: str
    timeout: float | None
    metadata: Any
    credentials: grpc.CallCredentials | None
    wait_for_ready: bool | None
    compression: grpc.Compression | None


class ClientIdInterceptor(
    grpc.UnaryUnaryClientInterceptor,  # type: ignore[misc]
    grpc.UnaryStreamClientInterceptor,  # type: ignore[misc]
    grpc.StreamUnaryClientInterceptor,  # type: ignore[misc]
    grpc.StreamStreamClientInterceptor,  # type: ignore[misc]
):
    """Adds `client-id: <id>` to every call's metadata (what the call brings is kept)."""

    def __init__(self, client_id: str) -> None:
        self._entry = (CLIENT_ID_METADATA, check_client_id(client_id))

    def _details(self, details: grpc.ClientCallDetails) -> _CallDetails:
        return _CallDetails(
            details.method,
            details.timeout,
            (*(details.metadata or ()), self._entry),
            details.credentials,
            getattr(details, "wait_for_ready", None),
            getattr(details, "compression", None),
        )

    def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: grpc.ClientCallDetails, request: Any
    ) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(
        self, continuation: Callable[..., Any], details: grpc.ClientCallDetails, request: Any
    ) -> Any:
        return continuation(self._details(details), request)

    def intercept_stream_unary(
        self, continuation: Callable[..., Any], details: grpc.ClientCallDetails, requests: Any
    ) -> Any:
        return continuation(self._details(details), requests)

    def intercept_stream_stream(
        self, continuation: Callable[..., Any], details: grpc.ClientCallDetails, requests: Any
    ) -> Any:
        return continuation(self._details(details), requests)


def with_client_id(channel: grpc.Channel, client_id: str | None) -> grpc.Channel:
    """`channel`, its calls labelled with `client_id` (None or "": unlabelled, as before)."""
    if not client_id:
        return channel
    return grpc.intercept_channel(channel, ClientIdInterceptor(client_id))
