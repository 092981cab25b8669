"""Kafka's DescribeAcls, CreateAcls and DeleteAcls (versions 1-3) over the core's AclAdmin
(cluster/acl_admin.py), which authorizes the call's caller: Describe on the cluster to list,
Alter on the cluster to create and delete.

Kafka's numeric enums map onto seglog's ACL model (security/acls.py): resource types TOPIC,
GROUP and CLUSTER (seglog authorizes no transactional ids or delegation tokens: a binding
naming one is refused with INVALID_REQUEST), pattern types LITERAL and PREFIXED, permission
ALLOW and DENY, and the operations seglog checks. Filters (DescribeAcls, DeleteAcls) follow
Kafka's AclBindingFilter: ANY matches every value, a null name, principal or host matches
any, and the MATCH pattern type matches what could apply to the named resource: the literal
name, the literal wildcard `*`, and every prefix of it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from kafka.protocol.admin import (
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ACLResourceType,
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
)

from seglog.errors import InvalidRequestError, SeglogError
from seglog.security.acls import WILDCARD, AclBinding

from .error_codes import kafka_error_code

if TYPE_CHECKING:
    from .api_table import ApiTable
    from .kafka_call import KafkaCall

RESOURCE_TYPES = {
    ACLResourceType.TOPIC: "topic",
    ACLResourceType.GROUP: "group",
    ACLResourceType.CLUSTER: "cluster",
    ACLResourceType.TRANSACTIONAL_ID: "transactional_id",
}
PATTERN_TYPES = {
    ACLResourcePatternType.LITERAL: "literal",
    ACLResourcePatternType.PREFIXED: "prefixed",
}
OPERATIONS = {
    ACLOperation.ALL: "All",
    ACLOperation.READ: "Read",
    ACLOperation.WRITE: "Write",
    ACLOperation.CREATE: "Create",
    ACLOperation.DELETE: "Delete",
    ACLOperation.ALTER: "Alter",
    ACLOperation.DESCRIBE: "Describe",
    ACLOperation.CLUSTER_ACTION: "ClusterAction",
    ACLOperation.DESCRIBE_CONFIGS: "DescribeConfigs",
    ACLOperation.ALTER_CONFIGS: "AlterConfigs",
    ACLOperation.IDEMPOTENT_WRITE: "IdempotentWrite",
}
PERMISSIONS = {ACLPermissionType.ALLOW: "allow", ACLPermissionType.DENY: "deny"}
# The reverse maps, for answers.
_RESOURCE_CODES = {v: int(k) for k, v in RESOURCE_TYPES.items()}
_PATTERN_CODES = {v: int(k) for k, v in PATTERN_TYPES.items()}
_OPERATION_CODES = {v: int(k) for k, v in OPERATIONS.items()}
_PERMISSION_CODES = {v: int(k) for k, v in PERMISSIONS.items()}
ANY = 1  # every Kafka ACL enum's ANY (filters only)
MIN_VERSION = 1  # version 0 has no pattern type (every ACL literal); clients send 1+
MAX_VERSION = 3


def register(table: ApiTable) -> None:
    table.register(DescribeAclsRequest, MIN_VERSION, MAX_VERSION, describe_acls)
    table.register(CreateAclsRequest, MIN_VERSION, MAX_VERSION, create_acls)
    table.register(DeleteAclsRequest, MIN_VERSION, MAX_VERSION, delete_acls)


def _named(table: dict[Any, str], code: int, what: str) -> str:
    try:
        return table[code]
    except KeyError:
        raise InvalidRequestError(
            f"{what} {code} is not one seglog authorizes; expected one of "
            f"{sorted(int(k) for k in table)}"
        ) from None


def binding_of(creation: Any) -> AclBinding:
    """A CreateAcls creation as seglog's binding, checked (InvalidRequestError)."""
    return AclBinding(
        creation.principal,
        creation.host,
        _named(RESOURCE_TYPES, creation.resource_type, "resource type"),
        _named(PATTERN_TYPES, creation.resource_pattern_type, "pattern type"),
        creation.resource_name,
        _named(OPERATIONS, creation.operation, "operation"),
        _named(PERMISSIONS, creation.permission_type, "permission type"),
    ).check()


def _filter_value(table: dict[Any, str], enum: type[IntEnum], code: int) -> str | None:
    """A filter field as seglog's name: None (anything) for ANY; for a value Kafka has but
    seglog keeps no ACL with (a transactional id, CREATE_TOKENS) a name no ACL has, so the
    filter matches nothing, as Kafka's would; UNKNOWN or no value at all: INVALID_REQUEST."""
    if code == ANY:
        return None
    if code in table:
        return table[code]
    try:
        name = enum(code).name
    except ValueError:
        name = "UNKNOWN"
    if name == "UNKNOWN":
        raise InvalidRequestError(f"{enum.__name__} {code} cannot be filtered on")
    return f"<{name}>"


