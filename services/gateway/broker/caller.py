"""Who a call to the broker core is from, as an adapter established it.

The gRPC adapter names the caller from the call's bearer token or verified client
certificate (`Authorization.caller_of`), the Kafka adapter from its connection (SASL
principal, else the certificate's). The core authorizes against this alone
(`Authorization.check` / `Authorization.allows`), so both protocols meet the same ACLs the
same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Listener = Literal["grpc", "kafka"]


@dataclass(frozen=True)
class Caller:
    # "User:alice", or User:ANONYMOUS: what ACLs name.
    principal: str
    # The peer's address (no port): what an ACL's host is matched against.
    host: str
    # The client's self-declared id (Kafka's client.id, gRPC's x-client-id): quotas, logs.
    client_id: str | None = None
    listener: Listener = "grpc"
