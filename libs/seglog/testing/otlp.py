"""An OTLP metrics receiver on loopback (the collector's side of OTLP/gRPC), keeping what it
is sent, for tests that check what the services export and benchmarks that export for real."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass

import grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc


@dataclass(frozen=True)
class Point:
    service: str
    name: str
    attributes: dict[str, str]
    value: float  # a sum's or gauge's value; a histogram's count


class OtlpReceiver(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: list[metrics_service_pb2.ExportMetricsServiceRequest] = []
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(self, self.server)  # type: ignore[no-untyped-call]
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def Export(  # the generated servicer's name
        self,
        request: metrics_service_pb2.ExportMetricsServiceRequest,
        context: grpc.ServicerContext,
    ) -> metrics_service_pb2.ExportMetricsServiceResponse:
        with self._lock:
            self.requests.append(request)
        return metrics_service_pb2.ExportMetricsServiceResponse()

    def points(self) -> Iterator[Point]:
        with self._lock:
            requests = list(self.requests)
        for request in requests:
            for resource in request.resource_metrics:
                service = next(
                    (
                        a.value.string_value
                        for a in resource.resource.attributes
                        if a.key == "service.name"
                    ),
                    "",
                )
                for scope in resource.scope_metrics:
                    for metric in scope.metrics:
                        kind = metric.WhichOneof("data")
                        for p in getattr(metric, kind).data_points:
                            attributes = {
                                a.key: a.value.string_value or str(a.value.int_value)
                                for a in p.attributes
                            }
                            if kind == "histogram":
                                value: float = p.count
                            else:
                                value = (
                                    p.as_int if p.WhichOneof("value") == "as_int" else p.as_double
                                )
                            yield Point(service, metric.name, attributes, value)

    def latest(self, name: str, **attributes: str) -> dict[tuple[tuple[str, str], ...], float]:
        """The last value exported per attribute set of metric `name` (matching `attributes`)."""
        out: dict[tuple[tuple[str, str], ...], float] = {}
        for point in self.points():
            if point.name == name and all(
                point.attributes.get(k) == v for k, v in attributes.items()
            ):
                out[tuple(sorted(point.attributes.items()))] = point.value
        return out

    def close(self) -> None:
        self.server.stop(0)
