"""What both servers share: building a gRPC server with health, reflection and tracing, and
stopping on SIGTERM/SIGINT (their settings are services/settings.py's)."""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent import futures
from typing import Any, Protocol

import grpc
from google.protobuf import message_factory
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from opentelemetry import trace
from opentelemetry.metrics import MeterProvider

from seglog import metrics, tracing
from seglog.errors import SeglogError
from seglog.rpc.channels import MAX_REQUEST_BYTES
from services import long_lived
from services.wait_slots import SERVER_MAX_WORKERS

# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MALLOC_MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
MALLOC_TRIM_THRESHOLD_BYTES = 128 * 1024 * 1024


def keep_freed_buffers_for_reuse() -> bool:
    """Make glibc's malloc keep freed large buffers in the process for the next request.

    Every produce or fetch moves megabyte buffers through gRPC, protobuf and the engine. By
    default glibc serves such sizes with fresh mmaps (or trims the heap they were freed to),
    so each request pays a page fault per 4 KiB touched: measured ~600 faults and 1.6 ms of
    system time per 1 MiB produce on the storage node. With allocations up to 32 MiB served
    from the heap and up to 128 MiB of free heap kept, a warm server faults ~15 times per
    request and produce through the gateway went from ~250 to ~400 MB/s. Returns False where
    the C library has no mallopt (not glibc), which changes nothing else.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(
        mallopt(_M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD_BYTES)
        and mallopt(_M_TRIM_THRESHOLD, MALLOC_TRIM_THRESHOLD_BYTES)
    )


def unary(fn: Callable[..., Any], request_cls: Any, response_cls: Any) -> grpc.RpcMethodHandler:
    return grpc.unary_unary_rpc_method_handler(
        fn,
        request_deserializer=request_cls.FromString,
        response_serializer=response_cls.SerializeToString,
    )


def unary_handlers(
    service: Any, methods: dict[str, Callable[..., Any]]
) -> dict[str, grpc.RpcMethodHandler]:
    """Unary handlers for some methods of a proto service (its ServiceDescriptor); request
    and response classes come from the descriptor, so the table names each method once."""
    handlers = {}
    for name, fn in methods.items():
        method = service.methods_by_name[name]
        handlers[name] = unary(
            fn,
            message_factory.GetMessageClass(method.input_type),
            message_factory.GetMessageClass(method.output_type),
        )
    return handlers


def build_server(
    listen: str,
    handlers: Iterable[grpc.GenericRpcHandler],
    service_names: Iterable[str],
    *,
    max_workers: int = SERVER_MAX_WORKERS,
    max_request_bytes: int = MAX_REQUEST_BYTES,
    tracer_provider: trace.TracerProvider | None = None,
    credentials: grpc.ServerCredentials | None = None,
    serving: bool = True,
    interceptors: Iterable[grpc.ServerInterceptor] = (),
    method_threads: Mapping[str, int] | None = None,
    max_concurrent_rpcs: int | None = None,
    thread_name_prefix: str = "rpc",
) -> tuple[grpc.Server, health.HealthServicer, int]:
    """A started-ready (not yet started) server bound to `listen`; returns the bound port.
    Its health service answers SERVING for the server ("") and each service, or NOT_SERVING
    until `set_serving` when `serving` is False. `method_threads` gives some methods (full
    names) a thread pool of their own of that size (MethodThreadPools). `max_concurrent_rpcs`
    bounds the calls running or queued for a thread, over every pool: gRPC answers a call
    past it RESOURCE_EXHAUSTED ("Concurrent RPC limit exceeded!") before its handler reads
    the request; None leaves it unbounded."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=thread_name_prefix),
        handlers=list(handlers),
        interceptors=[
            MethodThreadPools(method_threads or {}),
            *tracing.server_interceptors(tracer_provider),
            *interceptors,
        ],
        options=[
            ("grpc.max_receive_message_length", max_request_bytes),
            ("grpc.max_send_message_length", -1),
            ("grpc.so_reuseport", 0),
        ],
        maximum_concurrent_rpcs=max_concurrent_rpcs,
    )
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = list(service_names)
    reflection.enable_server_reflection(
        [
            *names,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ],
        server,
    )
    if credentials is None:
        port = server.add_insecure_port(listen)
    else:
        port = server.add_secure_port(listen, credentials)
    if port == 0:
        raise OSError(f"cannot listen on {listen}")
    set_serving(health_servicer, names, serving)
    return server, health_servicer, port


