"""Clients' grants against ACL changes (bulk.md, "Grants and ACL changes").

The gateway authorizes a client once per grant, and a node serves the client's bulk fetches or
produces under that grant until it expires. Each grant made for a client carries the
metadata offset of the ACLs it was authorized under, and every registry answer and push
carries the offset of the latest ACL change that may narrow access (an ACL deleted, a Deny
added). From the moment the node knows of such a change, a client's grant from before it is
refused, nothing read or written: the client asks the gateway again, which checks the ACLs
as they are now. The controller pushes each narrowing to every node as it happens, and
heartbeat answers carry it too: a revoked ACL takes effect at once (Kafka's brokers likewise
apply ACL changes as their metadata arrives), not at the grant's expiry.
The gateway's own grants (its relays) and followers' are not a client's: its calls were
checked by the gateway one by one.
"""

from __future__ import annotations

import threading

from seglog.errors import PermissionDeniedError
from seglog.rpc.grants import VerifiedGrant


class AclNarrowings:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.offset = 0  # the latest narrowing known; it only rises

    def note(self, offset: int) -> None:
        """A registry answer's or push's `acls_narrowed_offset` (0: none, or an older
        gateway's)."""
        if offset > self.offset:
            with self._lock:
                self.offset = max(self.offset, offset)

    def check(self, grant: VerifiedGrant) -> None:
        """PermissionDeniedError when `grant` is a client's from before the latest narrowing."""
        narrowed = self.offset
        if grant.for_client and grant.acls_offset < narrowed:
            raise PermissionDeniedError(
                f"transfer grant: given under the ACLs of metadata offset {grant.acls_offset}, "
                f"and an ACL change at offset {narrowed} may have narrowed access: ask the "
                f"gateway for a new one"
            )
