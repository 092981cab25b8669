"""Running a test module's cluster twice, authorizer off and on, so a path that only
production takes (the authorizer is on there) cannot break unseen.

With the authorizer on, the tests' callers stay who they are on a plaintext cluster —
`User:ANONYMOUS` on gRPC and on the Kafka listener alike, not a super user — and the module
names the ACLs its tests need (`Grant`s), which are put in place as an operator would before
any client calls (the registry's own ACL store, as a super user's CreateAcls would)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seglog.security.acls import ANONYMOUS, CLUSTER_NAME, WILDCARD, AclBinding
from tests.cluster import LocalCluster

AUTHORIZER_MODES = ("authorizer-off", "authorizer-on")


@dataclass(frozen=True)
class Grant:
    """Operations allowed to the tests' principal on one resource (`*`: every name)."""

    resource_type: str
    operations: Sequence[str]
    name: str = WILDCARD

    def bindings(self, principal: str) -> list[AclBinding]:
        name = CLUSTER_NAME if self.resource_type == "cluster" else self.name
        return [
            AclBinding(principal, "*", self.resource_type, "literal", name, operation, "allow")
            for operation in self.operations
        ]


# What the group and offset tests do: create and use topics, join, commit, fetch, describe,
# list and delete groups and their offsets, with idempotent producers.
GROUP_GRANTS = (
    Grant("topic", ("Create", "Write", "Read", "Describe")),
    Grant("group", ("Read", "Describe", "Delete")),
    Grant("cluster", ("Describe", "IdempotentWrite")),
)


def authorizer_on(mode: str) -> bool:
    if mode not in AUTHORIZER_MODES:
        raise ValueError(f"unknown authorizer mode {mode!r}")
    return mode == "authorizer-on"


def cluster_in_mode(
    root: Path, mode: str, grants: Iterable[Grant], **cluster_settings: Any
) -> LocalCluster:
    """A LocalCluster with the authorizer off, or on with exactly `grants` for the tests'
    principal (and no super user)."""
    on = authorizer_on(mode)
    cluster = LocalCluster(root, **({"authorizer": True} if on else {}), **cluster_settings)
    if on:
        assert cluster.gateway is not None
        cluster.gateway.registry.add_acls(
            [binding for grant in grants for binding in grant.bindings(ANONYMOUS)]
        )
    return cluster
