"""ListConfigResources 0–1 (KIP-1142; v0 was KIP-714's ListClientMetricsResources): the
resources that have configs, which `kafka-client-metrics --list` asks for its client metrics
subscriptions. seglog keeps no client metrics subscriptions (it does not collect client
telemetry: GetTelemetrySubscriptions is not advertised, and Java clients then turn their
telemetry off without a word), so that list is empty.

v1 names the types wanted (none: every type): topics (2) list the cluster's topics, brokers
(4) and broker loggers (8) this gateway's broker id, groups (32) the groups with dynamic
configs (cluster/group_configs.py), client metrics (16) nothing (no subscriptions); another
type is INVALID_REQUEST. Describe
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
    from .api_table import ApiTable
    from .core import KafkaCore
    from .kafka_call import KafkaCall

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
TYPES = (TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP)
CLUSTER = ("cluster", "kafka-cluster")


def register(table: ApiTable) -> None:
    def list_config_resources(call: KafkaCall, request: Any) -> Any:
        return _list(call.core, call, request)

    table.register(ListConfigResourcesRequest, 0, 1, list_config_resources)


def _names(core: KafkaCore, kind: int) -> list[str]:
    if kind == TOPIC:
        return sorted(core.registry.topics)
    if kind in (BROKER, BROKER_LOGGER):
        return [str(this_broker(core).node_id)]
    if kind == GROUP:
        return sorted(core.registry.group_configs)
    return []  # CLIENT_METRICS: none kept


def _list(core: KafkaCore, call: KafkaCall, request: Any) -> Any:
    response_class = ListConfigResourcesResponse[call.version]
    try:
        core.authorization.check(
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
        for name in _names(core, kind)
    ]
    return response_class(throttle_time_ms=0, error_code=NONE, config_resources=resources)
