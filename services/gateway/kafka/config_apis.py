"""Kafka's DescribeConfigs (1-4), AlterConfigs (0-2) and IncrementalAlterConfigs (0-1) on the
core's TopicAdmin (cluster/topic_admin.py), which authorizes the call's caller:
DescribeConfigs / AlterConfigs on the topic, DescribeConfigs on the cluster for the broker
resource.

Resources: a TOPIC answers its configs with Kafka's sources (its override: a dynamic topic
config; its leader node's --config default: a static broker config; else Kafka's default).
A BROKER (the gateway: its broker id, or "" for the cluster's default) answers the gateway's
described settings, read-only, and the dynamic broker configs the registry keeps
(cluster/broker_configs.py: the replication throttles), which are all a BROKER alteration may
set; a GROUP answers and alters its dynamic group configs (cluster/group_configs.py: Kafka's
DYNAMIC_GROUP_CONFIG or DEFAULT_CONFIG); another resource type gets INVALID_REQUEST. Each
resource is answered on its own (one refused does not fail the others); a resource named
twice gets INVALID_REQUEST, as Kafka's.
AlterConfigs is the legacy whole-set form: the topic's overrides become exactly those given.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)

from seglog.errors import InvalidConfigError, InvalidRequestError, SeglogError
from seglog.storage import LogConfig
from seglog.storage.config import field_name
from seglog.storage.topic_config_values import (
    BROKER_SYNONYMS,
    INT_CONFIG_FIELDS,
    LIST_CONFIG_FIELDS,
)

from ..cluster.broker_configs import DYNAMIC_CONFIGS, BrokerConfigs
from ..cluster.group_configs import BY_NAME as GROUP_CONFIGS
from ..cluster.group_configs import DescribedGroupConfig
from ..cluster.topic_admin import ConfigChange, DescribedConfig
from .brokers import this_broker
from .error_codes import Resource, kafka_error_code

if TYPE_CHECKING:
    from .api_table import ApiTable
    from .kafka_call import KafkaCall

TOPIC = 2
BROKER = 4
GROUP = 32
# Kafka's ConfigSource.
DYNAMIC_TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
DYNAMIC_GROUP_CONFIG = 8
CONFIG_SOURCES = {
    "topic": DYNAMIC_TOPIC_CONFIG,
    "node": STATIC_BROKER_CONFIG,
    "gateway": STATIC_BROKER_CONFIG,
    "default": DEFAULT_CONFIG,
    "dynamic_broker": DYNAMIC_BROKER_CONFIG,
    "dynamic_default_broker": DYNAMIC_DEFAULT_BROKER_CONFIG,
}
# Kafka's ConfigType (DescribeConfigs 3+).
BOOLEAN, STRING, INT, LONG, DOUBLE, LIST = 1, 2, 3, 5, 6, 7
# IncrementalAlterConfigs' operations.
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def register(table: ApiTable) -> None:
    table.register(DescribeConfigsRequest, 1, 4, describe_configs)
    table.register(AlterConfigsRequest, 0, 2, alter_configs)
    table.register(IncrementalAlterConfigsRequest, 0, 1, incremental_alter_configs)


def _refused_as(resource: Any) -> Resource:
    """Whose AUTHORIZATION_FAILED a refused resource gets."""
    by_type: dict[int, Resource] = {BROKER: "cluster", GROUP: "group"}
    return by_type.get(resource.resource_type, "topic")


def _duplicates(resources: list[Any]) -> set[tuple[int, str]]:
    seen: set[tuple[int, str]] = set()
    twice: set[tuple[int, str]] = set()
    for r in resources:
        key = (r.resource_type, r.resource_name)
        (twice if key in seen else seen).add(key)
    return twice


def _config_types() -> dict[str, int]:
    """Kafka's ConfigType of each topic config, by its field's type."""
    out = {}
    for field in dataclasses.fields(LogConfig):
        if field.name in LIST_CONFIG_FIELDS:
            out[field.name] = LIST
        elif field.type in (bool, "bool"):
            out[field.name] = BOOLEAN
        elif field.type in (float, "float"):
            out[field.name] = DOUBLE
        elif field.type in (int, "int"):
            out[field.name] = INT if field.name in INT_CONFIG_FIELDS else LONG
        else:
            out[field.name] = STRING
    return out


CONFIG_TYPES = _config_types()


# -- DescribeConfigs ---------------------------------------------------------------------


def describe_configs(call: KafkaCall, request: Any) -> Any:
    twice = _duplicates(request.resources)
    results = []
    for resource in request.resources:
        try:
            if (resource.resource_type, resource.resource_name) in twice:
                raise InvalidRequestError(f"resource {resource.resource_name!r} named twice")
            wanted = resource.configuration_keys
            if resource.resource_type == GROUP:
                groups = call.core.groups.group_configs.describe(
                    call.caller, resource.resource_name
                )
                configs = [
                    _group_config(g, request.include_synonyms)
                    for g in groups
                    if wanted is None or g.name in set(wanted)
                ]
                results.append(_describe_result(resource, 0, None, configs))
                continue
            entries = _described(call, resource)
            if wanted is not None:
                entries = [e for e in entries if e[0] in set(wanted)]
            configs = [_config(call.version, e, request.include_synonyms) for e in entries]
            results.append(_describe_result(resource, 0, None, configs))
        except SeglogError as exc:
            code = kafka_error_code(exc, _refused_as(resource))
            results.append(_describe_result(resource, code, str(exc), []))
    return DescribeConfigsResponse[call.version](throttle_time_ms=0, results=results)


def _describe_result(resource: Any, code: int, message: str | None, configs: list[Any]) -> Any:
    return DescribeConfigsResponse.DescribeConfigsResult(
        error_code=code,
        error_message=message,
        resource_type=resource.resource_type,
        resource_name=resource.resource_name,
        configs=configs,
    )


def _described(call: KafkaCall, resource: Any) -> list[DescribedConfig]:
    topics = call.core.topics
    if resource.resource_type == TOPIC:
        (described,) = topics.describe_configs(call.caller, [resource.resource_name])
        if isinstance(described, SeglogError):
            raise described
        return described
    if resource.resource_type == BROKER:
        _check_broker(call, resource.resource_name)
        settings = topics.describe_cluster_configs(call.caller).gateway
        dynamic = _broker_configs(call).describe(call.caller, resource.resource_name)
        return [(name, value, "gateway") for name, value in settings] + [
            (c.name, c.value, c.source) for c in dynamic
        ]
    raise InvalidRequestError(
        f"resource type {resource.resource_type}: seglog describes topics (2), brokers (4) "
        "and groups (32)"
    )


def _broker_configs(call: KafkaCall) -> BrokerConfigs:
    return BrokerConfigs(call.core.registry, call.core.authorization)


def _check_broker(call: KafkaCall, name: str) -> None:
    """A broker resource names a broker Metadata lists (a node id: brokers.py), this
    gateway's own broker id, or "" (the cluster's default)."""
    if name in ("", str(this_broker(call.core).node_id)):
        return
    if not name.isdigit() or int(name) not in call.core.registry.addresses():
        raise InvalidRequestError(f"broker {name!r}: not a broker of this cluster (a node id)")


def _config(version: int, entry: DescribedConfig, synonyms: bool) -> Any:
    config_class = DescribeConfigsResponse.DescribeConfigsResult.DescribeConfigsResourceResult
    name, value, origin = entry
    source = CONFIG_SOURCES.get(origin, 0)
    described = config_class(
        name=name,
        value=value,
        read_only=origin == "gateway",
        config_source=source,
        is_sensitive=False,
        synonyms=[],
        config_type=LONG if name in DYNAMIC_CONFIGS else CONFIG_TYPES.get(field_name(name), STRING),
        documentation=None,
    )
    if synonyms:
        # A default or a node's value is named by its broker config, as Kafka names it
        # (`log.cleanup.policy`); a default with no broker config has no synonym.
        synonym = name
        if origin in ("node", "default"):
            synonym = BROKER_SYNONYMS.get(name, "")
        described.synonyms = [
            config_class.DescribeConfigsSynonym(name=synonym, value=value, source=source)
        ][: 1 if synonym else 0]
    return described


_GROUP_CONFIG_TYPES = {"int": INT, "string": STRING, "boolean": BOOLEAN}


def _group_config(entry: DescribedGroupConfig, synonyms: bool) -> Any:
    """As Kafka's createGroupConfigEntry: the group's own value is DYNAMIC_GROUP_CONFIG, a
    default DEFAULT_CONFIG; its synonyms the group's value then the broker config giving
    the default."""
    config_class = DescribeConfigsResponse.DescribeConfigsResult.DescribeConfigsResourceResult
    source = DYNAMIC_GROUP_CONFIG if entry.source == "group" else DEFAULT_CONFIG
    described = config_class(
        name=entry.name,
        value=entry.value,
        read_only=False,
        config_source=source,
        is_sensitive=False,
        synonyms=[],
        config_type=_GROUP_CONFIG_TYPES[GROUP_CONFIGS[entry.name].kind],
        documentation=None,
    )
    if synonyms:
        own = [(entry.name, entry.value, DYNAMIC_GROUP_CONFIG)] if entry.source == "group" else []
        described.synonyms = [
            config_class.DescribeConfigsSynonym(name=name, value=value, source=kind)
            for name, value, kind in [*own, (entry.broker_name, entry.default, DEFAULT_CONFIG)]
        ]
    return described


# -- AlterConfigs and IncrementalAlterConfigs --------------------------------------------


def _alter_each(
    call: KafkaCall,
    resources: list[Any],
    alter_topic: Callable[[Any], ConfigChange],
    result_class: Any,
    alter_broker: Callable[[Any], None],
    validate_only: bool,
    alter_group: Callable[[Any], None],
) -> list[Any]:
    twice = _duplicates(resources)
    results = []
    for resource in resources:
        code, message = 0, None
        try:
            if (resource.resource_type, resource.resource_name) in twice:
                raise InvalidRequestError(f"resource {resource.resource_name!r} named twice")
            if resource.resource_type == BROKER:
                _check_broker(call, resource.resource_name)
                alter_broker(resource)
            elif resource.resource_type == GROUP:
                alter_group(resource)
            elif resource.resource_type == TOPIC:
                change = alter_topic(resource)
                call.core.topics.alter_configs(call.caller, change, validate_only=validate_only)
            else:
                raise InvalidRequestError(
                    f"resource type {resource.resource_type}: only topic (2), broker (4) and "
                    "group (32) configs can be altered"
                )
        except SeglogError as exc:
            code, message = kafka_error_code(exc, _refused_as(resource)), str(exc)
        results.append(result_class(error_code=code, error_message=message, **_named(resource)))
    return results


def _named(resource: Any) -> dict[str, Any]:
    return {"resource_type": resource.resource_type, "resource_name": resource.resource_name}


def alter_configs(call: KafkaCall, request: Any) -> Any:
    def whole_set(resource: Any) -> ConfigChange:
        given = {c.name: c.value for c in resource.configs if c.value is not None}
        try:
            current = call.core.registry.topic(resource.resource_name).configs
        except SeglogError:
            current = {}  # the call below answers why (refused, or no such topic)
        wanted = {field_name(k) for k in given}
        return ConfigChange(
            resource.resource_name,
            set=given,
            delete=[k for k in current if field_name(k) not in wanted],
        )

    def whole_broker_set(resource: Any) -> None:
        given = {c.name: c.value for c in resource.configs if c.value is not None}
        _broker_configs(call).alter(
            call.caller,
            resource.resource_name,
            given,
            replace=True,
            validate_only=request.validate_only,
        )

    def whole_group_set(resource: Any) -> None:
        given = {c.name: c.value for c in resource.configs if c.value is not None}
        call.core.groups.group_configs.alter(
            call.caller,
            resource.resource_name,
            given,
            replace=True,
            validate_only=request.validate_only,
        )

    results = _alter_each(
        call,
        request.resources,
        whole_set,
        AlterConfigsResponse.AlterConfigsResourceResponse,
        whole_broker_set,
        request.validate_only,
        whole_group_set,
    )
    return AlterConfigsResponse[call.version](throttle_time_ms=0, responses=results)


def incremental_alter_configs(call: KafkaCall, request: Any) -> Any:
    def operations(resource: Any) -> ConfigChange:
        named = [field_name(c.name) for c in resource.configs]
        if len(set(named)) != len(named):
            raise InvalidRequestError("a config is named twice in one resource")
        delete: list[str] = []
        by_operation: dict[int, dict[str, str]] = {SET: {}, APPEND: {}, SUBTRACT: {}}
        for config in resource.configs:
            operation = config.config_operation
            if operation == DELETE:
                delete.append(config.name)
                continue
            if config.value is None:
                raise InvalidRequestError(f"{config.name}: a null value needs DELETE")
            if operation not in by_operation:
                raise InvalidRequestError(f"{config.name}: unknown config operation {operation}")
            by_operation[operation][config.name] = config.value
        return ConfigChange(
            resource.resource_name,
            set=by_operation[SET],
            delete=delete,
            append=by_operation[APPEND],
            subtract=by_operation[SUBTRACT],
        )

    def group_operations(resource: Any) -> None:
        altered = operations(resource)
        for verb, names in (("append", altered.append), ("subtract", altered.subtract)):
            for name in names:  # Kafka's: group configs are not lists
                raise InvalidConfigError(
                    f"Config value {verb} is not allowed for config key: {name}"
                )
        call.core.groups.group_configs.alter(
            call.caller,
            resource.resource_name,
            dict(altered.set),
            altered.delete,
            validate_only=request.validate_only,
        )

    def broker_operations(resource: Any) -> None:
        altered = operations(resource)
        if altered.append or altered.subtract:
            raise InvalidConfigError("broker configs are not lists: APPEND/SUBTRACT do not apply")
        _broker_configs(call).alter(
            call.caller,
            resource.resource_name,
            dict(altered.set),
            altered.delete,
            validate_only=request.validate_only,
        )

    results = _alter_each(
        call,
        request.resources,
        operations,
        IncrementalAlterConfigsResponse.AlterConfigsResourceResponse,
        broker_operations,
        request.validate_only,
        group_operations,
    )
    return IncrementalAlterConfigsResponse[call.version](throttle_time_ms=0, responses=results)
