"""OpenTelemetry metrics for the services, from the standard variables only:

- `OTEL_METRICS_EXPORTER`: `otlp` (gRPC to `OTEL_EXPORTER_OTLP_ENDPOINT` /
  `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`, every `OTEL_METRIC_EXPORT_INTERVAL` ms, 60000 by
  default), `prometheus` (an HTTP endpoint to scrape at `OTEL_EXPORTER_PROMETHEUS_HOST`:
  `OTEL_EXPORTER_PROMETHEUS_PORT`, default 0.0.0.0:9464), `console`, or `none` (unset: none).
- `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`: the resource, as for traces.

What is counted is what Kafka's operators watch, one update per request, never per record:

  seglog.messages.in / seglog.bytes.in      counters per topic (leader appends of producers)
  seglog.messages.out / seglog.bytes.out    counters per topic (consumer fetches, gRPC and
                                            bulk; messages = offsets the batches sent span)
  seglog.request.duration                   histogram (s) per request kind
  seglog.request.errors                     counter per request kind and error.type
  seglog.log.size / seglog.log.segments     gauges per partition a node hosts
  seglog.log.start_offset / .end_offset     gauges per partition
  seglog.partition.isr / .under_replicated  gauges per partition the node leads
  seglog.partition.isr.shrinks / .expands   counters per node (ISR changes it led)
  seglog.remote.copy_lag.bytes / .segments  gauges per tiered partition the node leads: what
                                            could be copied to the object store and is not yet
  seglog.partitions.offline                 gauge: partitions without a live leader (gateway)
  seglog.registry.node.live                 gauge per registered node (the gateway)
  seglog.consumer.lag                       gauge per group and partition (the coordinator)
  seglog.groups                             gauge per group protocol and state (the coordinator)
  seglog.group.members                      gauge per group and protocol its members speak
  seglog.transactions                       gauge per transaction state (the coordinator)
  seglog.transactions.markers.pending       gauge: transactions whose markers are pending
  seglog.authorization.denied               counter per operation and resource type
  seglog.share.records.in_flight / .available  gauges per share group and partition
  seglog.share.records.redelivered / .archived counters (share groups, the gateway)

Topic, partition and group attributes use OpenTelemetry's messaging names, as the spans do
(semconv.py: `messaging.destination.name`, `messaging.destination.partition.id`,
`messaging.consumer.group.name`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation
from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricReader,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource

from .errors import SeglogError
from .rpc.status import error_code_for
from .semconv import TOPIC
from .v1 import common_pb2

logger = logging.getLogger(__name__)

# The scrape endpoints started (their ports, when asked for port 0, for tests).
PROMETHEUS_SERVERS: list[Any] = []


def error_reason(error: SeglogError) -> str:
    """An error's reason as the API names it (NOT_LEADER_OR_FOLLOWER, ...): `error.type`."""
    name: str = common_pb2.ErrorCode.Name(error_code_for(error))
    return name


def configure_metrics(default_service_name: str) -> SdkMeterProvider | None:
    """A meter provider as the environment asks; None when metrics are off."""
    names = [n.strip() for n in os.environ.get("OTEL_METRICS_EXPORTER", "none").split(",")]
    readers: list[MetricReader] = []
    for name in names:
        if name in ("", "none"):
            continue
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
                OTLPMetricExporter,
            )

            readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
        elif name == "prometheus":
            from opentelemetry.exporter.prometheus import PrometheusMetricReader
            from prometheus_client import start_http_server

            host = os.environ.get("OTEL_EXPORTER_PROMETHEUS_HOST", "0.0.0.0")
            port = int(os.environ.get("OTEL_EXPORTER_PROMETHEUS_PORT", "9464"))
            try:
                server, _ = start_http_server(port, addr=host)
            except OSError as exc:
                # The bare errno ("Address already in use") names neither the endpoint nor
                # what to change: every process on a host needs its own port.
                raise OSError(
                    f"the Prometheus endpoint cannot listen on {host}:{port} "
                    f"({exc.strerror or exc}): give each process on this host its own "
                    f"OTEL_EXPORTER_PROMETHEUS_PORT (or OTEL_EXPORTER_PROMETHEUS_HOST)"
                ) from exc
            PROMETHEUS_SERVERS.append(server)
            logger.info("metrics for Prometheus at http://%s:%d/metrics", host, server.server_port)
            readers.append(PrometheusMetricReader())
        elif name == "console":
            readers.append(PeriodicExportingMetricReader(ConsoleMetricExporter()))
        else:
            raise ValueError(
                f"OTEL_METRICS_EXPORTER={name!r}: expected otlp, prometheus, console or none"
            )
    if not readers:
        return None
    service_name = os.environ.get("OTEL_SERVICE_NAME", default_service_name)
    return SdkMeterProvider(
        metric_readers=readers, resource=Resource.create({"service.name": service_name})
    )


