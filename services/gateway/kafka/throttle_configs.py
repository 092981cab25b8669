"""IncrementalAlterConfigs' broker resources: Kafka's replication throttle rates (as
kafka-reassign-partitions sets and clears them on the broker ids of a move, node ids here) for
the ReplicationThrottles (cluster/replication_throttles.py); and DescribeConfigs' answer for
them. A topic's throttled-replica lists are topic configs like any other (the admin's)."""

from __future__ import annotations

from typing import Any

from seglog.errors import InvalidRequestError
from seglog.v1 import gateway_pb2

from ..cluster.replication_throttles import ConfigChange
from .kafka_call import KafkaCall

BROKER = 4
SET, DELETE = 0, 1


def broker_node_id(call: KafkaCall, name: str) -> int:
    """The node a broker resource names (its id as Metadata lists it)."""
    if not name.isdigit() or int(name) not in call.gateway.registry.addresses():
        raise InvalidRequestError(
            f"broker {name!r}: not a broker of this cluster (the storage node ids)"
        )
    return int(name)


def check(call: KafkaCall, resource: Any) -> bool:
    """A broker resource's changes checked (SeglogError if refused; nothing changed); True
    when the resource is one (the admin has nothing to do for it)."""
    if resource.resource_type != BROKER:
        return False
    broker_node_id(call, resource.resource_name)
    call.gateway.replication_throttles.check_broker(call.caller, _changes(resource))
    return True


def apply(call: KafkaCall, resource: Any) -> None:
    """A broker resource's changes applied (after `check`)."""
    if resource.resource_type == BROKER:
        node_id = broker_node_id(call, resource.resource_name)
        call.gateway.replication_throttles.alter_broker(call.caller, node_id, _changes(resource))


def _changes(resource: Any) -> list[ConfigChange]:
    """Every config of a broker resource as a change (a non-throttle one is refused by the
    core's check: seglog's broker settings are static)."""
    changes = []
    for config in resource.configs:
        value = None if config.config_operation == DELETE else config.value
        if config.config_operation not in (SET, DELETE) or (
            config.config_operation == SET and value is None
        ):
            raise InvalidRequestError(
                f"{config.name}: only SET (with a value) and DELETE apply to a broker config"
            )
        changes.append(ConfigChange(config.name, value))
    return changes


def described(call: KafkaCall, resource: Any) -> list[gateway_pb2.ConfigEntry]:
    """The throttle rates set on a broker resource, as dynamic broker configs (Kafka's source
    for them), for DescribeConfigs."""
    if resource.resource_type != BROKER or not resource.resource_name.isdigit():
        return []
    configs = call.gateway.replication_throttles.broker_configs(int(resource.resource_name))
    return [
        gateway_pb2.ConfigEntry(name=k, value=v, source="dynamic_broker")
        for k, v in configs.items()
    ]
