"""IncrementalAlterConfigs' replication throttles (Kafka's names, as kafka-reassign-partitions
sets and clears them), taken out of a request's resources for the broker core's
ReplicationThrottles (cluster/replication_throttles.py): broker resources (a node id, as
Metadata lists brokers) carry only throttle rates, and a topic's throttled-replica lists are
kept beside its other configs, which go to the admin as before."""

from __future__ import annotations

from typing import Any, Literal

from seglog.errors import InvalidRequestError
from seglog.v1 import gateway_pb2

from ..cluster.replication_throttles import ConfigChange, ReplicationThrottles
from .kafka_call import KafkaCall

TOPIC = 2
BROKER = 4
SET, DELETE = 0, 1


def _changes(resource: Any, kind: Literal["broker", "topic"]) -> list[ConfigChange]:
    changes = []
    for config in resource.configs:
        if not ReplicationThrottles.is_throttle(kind, config.name):
            continue
        if config.config_operation == DELETE:
            changes.append(ConfigChange(config.name, None))
        elif config.config_operation == SET and config.value is not None:
            changes.append(ConfigChange(config.name, config.value))
        else:
            raise InvalidRequestError(
                f"{config.name}: only SET (with a value) and DELETE apply to a throttle"
            )
    return changes


def broker_node_id(call: KafkaCall, name: str) -> int:
    """The node a broker resource names (its id as Metadata lists it)."""
    if not name.isdigit() or int(name) not in call.gateway.registry.addresses():
        raise InvalidRequestError(
            f"broker {name!r}: not a broker of this cluster (the storage node ids)"
        )
    return int(name)


def check(call: KafkaCall, resource: Any) -> bool:
    """A resource's throttles checked (SeglogError if refused; nothing changed); True when
    they are all it holds, so the admin has nothing to do for it."""
    throttles = call.gateway.replication_throttles
    if resource.resource_type == BROKER:
        broker_node_id(call, resource.resource_name)
        throttles.check_broker(call.caller, _all_broker_changes(resource))
        return True
    if resource.resource_type != TOPIC:
        return False
    changes = _changes(resource, "topic")
    if changes:
        throttles.check_topic(call.caller, resource.resource_name, changes)
    return bool(resource.configs) and len(changes) == len(resource.configs)


def apply(call: KafkaCall, resource: Any) -> None:
    """The resource's throttles applied (after `check`, and after the admin took the rest)."""
    throttles = call.gateway.replication_throttles
    if resource.resource_type == BROKER:
        node_id = broker_node_id(call, resource.resource_name)
        throttles.alter_broker(call.caller, node_id, _all_broker_changes(resource))
    elif resource.resource_type == TOPIC:
        changes = _changes(resource, "topic")
        if changes:
            throttles.alter_topic(call.caller, resource.resource_name, changes)


def _all_broker_changes(resource: Any) -> list[ConfigChange]:
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
    """The throttles set on a resource, for DescribeConfigs: a broker's as dynamic broker
    configs, a topic's as its overrides (Kafka's sources for them)."""
    throttles = call.gateway.replication_throttles
    if resource.resource_type == BROKER and resource.resource_name.isdigit():
        configs = throttles.broker_configs(int(resource.resource_name))
        source = "dynamic_broker"
    elif resource.resource_type == TOPIC:
        configs, source = throttles.topic_configs(resource.resource_name), "topic"
    else:
        return []
    return [gateway_pb2.ConfigEntry(name=k, value=v, source=source) for k, v in configs.items()]


def is_throttle(resource: Any, name: str) -> bool:
    return resource.resource_type == TOPIC and ReplicationThrottles.is_throttle("topic", name)