class RequestMetrics:
    """Durations and errors of requests, and bytes/messages per topic; every method is a
    no-op without a meter provider, so a service with metrics off pays one check."""

    def __init__(self, provider: MeterProvider | None, scope: str) -> None:
        self.on = provider is not None
        if provider is None:
            return
        meter = provider.get_meter(scope)
        self.meter: Meter = meter
        self._duration = meter.create_histogram(
            "seglog.request.duration", unit="s", description="time to answer a request"
        )
        self._errors = meter.create_counter(
            "seglog.request.errors", unit="{error}", description="errors answered, by reason"
        )
        self._messages_in = meter.create_counter(
            "seglog.messages.in", unit="{message}", description="records appended for producers"
        )
        self._bytes_in = meter.create_counter(
            "seglog.bytes.in", unit="By", description="bytes appended for producers"
        )
        self._messages_out = meter.create_counter(
            "seglog.messages.out", unit="{message}", description="records sent to consumers"
        )
        self._bytes_out = meter.create_counter(
            "seglog.bytes.out", unit="By", description="bytes sent to consumers"
        )

    def request(self, kind: str, started: float, errors: dict[str, int] | None = None) -> None:
        """One request of `kind` that began at `started` (time.perf_counter), with the
        errors it answered (reason -> count)."""
        if not self.on:
            return
        self._duration.record(time.perf_counter() - started, {"seglog.request": kind})
        for reason, count in (errors or {}).items():
            self._errors.add(count, {"seglog.request": kind, "error.type": reason})

    def produced(self, topic: str, messages: int, size_bytes: int) -> None:
        if self.on and messages:
            self._messages_in.add(messages, {TOPIC: topic})
            self._bytes_in.add(size_bytes, {TOPIC: topic})

    def consumed(self, per_topic: dict[str, list[int]]) -> None:
        """topic -> [messages, bytes] sent by one fetch."""
        if not self.on:
            return
        for topic, (messages, size_bytes) in per_topic.items():
            if size_bytes:
                self._messages_out.add(messages, {TOPIC: topic})
                self._bytes_out.add(size_bytes, {TOPIC: topic})

    def gauge(
        self, name: str, unit: str, description: str, observe: Callable[[], Iterable[Observation]]
    ) -> None:
        """An observable gauge read at each export, off the data path."""
        if not self.on:
            return

        def callback(options: CallbackOptions) -> Iterator[Observation]:
            yield from observe()

        self.meter.create_observable_gauge(name, [callback], unit=unit, description=description)

    def observed_counter(
        self, name: str, unit: str, description: str, total: Callable[[], int]
    ) -> None:
        """A monotonic total kept elsewhere (a plain int its one writer increments), read
        at each export: always exported, zero included, so alerts on its rate see it."""
        if not self.on:
            return

        def callback(options: CallbackOptions) -> Iterator[Observation]:
            yield Observation(total())

        self.meter.create_observable_counter(name, [callback], unit=unit, description=description)

    def observed_counters(
        self, name: str, unit: str, description: str, observe: Callable[[], Iterable[Observation]]
    ) -> None:
        """Monotonic totals kept elsewhere, one per set of attributes (a group ...), read at
        each export."""
        if not self.on:
            return

        def callback(options: CallbackOptions) -> Iterator[Observation]:
            yield from observe()

        self.meter.create_observable_counter(name, [callback], unit=unit, description=description)

    def counter(self, name: str, unit: str, description: str) -> Any:
        return (
            self.meter.create_counter(name, unit=unit, description=description) if self.on else None
        )
