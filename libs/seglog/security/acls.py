"""Kafka's ACL model and its authorizer's decision (StandardAuthorizer's rules).

An ACL binds a principal (`User:<name>`, or `User:*` for everyone) and a host (`*`, or an
address) to an operation on a resource (topic, group or cluster; its name literal, or a
prefix) with a permission, allow or deny. A request is allowed when:
- its principal is a super user; else
- no DENY ACL matches it (deny wins); and
- an ALLOW ACL matches it, where an allowed Read, Write, Delete or Alter also allows Describe,
  and an allowed AlterConfigs also allows DescribeConfigs (Kafka's implied operations), and
  `All` matches every operation; else
- no ACL at all names the resource and `allow.everyone.if.no.acl.found` is set.

ACLs are kept indexed by resource type and name (literal) and by prefix, so one decision
looks at the few ACLs that can match, not at all of them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Any

from ..errors import InvalidRequestError

RESOURCE_TYPES = ("topic", "group", "cluster", "transactional_id")
PATTERN_TYPES = ("literal", "prefixed")
OPERATIONS = (
    "Read",
    "Write",
    "Create",
    "Delete",
    "Alter",
    "Describe",
    "DescribeConfigs",
    "AlterConfigs",
    "IdempotentWrite",
    "ClusterAction",
    "All",
)
PERMISSIONS = ("allow", "deny")
CLUSTER_NAME = "kafka-cluster"  # Kafka's name of the one cluster resource
WILDCARD = "*"
ANONYMOUS = "User:ANONYMOUS"
_IMPLIES = {
    "Describe": {"Read", "Write", "Delete", "Alter"},
    "DescribeConfigs": {"AlterConfigs"},
}


@dataclass(frozen=True)
class AclBinding:
    principal: str
    host: str
    resource_type: str
    pattern_type: str
    resource_name: str
    operation: str
    permission: str

    @classmethod
    def from_message(cls, message: Any) -> AclBinding:
        """From a message holding the binding's fields by the same names (the API's
        AclBinding, as DescribeAcls answers it)."""
        return cls(*(getattr(message, field.name) for field in fields(cls)))

    def check(self) -> AclBinding:
        """Every field valid (InvalidRequestError naming the first that is not)."""
        if not self.principal.startswith("User:") or len(self.principal) <= 5:
            raise InvalidRequestError(f"principal {self.principal!r}: expected User:<name>")
        for name, value, allowed in (
            ("resource type", self.resource_type, RESOURCE_TYPES),
            ("pattern type", self.pattern_type, PATTERN_TYPES),
            ("operation", self.operation, OPERATIONS),
            ("permission", self.permission, PERMISSIONS),
        ):
            if value not in allowed:
                raise InvalidRequestError(f"{name} {value!r}: expected one of {list(allowed)}")
        if not self.resource_name or not self.host:
            raise InvalidRequestError("an ACL needs a resource name and a host ('*' for any)")
        if self.resource_type == "cluster" and self.resource_name != CLUSTER_NAME:
            raise InvalidRequestError(f"the cluster resource is named {CLUSTER_NAME!r}")
        return self

    def to_json(self) -> dict[str, str]:
        return {
            "principal": self.principal,
            "host": self.host,
            "resource_type": self.resource_type,
            "pattern_type": self.pattern_type,
            "resource_name": self.resource_name,
            "operation": self.operation,
            "permission": self.permission,
        }


class Authorizer:
    def __init__(
        self,
        acls: Iterable[AclBinding] = (),
        *,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
    ) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._lock = threading.Lock()
        self._acls: set[AclBinding] = set()
        self._literal: dict[tuple[str, str], list[AclBinding]] = {}
        self._prefixed: dict[tuple[str, str], list[AclBinding]] = {}
        self.replace(acls)

    @property
    def acls(self) -> list[AclBinding]:
        with self._lock:
            return sorted(self._acls, key=lambda a: tuple(a.to_json().values()))

    def replace(self, acls: Iterable[AclBinding]) -> None:
        with self._lock:
            self._acls = set(acls)
            self._literal, self._prefixed = {}, {}
            for acl in self._acls:
                key = (acl.resource_type, acl.resource_name)
                if acl.pattern_type == "literal":
                    self._literal.setdefault(key, []).append(acl)
                else:
                    self._prefixed.setdefault(key, []).append(acl)

    def _matching(self, resource_type: str, name: str) -> list[AclBinding]:
        """The ACLs whose resource pattern covers this resource."""
        found = list(self._literal.get((resource_type, name), ()))
        found += self._literal.get((resource_type, WILDCARD), ())
        if self._prefixed:
            # One lookup per prefix length of the name (at most 249 for a topic), however
            # many prefixed ACLs there are.
            for length in range(1, len(name) + 1):
                found += self._prefixed.get((resource_type, name[:length]), ())
        return found

    def authorize(
        self, principal: str, host: str, operation: str, resource_type: str, name: str
    ) -> bool:
        if principal in self.super_users:
            return True
        with self._lock:
            acls = self._matching(resource_type, name)
        if not acls:
            return self.allow_everyone_if_no_acl_found
        applicable = [
            a for a in acls if a.principal in (principal, "User:*") and a.host in (host, WILDCARD)
        ]
        wanted = {operation, "All"} | _IMPLIES.get(operation, set())
        if any(a.permission == "deny" and a.operation in (operation, "All") for a in applicable):
            return False
        return any(a.permission == "allow" and a.operation in wanted for a in applicable)
