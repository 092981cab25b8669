"""Channels from the gateway to storage nodes: one per node, traced when tracing is on,
replaced when a node comes back at another address.

Besides the typed stub, each connection has raw callables: `append_raw` sends a
ProduceRequest's wire bytes as received from the client, `append_relay` does the same and
hands back the node's answer as wire bytes, and `fetch_raw` yields the node's FetchResponse
messages as wire bytes, so the gateway relays them without parsing."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import grpc
from opentelemetry import trace

from seglog.rpc import wire
from seglog.rpc.channels import open_channel
from seglog.v1 import common_pb2, storage_pb2_grpc

_APPEND = "/seglog.v1.StorageNode/Append"
_FETCH = "/seglog.v1.StorageNode/Fetch"


@dataclass
class NodeConnection:
    address: str
    channel: grpc.Channel
    stub: storage_pb2_grpc.StorageNodeStub
    append_raw: Any  # grpc.UnaryUnaryMultiCallable: bytes -> ProduceResponse
    fetch_raw: Any  # grpc.UnaryStreamMultiCallable: bytes -> iterator of bytes
    append_relay: Any  # grpc.UnaryUnaryMultiCallable: bytes -> the answer's bytes


class NodeConnections:
    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        *,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        self._tracer_provider = tracer_provider
        self._credentials = credentials
        self._lock = threading.Lock()
        self._connections: dict[int, NodeConnection] = {}

    def get(self, node_id: int, address: str) -> NodeConnection:
        with self._lock:
            conn = self._connections.get(node_id)
            if conn is not None and conn.address == address:
                return conn
            if conn is not None:
                conn.channel.close()
            # Untraced when tracing is off, as the servers are (tracing.server_interceptors).
            channel = open_channel(
                address,
                traced=self._tracer_provider is not None,
                tracer_provider=self._tracer_provider,
                credentials=self._credentials,
            )
            conn = NodeConnection(
                address,
                channel,
                storage_pb2_grpc.StorageNodeStub(channel),
                channel.unary_unary(
                    _APPEND,
                    request_serializer=wire.identity,
                    response_deserializer=common_pb2.ProduceResponse.FromString,
                ),
                channel.unary_stream(
                    _FETCH, request_serializer=wire.identity, response_deserializer=wire.identity
                ),
                channel.unary_unary(
                    _APPEND, request_serializer=wire.identity, response_deserializer=wire.identity
                ),
            )
            self._connections[node_id] = conn
            return conn

    def close(self) -> None:
        with self._lock:
            for conn in self._connections.values():
                conn.channel.close()
            self._connections.clear()
