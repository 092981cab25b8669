"""Kafka's ACL administration as the broker core does it: bindings kept durably in the
registry (which hands every change to the authorizer), typed, for any caller. The gRPC
AclService and the Kafka listener's ACL APIs are adapters over `AclAdmin`.

Who may call: Kafka's rule, checked here: Describe on the cluster to list, Alter on it to
create or delete (Kafka's DeleteAcls needs Alter alone, though it answers what it matched).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from seglog.security.acls import AclBinding

from ..authorization import CLUSTER, Authorization
from ..broker.caller import Caller
from .registry import Registry

AclMatch = Callable[[AclBinding], bool]


class AclAdmin:
    def __init__(self, registry: Registry, authorization: Authorization) -> None:
        self.registry = registry
        self.authorization = authorization

    def describe(self, caller: Caller, matches: AclMatch | None = None) -> list[AclBinding]:
        """Every binding `matches` accepts (all without one), in the registry's order."""
        self.authorization.check(caller, [("Describe", *CLUSTER)], "DescribeAcls")
        return [acl for acl in self.registry.acls if matches is None or matches(acl)]

    def create(self, caller: Caller, bindings: Sequence[AclBinding]) -> None:
        """All checked (InvalidRequestError), then created in one change."""
        self.authorization.check(caller, [("Alter", *CLUSTER)], "CreateAcls")
        self.registry.add_acls(list(bindings))

    def delete(self, caller: Caller, filters: Sequence[AclMatch]) -> list[list[AclBinding]]:
        """Every binding some filter matches, deleted in one change; each filter's matches."""
        self.authorization.check(caller, [("Alter", *CLUSTER)], "DeleteAcls")
        existing = list(self.registry.acls)
        matched = [[acl for acl in existing if wanted(acl)] for wanted in filters]
        doomed = {acl for found in matched for acl in found}
        if doomed:
            self.registry.delete_acls(list(doomed))
        return matched
