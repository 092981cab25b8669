"""The gateway's metrics (seglog/metrics.py has the names): request durations of Produce and
Fetch as clients see them, denied calls, and gauges read at each export: each registered
node's liveness, the partitions without a live leader (Kafka's OfflinePartitionsCount,
counted from the registry's per-leader index, nothing on a request's path), and each
group's lag per partition (the committed offset against the partition's high watermark,
asked of the leaders once per export), and the transactions this gateway coordinates, per
state, and those whose markers are still being written."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from opentelemetry.metrics import MeterProvider, Observation

from seglog.client.gateway import LATEST
from seglog.metrics import RequestMetrics
from seglog.semconv import GROUP, PARTITION, TOPIC
from seglog.v1 import common_pb2

from .cluster.registry import Registry
from .groups.offsets_store import OffsetsStore
from .transactions.transactions_core import TransactionsCore

# partitions -> their ListOffsets results (the gateway's fan-out to leaders)
ListOffsets = Callable[[list[common_pb2.ListOffsetsPartition]], list[common_pb2.ListOffsetsResult]]


class GatewayMetrics(RequestMetrics):
    def __init__(
        self,
        provider: MeterProvider | None,
        registry: Registry,
        offsets: OffsetsStore,
        list_offsets: ListOffsets,
        transactions: TransactionsCore | None = None,
    ) -> None:
        super().__init__(provider, "seglog.gateway")
        self.registry = registry
        self.offsets = offsets
        self.list_offsets = list_offsets
        self.transactions = transactions
        self._denied = self.counter(
            "seglog.authorization.denied", "{call}", "calls refused by the authorizer"
        )
        self.gauge(
            "seglog.registry.node.live",
            "{node}",
            "1 while a registered node's session is live",
            self._nodes,
        )
        self.gauge(
            "seglog.partitions.offline",
            "{partition}",
            "partitions with no leader or whose leader's session is not live",
            self._offline,
        )
        self.gauge(
            "seglog.consumer.lag",
            "{message}",
            "a group's committed offset behind the partition's high watermark",
            self._lag,
        )
        self.gauge(
            "seglog.transactions",
            "{transaction}",
            "transactional ids this gateway coordinates, per transaction state",
            self._transactions,
        )
        self.gauge(
            "seglog.transactions.markers.pending",
            "{transaction}",
            "transactions whose commit or abort markers are not all written yet",
            self._markers_pending,
        )

    def denied(self, operation: str, resource_type: str) -> None:
        if self._denied is not None:
            self._denied.add(
                1, {"seglog.operation": operation, "seglog.resource.type": resource_type}
            )

    def _nodes(self) -> Iterator[Observation]:
        for node_id in sorted(self.registry.addresses()):
            live = int(self.registry.is_live(node_id))
            yield Observation(live, {"seglog.node.id": str(node_id)})

    def _transactions(self) -> Iterator[Observation]:
        if self.transactions is None:
            return
        counts: dict[str, int] = {}
        for transactions in self.transactions.placement.loaded_partitions().values():
            for metadata in list(transactions.values()):
                name = metadata.state.kafka_name
                counts[name] = counts.get(name, 0) + 1
        for name, count in sorted(counts.items()):
            yield Observation(count, {"seglog.transaction.state": name})

    def _markers_pending(self) -> Iterator[Observation]:
        if self.transactions is not None:
            yield Observation(len(self.transactions.markers.pending_ids()))

    def _offline(self) -> Iterator[Observation]:
        yield Observation(self.registry.offline_partition_count())

    def _lag(self) -> Iterator[Observation]:
        committed = self.offsets.loaded_offsets()
        wanted = sorted({tp for offsets in committed.values() for tp in offsets})
        if not wanted:
            return
        request = [
            common_pb2.ListOffsetsPartition(topic=t, partition=p, timestamp=LATEST)
            for t, p in wanted
        ]
        ends = {(r.topic, r.partition): r.offset for r in self.list_offsets(request) if not r.error}
        for group, offsets in committed.items():
            for (topic, partition), found in offsets.items():
                end = ends.get((topic, partition))
                if end is not None:
                    yield Observation(
                        max(end - found.offset, 0),
                        {GROUP: group, TOPIC: topic, PARTITION: str(partition)},
                    )
