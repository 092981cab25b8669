"""WriteTxnMarkers 1–2 (Kafka's API 27) over the transactions core's marker calls
(transactions/marker_calls.py): what `kafka-transactions abort` sends a partition's leader.
Every marker's partitions are answered, each with its leader's outcome; a caller without
ClusterAction gets CLUSTER_AUTHORIZATION_FAILED on every partition, as Kafka's broker
answers. The timeout is Kafka's request.timeout.ms for marker requests (30 s)."""

from __future__ import annotations

from typing import Any

from kafka.protocol.producer import WriteTxnMarkersRequest, WriteTxnMarkersResponse

from seglog.errors import SeglogError

from ..transactions.markers import MARKER_TIMEOUT_MS, Completion
from .api_table import ApiTable
from .error_codes import NONE, kafka_error_code
from .error_table import DataApi, data_error_code
from .kafka_call import KafkaCall


def _code(error: SeglogError | None) -> int:
    return NONE if error is None else data_error_code(DataApi.PRODUCE, error)


def write_txn_markers(call: KafkaCall, request: Any) -> Any:
    response_class = WriteTxnMarkersResponse[call.version]
    result_class = response_class.WritableTxnMarkerResult
    topic_class = result_class.WritableTxnMarkerTopicResult
    partition_class = topic_class.WritableTxnMarkerPartitionResult
    markers = [
        Completion(
            "",
            marker.producer_id,
            marker.producer_epoch,
            bool(marker.transaction_result),
            marker.coordinator_epoch,
            frozenset((t.name, p) for t in marker.topics for p in t.partition_indexes),
        )
        for marker in request.markers
    ]
    try:
        outcomes = call.core.transactions.marker_calls.write(
            call.caller, markers, MARKER_TIMEOUT_MS
        )
        codes = [
            {
                tp: NONE if error is None else data_error_code(DataApi.PRODUCE, error)
                for tp, error in o.items()
            }
            for o in outcomes
        ]
    except SeglogError as exc:
        code = kafka_error_code(exc, "cluster")
        codes = [{tp: code for tp in marker.partitions} for marker in markers]
    results = []
    for marker, marker_codes in zip(markers, codes, strict=True):
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), code in sorted(marker_codes.items()):
            by_topic.setdefault(topic, []).append(
                partition_class(partition_index=partition, error_code=code)
            )
        results.append(
            result_class(
                producer_id=marker.producer_id,
                topics=[topic_class(name=t, partitions=ps) for t, ps in by_topic.items()],
            )
        )
    return response_class(markers=results)


def register(table: ApiTable) -> None:
    table.register(WriteTxnMarkersRequest, 1, 2, write_txn_markers)
