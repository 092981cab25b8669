"""What every network thread of a Kafka listener shares (processor.py), built once by the
listener: its own module so that the network thread's helpers (connection_deadlines.py,
request_dispatch.py) take it without importing the thread that uses them."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass

from opentelemetry import trace

from services.memory_pool import RequestMemoryPool

from .api_table import ApiTable
from .core import KafkaCore
from .fetch_sessions import FetchSessionCache
from .handler_pool import RequestHandlerPool
from .node_lanes import NodeAddress


@dataclass(frozen=True)
class ListenerContext:
    """What every network thread of a listener shares."""

    table: ApiTable
    core: KafkaCore
    tracer: trace.Tracer
    pool: RequestMemoryPool
    handlers: RequestHandlerPool
    waiting_handlers: RequestHandlerPool
    ssl_context: ssl.SSLContext | None
    sasl_required: bool
    advertised_address: str
    # Each node's broker address on this listener (KafkaListener.node_address).
    node_address: NodeAddress
    max_request_bytes: int
    idle_timeout_s: float
    first_request_timeout_s: float
    closed: Callable[[str], None]  # a connection from this address is closed
    fetch_sessions: FetchSessionCache | None = None  # the listener's (fetch_sessions.py)