class MethodThreadPools(grpc.ServerInterceptor):  # type: ignore[misc]
    """Runs some methods on thread pools of their own, apart from the server's.

    A server's pool takes calls in the order they arrive: 200 clients looping long polls
    through the gateway, each refused at once past the fetch threads' bound, kept its queue
    hundreds of fetches deep, and a produce queued behind them (p50 228 ms, measured; the
    node it was relayed to answered in 3 ms). On a pool of their own, fetches queue only
    behind fetches. gRPC picks the pool when it dispatches a call, from the behavior's
    `experimental_thread_pool` (grpc/_server.py `_select_thread_pool_for_behavior`); this
    interceptor comes first, so it marks the handler every other interceptor has wrapped.
    """

    def __init__(self, threads_by_method: Mapping[str, int]) -> None:
        self.pools = {
            method: futures.ThreadPoolExecutor(
                max_workers=threads, thread_name_prefix=method.rsplit("/", 1)[-1].lower()
            )
            for method, threads in threads_by_method.items()
        }

    def intercept_service(
        self, continuation: Callable[[Any], Any], handler_call_details: Any
    ) -> Any:
        handler = continuation(handler_call_details)
        pool = self.pools.get(handler_call_details.method)
        if handler is None or pool is None:
            return handler
        kind = "unary_stream" if handler.response_streaming else "unary_unary"
        behavior = getattr(handler, kind)
        if behavior is None or handler.request_streaming:
            return handler

        def on_own_pool(request: Any, context: grpc.ServicerContext) -> Any:
            return behavior(request, context)

        on_own_pool.experimental_thread_pool = pool  # type: ignore[attr-defined]
        make = (
            grpc.unary_stream_rpc_method_handler
            if handler.response_streaming
            else grpc.unary_unary_rpc_method_handler
        )
        return make(
            on_own_pool,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


def health_server(listen: str, health_servicer: health.HealthServicer) -> tuple[grpc.Server, int]:
    """A plaintext listener serving only the health service (started), for probes that
    cannot speak TLS (Kubernetes' gRPC probes) when the service's own listener requires
    mutual TLS; it answers what the service's health servicer says, nothing else."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="health"))
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    port = server.add_insecure_port(listen)
    if port == 0:
        raise OSError(f"cannot listen on {listen}")
    server.start()
    return server, port


def set_serving(health_servicer: health.HealthServicer, names: Iterable[str], up: bool) -> None:
    """What the standard health service answers (Kubernetes' gRPC probes ask for "")."""
    status = (
        health_pb2.HealthCheckResponse.SERVING if up else health_pb2.HealthCheckResponse.NOT_SERVING
    )
    for name in ["", *names]:
        health_servicer.set(name, status)


class _ProcessStop:
    """How a server process's main loop is woken: SIGTERM or SIGINT, or a part of the
    server that found it cannot work as configured (`stop_process`)."""

    def __init__(self) -> None:
        self.wake = threading.Event()
        self.signals: list[int] = []
        self.reasons: list[str] = []


_PROCESS_STOP = _ProcessStop()


def stop_process(reason: str) -> None:
    """Stop this server process as if signalled, then exit 1 with `reason` logged: for a
    configuration no retry can fix (a node pointed at a listener that does not serve it).
    In a process not run by `run_until_signalled` (a test's in-process server) it changes
    nothing; the caller stops its own work."""
    _PROCESS_STOP.reasons.append(reason)
    _PROCESS_STOP.wake.set()


def wait_for_signal() -> int:
    """Block until SIGTERM or SIGINT (return the signal number) or `stop_process` (0)."""
    stop = _PROCESS_STOP

    def handler(signum: int, _frame: object) -> None:
        stop.signals.append(signum)
        stop.wake.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    while not stop.wake.wait(1.0):
        pass
    return stop.signals[0] if stop.signals else 0


class Server(Protocol):
    @property
    def address(self) -> str: ...

    def start(self) -> None: ...

    def stop(self, grace_s: float = ...) -> None: ...


def run_until_signalled(
    name: str,
    service_name: str,
    build: Callable[[trace.TracerProvider | None, MeterProvider | None], Server],
) -> int:
    """A server process's life: logging, tracing and metrics from the environment, start,
    print `<name> listening on HOST:PORT[, internal HOST:PORT]` (the line launchers wait
    for; a gateway names its storage nodes' listener there), serve until SIGTERM
    or SIGINT, stop gracefully, flush the spans and metrics."""
    configure_logging()
    logger = logging.getLogger(f"services.{service_name}")
    if not keep_freed_buffers_for_reuse():
        logger.info("no glibc mallopt: large buffers use the C library's defaults")
    try:
        provider = tracing.configure_tracing(service_name)
        meter_provider = metrics.configure_metrics(service_name)
        server = build(provider, meter_provider)
        server.start()
    except (OSError, ValueError, SeglogError) as exc:
        logger.error("cannot start: %s", exc)
        return 1
    long_lived.enable()  # what startup loaded (a node's logs, a gateway's image) stays
    # A gateway says where its storage nodes call it too (`..., internal HOST:PORT`): with
    # port 0 its launcher learns it only here.
    internal = getattr(server, "internal_address", None)
    said = f", internal {internal}" if isinstance(internal, str) else ""
    print(f"{name} listening on {server.address}{said}", flush=True)
    signum = wait_for_signal()
    if signum:
        logger.info("%s: stopping", signal.Signals(signum).name)
    else:
        logger.error("stopping: %s", "; ".join(_PROCESS_STOP.reasons))
    server.stop()
    if provider is not None:
        provider.shutdown()
    if meter_provider is not None:
        meter_provider.shutdown()
    return 0 if signum else 1


def configure_logging() -> None:
    logging.basicConfig(
        level=os.environ.get("SEGLOG_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
