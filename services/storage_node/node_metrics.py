"""A storage node's metrics (seglog/metrics.py has the names): appends and fetches counted
once per request, per-partition gauges read from the replica manager at each export, the
ISR shrinks and expansions this node's leaderships made, and the metadata applier's
progress.

The per-partition gauges share one walk of the hosted partitions per export (a snapshot
taken by the first gauge read and reused by the others), not one walk per gauge: at
thousands of partitions the walk, not the export, is what a node pays for its metrics.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from opentelemetry.metrics import MeterProvider, Observation

from seglog.metrics import RequestMetrics, error_reason
from seglog.semconv import PARTITION, TOPIC

from .delayed_produce import AppendResult
from .metadata_applier import MetadataApplier
from .remote_copier import copy_lag
from .replica_manager import ReplicaManager

# Gauges read within this long of a snapshot reuse it: one export reads them one after another.
SNAPSHOT_REUSE_S = 1.0


@dataclass(frozen=True)
class PartitionGauges:
    attributes: dict[str, str]
    size_bytes: int
    segment_count: int
    log_start_offset: int
    log_end_offset: int
    led_isr: int  # -1 unless this node leads it
    led_replicas: int
    # A tiered partition this node leads: what is not copied yet (remote_copier.copy_lag);
    # -1 for the others.
    copy_lag_bytes: int = -1
    copy_lag_segments: int = -1


class NodeMetrics(RequestMetrics):
    def __init__(
        self,
        provider: MeterProvider | None,
        replicas: ReplicaManager,
        applier: MetadataApplier | None = None,
    ) -> None:
        super().__init__(provider, "seglog.storage_node")
        self.replicas = replicas
        self._snapshot: list[PartitionGauges] = []
        self._snapshot_at = -SNAPSHOT_REUSE_S
        self._snapshot_lock = threading.Lock()
        self._attributes: dict[tuple[str, int], dict[str, str]] = {}
        self.gauge("seglog.log.size", "By", "bytes of a partition's log", self._each("size_bytes"))
        self.gauge(
            "seglog.log.segments",
            "{segment}",
            "segments of a partition's log",
            self._each("segment_count"),
        )
        self.gauge(
            "seglog.log.start_offset",
            "{offset}",
            "a partition's log start offset",
            self._each("log_start_offset"),
        )
        self.gauge(
            "seglog.log.end_offset",
            "{offset}",
            "a partition's log end offset",
            self._each("log_end_offset"),
        )
        self.gauge(
            "seglog.partition.isr",
            "{replica}",
            "in-sync replicas of a partition this node leads",
            self._led(lambda g: g.led_isr),
        )
        self.gauge(
            "seglog.partition.under_replicated",
            "{partition}",
            "1 when a partition this node leads has fewer in-sync replicas than replicas",
            self._led(lambda g: int(g.led_isr < g.led_replicas)),
        )
        self.gauge(
            "seglog.remote.copy_lag.bytes",
            "By",
            "bytes of a tiered partition this node leads that could be copied to the object "
            "store and are not yet (Kafka's RemoteCopyLagBytes)",
            self._tiered(lambda g: g.copy_lag_bytes),
        )
        self.gauge(
            "seglog.remote.copy_lag.segments",
            "{segment}",
            "segments of a tiered partition this node leads that could be copied and are not "
            "yet (Kafka's RemoteCopyLagSegments)",
            self._tiered(lambda g: g.copy_lag_segments),
        )
        isr_updates = replicas.isr_updates
        self.observed_counter(
            "seglog.partition.isr.shrinks",
            "{change}",
            "ISR shrinks of partitions this node leads, as the registry accepted them",
            lambda: isr_updates.shrinks,
        )
        self.observed_counter(
            "seglog.partition.isr.expands",
            "{change}",
            "ISR expansions of partitions this node leads, as the registry accepted them",
            lambda: isr_updates.expands,
        )
        if applier is not None:
            self.gauge(
                "seglog.metadata.applied_offset",
                "{offset}",
                "the registry's metadata offset whose partition states this node has applied",
                lambda: iter([Observation(applier.applied_offset)]),
            )
            self.gauge(
                "seglog.metadata.pending_partitions",
                "{partition}",
                "partition states received from the registry and not applied yet",
                lambda: iter([Observation(applier.pending_partitions)]),
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

    def snapshot(self) -> list[PartitionGauges]:
        """Every hosted partition's gauges, walked once per export."""
        with self._snapshot_lock:
            now = time.monotonic()
            if now - self._snapshot_at < SNAPSHOT_REUSE_S:
                return self._snapshot
            hosted = self.replicas.logs.logs()
            snapshot = []
            for tp, log in hosted.items():
                held = self.replicas.partition_if_hosted(*tp)
                if held is None:
                    continue  # no state from the registry yet: nothing it can vouch for
                attributes = self._attributes.get(tp)
                if attributes is None:
                    attributes = self._attributes[tp] = {TOPIC: tp[0], PARTITION: str(tp[1])}
                registration = held.registration
                led = held.is_leader and registration is not None
                lag = copy_lag(log) if led and log.config.remote_storage_enable else (-1, -1)
                snapshot.append(
                    PartitionGauges(
                        attributes,
                        log.size_in_bytes,
                        len(log.segments),
                        log.log_start_offset,
                        log.log_end_offset,
                        len(held.isr) if led else -1,
                        len(registration.replicas) if led and registration is not None else 0,
                        *lag,
                    )
                )
            for gone in self._attributes.keys() - hosted.keys():
                del self._attributes[gone]
            self._snapshot, self._snapshot_at = snapshot, time.monotonic()
            return snapshot

    def _each(self, field: str) -> Callable[[], Iterator[Observation]]:
        def observe() -> Iterator[Observation]:
            for gauges in self.snapshot():
                yield Observation(getattr(gauges, field), gauges.attributes)

        return observe

    def _led(
        self, value_of: Callable[[PartitionGauges], int]
    ) -> Callable[[], Iterator[Observation]]:
        def observe() -> Iterator[Observation]:
            for gauges in self.snapshot():
                if gauges.led_isr >= 0:
                    yield Observation(value_of(gauges), gauges.attributes)

        return observe

    def _tiered(
        self, value_of: Callable[[PartitionGauges], int]
    ) -> Callable[[], Iterator[Observation]]:
        def observe() -> Iterator[Observation]:
            for gauges in self.snapshot():
                if gauges.copy_lag_bytes >= 0:
                    yield Observation(value_of(gauges), gauges.attributes)

        return observe
