"""A storage node's metrics (seglog/metrics.py has the names): appends and fetches counted
once per request, and per-partition gauges read from the replica manager at each export."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence

from opentelemetry.metrics import MeterProvider, Observation

from seglog.errors import SeglogError
from seglog.metrics import PARTITION, TOPIC, RequestMetrics, error_reason

from .replica_manager import AppendResult, ReplicaManager


class NodeMetrics(RequestMetrics):
    def __init__(self, provider: MeterProvider | None, replicas: ReplicaManager) -> None:
        super().__init__(provider, "seglog.storage_node")
        self.replicas = replicas
        self.gauge("seglog.log.size", "By", "bytes of a partition's log", self._log("size_bytes"))
        self.gauge(
            "seglog.log.segments",
            "{segment}",
            "segments of a partition's log",
            self._log("segment_count"),
        )
        self.gauge(
            "seglog.log.start_offset",
            "{offset}",
            "a partition's log start offset",
            self._log("log_start_offset"),
        )
        self.gauge(
            "seglog.log.end_offset",
            "{offset}",
            "a partition's log end offset",
            self._log("log_end_offset"),
        )
        self.gauge(
            "seglog.partition.isr",
            "{replica}",
            "in-sync replicas of a partition this node leads",
            self._led(lambda isr, replicas: len(isr)),
        )
        self.gauge(
            "seglog.partition.under_replicated",
            "{partition}",
            "1 when a partition this node leads has fewer in-sync replicas than replicas",
            self._led(lambda isr, replicas: int(len(isr) < len(replicas))),
        )

    def appended(self, topic: str, results: Sequence[AppendResult], started: float) -> None:
        """One Append: the records and bytes producers added, and the errors answered."""
        if not self.on:
            return
        messages = size_bytes = 0
        errors: dict[str, int] = {}
        for result in results:
            if result.info is not None:
                messages += result.info.last_offset - result.info.first_offset + 1
                size_bytes += result.info.valid_bytes
            elif result.error is not None:
                reason = error_reason(result.error)
                errors[reason] = errors.get(reason, 0) + 1
        self.produced(topic, messages, size_bytes)
        self.request("Append", started, errors)

    def _log(self, field: str):  # type: ignore[no-untyped-def]
        def observe() -> Iterator[Observation]:
            for topic, partition in self.replicas.hosted():
                described = self.replicas.describe(topic, partition)
                if described.error is None:
                    value = getattr(described, field)
                    yield Observation(value, {TOPIC: topic, PARTITION: str(partition)})

        return observe

    def _led(
        self, value_of: Callable[[Collection[int], Sequence[int]], int]
    ) -> Callable[[], Iterator[Observation]]:
        def observe() -> Iterator[Observation]:
            for topic, partition in self.replicas.hosted():
                try:
                    held = self.replicas.partition(topic, partition)
                except SeglogError:
                    continue
                registration = held.registration
                if held.is_leader and registration is not None:
                    value = value_of(held.isr, registration.replicas)
                    yield Observation(value, {TOPIC: topic, PARTITION: str(partition)})

        return observe
