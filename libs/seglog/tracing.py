"""OpenTelemetry set-up for the services, from the standard `OTEL_*` variables only.

- `OTEL_TRACES_EXPORTER`: `otlp` (gRPC, to `OTEL_EXPORTER_OTLP_ENDPOINT` /
  `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, default http://localhost:4317), `console`, or `none`.
  Unset means `none` here (the specification's default is `otlp`): a local cluster started
  with no collector running should not log export failures every few seconds.
- `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_BSP_*`: read by the SDK itself.

Spans: opentelemetry-instrumentation-grpc's interceptors on every server and on the channels a
service opens to another (so one client call is one trace through gateway and storage node),
health checks left out; the engine adds its own spans (`seglog.log.*`, `seglog.segment.*`)
through the API's global tracer provider.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import grpc
from opentelemetry import trace
from opentelemetry.instrumentation.grpc import (
    client_interceptor,
    filters,
    grpcext,
    server_interceptor,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

_NOT_HEALTH = filters.negate(filters.health_check())


def configure_tracing(default_service_name: str) -> TracerProvider | None:
    """Install a global tracer provider as the environment asks; None when tracing is off."""
    names = [n.strip() for n in os.environ.get("OTEL_TRACES_EXPORTER", "none").split(",")]
    processors: list[SpanProcessor] = []
    for name in names:
        if name in ("", "none"):
            continue
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

            processors.append(BatchSpanProcessor(OTLPSpanExporter()))
        elif name == "console":
            processors.append(BatchSpanProcessor(ConsoleSpanExporter()))
        else:
            raise ValueError(f"OTEL_TRACES_EXPORTER={name!r}: expected otlp, console or none")
    if not processors:
        return None
    service_name = os.environ.get("OTEL_SERVICE_NAME", default_service_name)
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    for processor in processors:
        provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    return provider


def server_interceptors(
    tracer_provider: trace.TracerProvider | None = None,
) -> Sequence[grpc.ServerInterceptor]:
    """The tracing interceptor, or none when tracing is off (no provider): with nothing to
    export, its per-call and per-message wrappers cost the data path ~6% and record nothing.
    A service without tracing then passes no trace context on to the services it calls."""
    if tracer_provider is None:
        return []
    return [server_interceptor(tracer_provider=tracer_provider, filter_=_NOT_HEALTH)]


def traced_channel(
    channel: grpc.Channel, tracer_provider: trace.TracerProvider | None = None
) -> grpc.Channel:
    # The instrumentation's interceptor speaks its own grpcext interface, not grpc's.
    interceptor = client_interceptor(tracer_provider=tracer_provider, filter_=_NOT_HEALTH)
    channel = grpcext.intercept_channel(channel, interceptor)
    return channel