class AclFilter:
    """Kafka's AclBindingFilter over seglog's bindings (DescribeAcls' request, or one of
    DeleteAcls' filters)."""

    def __init__(self, request: Any) -> None:
        self.resource_type = _filter_value(
            RESOURCE_TYPES, ACLResourceType, request.resource_type_filter
        )
        pattern = request.pattern_type_filter
        self.match_pattern = pattern == ACLResourcePatternType.MATCH
        self.pattern_type = (
            None
            if self.match_pattern
            else _filter_value(PATTERN_TYPES, ACLResourcePatternType, pattern)
        )
        self.operation = _filter_value(OPERATIONS, ACLOperation, request.operation)
        self.permission = _filter_value(PERMISSIONS, ACLPermissionType, request.permission_type)
        self.name: str | None = request.resource_name_filter
        self.principal: str | None = request.principal_filter
        self.host: str | None = request.host_filter

    def matches(self, acl: AclBinding) -> bool:
        return (
            self.resource_type in (None, acl.resource_type)
            and self.operation in (None, acl.operation)
            and self.permission in (None, acl.permission)
            and self.principal in (None, acl.principal)
            and self.host in (None, acl.host)
            and self._matches_resource(acl)
        )

    def _matches_resource(self, acl: AclBinding) -> bool:
        if self.pattern_type is not None and acl.pattern_type != self.pattern_type:
            return False
        if self.name is None:
            return True
        if not self.match_pattern:
            return acl.resource_name == self.name
        if acl.pattern_type == "prefixed":
            return self.name.startswith(acl.resource_name)
        return acl.resource_name in (self.name, WILDCARD)


def describe_acls(call: KafkaCall, request: Any) -> Any:
    response_class = DescribeAclsResponse[call.version]
    try:
        found = call.core.acls.describe(call.caller, AclFilter(request).matches)
    except SeglogError as exc:
        return response_class(
            throttle_time_ms=0,
            error_code=kafka_error_code(exc, "cluster"),
            error_message=str(exc),
            resources=[],
        )
    by_resource: dict[tuple[str, str, str], list[AclBinding]] = {}
    for acl in sorted(found, key=dataclasses.astuple):
        key = (acl.resource_type, acl.resource_name, acl.pattern_type)
        by_resource.setdefault(key, []).append(acl)
    resources = [
        DescribeAclsResponse.DescribeAclsResource(
            resource_type=_RESOURCE_CODES[kind],
            resource_name=name,
            pattern_type=_PATTERN_CODES[pattern],
            acls=[
                DescribeAclsResponse.DescribeAclsResource.AclDescription(
                    principal=acl.principal,
                    host=acl.host,
                    operation=_OPERATION_CODES[acl.operation],
                    permission_type=_PERMISSION_CODES[acl.permission],
                )
                for acl in acls
            ],
        )
        for (kind, name, pattern), acls in by_resource.items()
    ]
    return response_class(throttle_time_ms=0, error_code=0, error_message=None, resources=resources)


def create_acls(call: KafkaCall, request: Any) -> Any:
    """Each creation checked on its own (a bad one gets its error, the others are created),
    then the good ones created together."""
    results: list[tuple[int, str | None]] = []
    valid: list[AclBinding] = []
    for creation in request.creations:
        try:
            valid.append(binding_of(creation))
            results.append((0, None))
        except SeglogError as exc:
            results.append((kafka_error_code(exc, "cluster"), str(exc)))
    if valid:
        try:
            call.core.acls.create(call.caller, valid)
        except SeglogError as exc:
            failed = (kafka_error_code(exc, "cluster"), str(exc))
            results = [failed if code == 0 else (code, m) for code, m in results]
    return CreateAclsResponse[call.version](
        throttle_time_ms=0,
        results=[
            CreateAclsResponse.AclCreationResult(error_code=code, error_message=message)
            for code, message in results
        ],
    )


def delete_acls(call: KafkaCall, request: Any) -> Any:
    """Every filter's matches deleted in one change; each filter answers what it matched."""
    response_class = DeleteAclsResponse[call.version]
    filter_class = DeleteAclsResponse.DeleteAclsFilterResult
    # A filter that cannot be read answers its own error; the others are deleted together.
    filters: list[AclFilter | SeglogError] = []
    for wanted in request.filters:
        try:
            filters.append(AclFilter(wanted))
        except SeglogError as exc:
            filters.append(exc)
    readable = [f for f in filters if isinstance(f, AclFilter)]
    matched: list[list[AclBinding] | SeglogError]
    try:
        deleted = iter(call.core.acls.delete(call.caller, [f.matches for f in readable]))
        matched = [f if isinstance(f, SeglogError) else next(deleted) for f in filters]
    except SeglogError as exc:
        matched = [exc] * len(request.filters)
    results = []
    for found in matched:
        if isinstance(found, SeglogError):
            results.append(
                filter_class(
                    error_code=kafka_error_code(found, "cluster"),
                    error_message=str(found),
                    matching_acls=[],
                )
            )
            continue
        results.append(
            filter_class(error_code=0, error_message=None, matching_acls=_matching(found))
        )
    return response_class(throttle_time_ms=0, filter_results=results)


def _matching(acls: Iterable[AclBinding]) -> list[Any]:
    matching_class = DeleteAclsResponse.DeleteAclsFilterResult.DeleteAclsMatchingAcl
    return [
        matching_class(
            error_code=0,
            error_message=None,
            resource_type=_RESOURCE_CODES[acl.resource_type],
            resource_name=acl.resource_name,
            pattern_type=_PATTERN_CODES[acl.pattern_type],
            principal=acl.principal,
            host=acl.host,
            operation=_OPERATION_CODES[acl.operation],
            permission_type=_PERMISSION_CODES[acl.permission],
        )
        for acl in acls
    ]
