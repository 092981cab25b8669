"""ListConfigResources 0–1 (KIP-1142; v0 was KIP-714's ListClientMetricsResources): the
resources that have configs, which `kafka-client-metrics --list` asks for its client metrics
subscriptions. seglog keeps no client metrics subscriptions (it does not collect client
telemetry: GetTelemetrySubscriptions is not advertised, and Java clients then turn their
telemetry off without a word), so that list is empty.

v1 names the types wanted (none: every type): topics (2) list the cluster's topics, brokers
(4) and broker loggers (8) this gateway's broker id, client metrics (16) and groups (32)
nothing (no subscriptions, no group configs); another type is INVALID_REQUEST. Describe
configs on the cluster is needed (CLUSTER_AUTHORIZATION_FAILED otherwise), as Kafka's broker
asks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafka.protocol.admin import ListConfigResourcesRequest, ListConfigResourcesResponse

from seglog.errors import PermissionDeniedError

from .brokers import this_broker
from .error_codes import CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST, NONE

if TYPE_CHECKING:
    from ..server import Gateway
    from .api_table import ApiTable
    from .kafka_call import KafkaCall

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
TYPES = (TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP)
CLUSTER = ("cluster", "kafka-cluster")


def register(table: ApiTable, gateway: Gateway) -> None:
    def list_config_resources(call: KafkaCall, request: Any) -> Any:
        return _list(gateway, call, request)

    table.register(ListConfigResourcesRequest, 0, 1, list_config_resources)


def _names(gateway: Gateway, kind: int) -> list[str]:
    if kind == TOPIC:
        return sorted(gateway.registry.topics)
    if kind in (BROKER, BROKER_LOGGER):
        return [str(this_broker(gateway).node_id)]
    return []  # CLIENT_METRICS, GROUP: none kept


def _list(gateway: Gateway, call: KafkaCall, request: Any) -> Any:
    response_class = ListConfigResourcesResponse[call.version]
    try:
        gateway.authorization.check(
            call.caller, [("DescribeConfigs", *CLUSTER)], "ListConfigResources"
        )
    except PermissionDeniedError:
        return response_class(
            throttle_time_ms=0, error_code=CLUSTER_AUTHORIZATION_FAILED, config_resources=[]
        )
    wanted = [CLIENT_METRICS] if call.version == 0 else list(request.resource_types or TYPES)
    if any(kind not in TYPES for kind in wanted):
        return response_class(throttle_time_ms=0, error_code=INVALID_REQUEST, config_resources=[])
    resources = [
        response_class.ConfigResource(resource_name=name, resource_type=kind)
        for kind in dict.fromkeys(wanted)
        for name in _names(gateway, kind)
    ]
    return response_class(throttle_time_ms=0, error_code=NONE, config_resources=resources)
