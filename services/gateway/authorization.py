"""Authorization at the gateway: the broker core checks each call's `Caller` per resource
against the ACLs (security/acls.py) before any work, when the authorizer is on
(`--authorizer`): `check` to refuse, `allows` to leave out what the caller may not see. The
core's calls do it themselves (cluster/, groups/, routing/), so both adapters, gRPC and
Kafka, meet the same ACLs the same way.

The gRPC caller's principal (`caller_of`) is the bearer token's (security/tokens.py) when the
call carries one — a token that does not verify is refused with SASL_AUTHENTICATION_FAILED —
else `User:<common name>` of the caller's verified certificate (Kafka's default principal
builder for SSL), else `User:ANONYMOUS`. What each call needs is Kafka's (the operation
Kafka's broker checks for the same request):

    Produce, ProduceGrants     Write on each topic
    Fetch, FetchGrants         Read on each topic
    ListOffsets                Describe on each topic
    SplitPoints                Describe on each topic
    DeleteRecords              Delete on each topic
    InitProducerId             IdempotentWrite on the cluster
    CreateTopics               Create on each topic
    DeleteTopics               Delete on each topic
    CreatePartitions           Alter on each topic
    DescribeTopics             Describe on each topic named (all topics: Describe on cluster)
    ListTopics                 lists only the topics the principal may Describe
    DescribeConfigs            DescribeConfigs on each topic (and on the cluster with it)
    AlterConfigs               AlterConfigs on the topic
    DescribeCluster, DescribeAcls               Describe on the cluster
    ListGroups                 all groups with Describe on the cluster, else those it may Describe
    AlterClientQuotas          AlterConfigs on the cluster
    DescribeClientQuotas       DescribeConfigs on the cluster
    CreateAcls, DeleteAcls     Alter on the cluster
    DecommissionNode, RecommissionNode          Alter on the cluster
    JoinGroup                  Read on the group, Describe on each topic subscribed
    Heartbeat, LeaveGroup, SyncGroup            Read on the group
    CommitOffsets              Read on the group and on each topic
    FetchOffsets, DescribeGroups, FindCoordinator  Describe on the group(s)
    DeleteGroups, DeleteOffsets                 Delete on the group(s)

A denied gRPC call answers PERMISSION_DENIED naming the principal, operation and resource,
and nothing is done; denials are counted (`denied`) and the principal is set on the call's
span.

The ACLs come with the metadata offset they stand at (`acls_offset`). A grant made for a
client carries the offset read before its checks (routing/relayed_calls.py), and a node
refuses the grant once an ACL change after it may have narrowed access (bulk.md, "Grants and
ACL changes").
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

import grpc
from opentelemetry import trace

from seglog.errors import AuthenticationError, PermissionDeniedError
from seglog.rpc.client_id import CLIENT_ID_METADATA
from seglog.security.acls import ANONYMOUS, CLUSTER_NAME, AclBinding, Authorizer
from seglog.security.principals import PrincipalMapper
from seglog.security.tls import peer_identity
from seglog.security.tokens import TokenVerifier

from .broker.caller import Caller, Listener

Need = tuple[str, str, str]  # (operation, resource type, resource name)
CLUSTER = ("cluster", CLUSTER_NAME)


def principal_of(
    context: grpc.ServicerContext,
    tokens: TokenVerifier | None = None,
    mapper: PrincipalMapper | None = None,
) -> str:
    """A bearer token's principal when the call carries one (AuthenticationError when it does
    not verify), else the certificate's (its CN, or its subject DN through the mapping
    rules), else User:ANONYMOUS."""
    if tokens is not None:
        for key, value in context.invocation_metadata():
            if key == "authorization" and value.startswith("Bearer "):
                return tokens.principal(value[len("Bearer ") :])
    subjects = context.auth_context().get("x509_subject")
    return certificate_principal(
        peer_identity(context), subjects[0].decode() if subjects else None, mapper
    )


def certificate_principal(
    common_name: str | None, subject: str | None, mapper: PrincipalMapper | None = None
) -> str:
    """A verified client certificate's principal: `User:<common name>`, or its subject DN
    through the mapping rules (AuthenticationError when none matches); User:ANONYMOUS
    without a certificate. The gRPC and Kafka listeners name certificates alike."""
    if common_name is None:
        return ANONYMOUS
    if mapper is not None:
        subject = subject or f"CN={common_name}"
        name = mapper.name(subject)
        if name is None:
            raise AuthenticationError(f"no ssl.principal.mapping.rules rule matches {subject!r}")
        return f"User:{name}"
    return f"User:{common_name}"


def host_of(context: grpc.ServicerContext) -> str:
    peer: str = context.peer()  # "ipv4:127.0.0.1:5432", "ipv6:[::1]:5432"
    address = peer.split(":", 1)[1] if ":" in peer else peer
    return address.rsplit(":", 1)[0].strip("[]")


class Authorization:
    def __init__(
        self,
        acls: Iterable[AclBinding],
        *,
        enabled: bool,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
        tokens: TokenVerifier | None = None,
        mapper: PrincipalMapper | None = None,
        acls_offset: int = 0,
    ) -> None:
        self.enabled = enabled
        self.tokens = tokens
        self.mapper = mapper
        self.authorizer = Authorizer(
            acls,
            super_users=super_users,
            allow_everyone_if_no_acl_found=allow_everyone_if_no_acl_found,
        )
        self.denied = 0
        self.on_denied: Callable[[str, str], None] | None = None  # (operation, resource type)
        self._lock = threading.Lock()
        self.acls_offset = acls_offset

    def update(self, acls: list[AclBinding], offset: int) -> None:
        """The ACLs as of metadata offset `offset` (the registry notifies one change at a
        time, in order)."""
        self.authorizer.replace(acls)
        # Only after the ACLs: an offset read first never stands for older ones.
        self.acls_offset = offset

    def caller_of(self, context: grpc.ServicerContext, listener: Listener = "grpc") -> Caller:
        """The gRPC call's caller (AuthenticationError for a token that does not verify)."""
        client_id = None
        for key, value in context.invocation_metadata():
            if key == CLIENT_ID_METADATA:
                client_id = value
        principal = principal_of(context, self.tokens, self.mapper)
        # Who made the call, on its span (never the credentials that proved it).
        trace.get_current_span().set_attribute("seglog.principal", principal)
        return Caller(principal, host_of(context), client_id, listener)

    def allows(self, caller: Caller, operation: str, kind: str, name: str) -> bool:
        """Whether `caller` may `operation` the resource (always, with the authorizer off):
        for answers that leave out what the caller may not see rather than refuse."""
        if not self.enabled:
            return True
        return self.authorizer.authorize(caller.principal, caller.host, operation, kind, name)

    def check(self, caller: Caller, needs: Iterable[Need], action: str) -> None:
        """Every need allowed (nothing to check with the authorizer off), or
        PermissionDeniedError naming the principal, operation and resource; denials are
        counted. `action` names what was asked, for the message (an API's name)."""
        if not self.enabled:
            return
        for operation, kind, name in needs:
            if not self.authorizer.authorize(caller.principal, caller.host, operation, kind, name):
                with self._lock:
                    self.denied += 1
                if self.on_denied is not None:
                    self.on_denied(operation, kind)
                raise PermissionDeniedError(
                    f"{caller.principal} may not {operation} {kind} {name!r} ({action})"
                )
