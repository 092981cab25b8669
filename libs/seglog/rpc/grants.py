"""Transfer grants for the bulk fetch path (proto/seglog/v1/bulk.proto, bulk.md): the gateway
signs, storage nodes verify, with a secret the cluster shares (HMAC-SHA256 over the
serialized TransferGrant). A grant names one node, the partitions it may serve to the holder
with the offset each may start at and the leader epoch, and an expiry; or, made for the
gateway's own produce relay, no partition and the right to append (`produce_relay`); or, made
for the gateway's own fetch relay, no partition and the right to read any partition as a
consumer at the leader epoch the request names (`fetch_relay`); or, made for a client by
Gateway.ProduceGrants, the right to append to the topics it names (`produce_topics`). A
client's grant also carries the metadata offset of the ACLs it was authorized under
(`acls_offset`): nodes refuse it after a later ACL change that may narrow access."""

from __future__ import annotations

import hashlib
import hmac
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import InvalidRequestError
from ..v1 import bulk_pb2

GRANT_VERSION = 1
DEFAULT_GRANT_TTL_MS = 30_000
VERIFIED_CACHE_SIZE = 1024
CACHED_GRANT_MAX_BYTES = 1024
CLUSTER_SECRET_ENV = "SEGLOG_CLUSTER_SECRET"


def cluster_secret(value: str | None) -> bytes | None:
    """The secret from a flag's value (or SEGLOG_CLUSTER_SECRET); None: the bulk path is off."""
    value = value if value is not None else os.environ.get(CLUSTER_SECRET_ENV)
    if not value:
        return None
    if len(value) < 16:
        raise ValueError("the cluster secret must be at least 16 characters")
    return value.encode()


def sign(secret: bytes, grant: bytes) -> bytes:
    return hmac.new(secret, grant, hashlib.sha256).digest()


def issue(
    secret: bytes,
    node_id: int,
    partitions: Iterable[tuple[str, int, int, int]],
    ttl_ms: int = DEFAULT_GRANT_TTL_MS,
    *,
    replica_id: int | None = None,
    produce_relay: bool = False,
    fetch_relay: bool = False,
    produce_topics: Iterable[str] = (),
    acls_offset: int = 0,
) -> tuple[bytes, bytes, int]:
    """(grant bytes, signature, expiry ms) for (topic, partition, min offset, leader epoch);
    with `replica_id`, a follower's grant for replica fetches; with `produce_relay` (and no
    partitions), the gateway's grant for relaying produce requests to the node; with
    `fetch_relay` (and no partitions), the gateway's grant for relaying consumer fetches; with
    `produce_topics` (and no partitions), a client's grant to produce to those topics.
    `acls_offset`: for a client's grant, the metadata offset of the ACLs it was authorized
    under."""
    expires_at_ms = time.time_ns() // 1_000_000 + ttl_ms
    grant = bulk_pb2.TransferGrant(
        version=GRANT_VERSION, node_id=node_id, expires_at_ms=expires_at_ms
    )
    if replica_id is not None:
        grant.replica = True
        grant.replica_id = replica_id
    grant.produce_relay = produce_relay
    grant.fetch_relay = fetch_relay
    grant.produce_topics.extend(produce_topics)
    grant.acls_offset = acls_offset
    for topic, partition, min_offset, leader_epoch in partitions:
        grant.partitions.add(
            topic=topic, partition=partition, min_offset=min_offset, leader_epoch=leader_epoch
        )
    data = grant.SerializeToString()
    return data, sign(secret, data), expires_at_ms


class ReusedGrants:
    """Grants one holder makes for itself and sends again until `renew_margin_ms` before they
    expire, one per set of partitions named (a follower's session rounds name the same few;
    the gateway's relays name none): no signing per request, and the node finds the
    same bytes verified already (`verify`)."""

    def __init__(
        self,
        secret: bytes,
        node_id: int,
        *,
        replica_id: int | None = None,
        produce_relay: bool = False,
        fetch_relay: bool = False,
        ttl_ms: int = DEFAULT_GRANT_TTL_MS,
        renew_margin_ms: int = DEFAULT_GRANT_TTL_MS // 3,
        max_kept: int = 64,
    ) -> None:
        self.secret = secret
        self.node_id = node_id
        self.replica_id = replica_id
        self.produce_relay = produce_relay
        self.fetch_relay = fetch_relay
        self.ttl_ms = max(ttl_ms, 2 * renew_margin_ms)
        self.renew_margin_ms = renew_margin_ms
        self.max_kept = max_kept
        self._made: dict[tuple[tuple[str, int], ...], tuple[bytes, bytes, int]] = {}

    def get(self, partitions: tuple[tuple[str, int], ...] = ()) -> tuple[bytes, bytes]:
        """(grant, signature) for `partitions` (each from offset 0, any epoch)."""
        now_ms = time.time_ns() // 1_000_000
        made = self._made.get(partitions)
        if made is None or made[2] - now_ms < self.renew_margin_ms:
            made = issue(
                self.secret,
                self.node_id,
                [(topic, partition, 0, -1) for topic, partition in partitions],
                self.ttl_ms,
                replica_id=self.replica_id,
                produce_relay=self.produce_relay,
                fetch_relay=self.fetch_relay,
            )
            if len(self._made) >= self.max_kept:
                self._made.clear()
            self._made[partitions] = made
        return made[0], made[1]


class RelayGrants:
    """The gateway's grants for one of its relays, one ReusedGrants per node (any thread)."""

    def __init__(
        self,
        secret: bytes,
        *,
        ttl_ms: int = DEFAULT_GRANT_TTL_MS,
        produce_relay: bool = False,
        fetch_relay: bool = False,
    ) -> None:
        self.secret = secret
        self.ttl_ms = ttl_ms
        self.produce_relay = produce_relay
        self.fetch_relay = fetch_relay
        self.by_node: dict[int, ReusedGrants] = {}
        self._lock = threading.Lock()

    def get(self, node_id: int) -> tuple[bytes, bytes]:
        """(grant, signature) for the node."""
        with self._lock:
            reused = self.by_node.get(node_id)
            if reused is None:
                reused = self.by_node[node_id] = ReusedGrants(
                    self.secret,
                    node_id,
                    produce_relay=self.produce_relay,
                    fetch_relay=self.fetch_relay,
                    ttl_ms=self.ttl_ms,
                )
            return reused.get()


@dataclass(frozen=True)
class VerifiedGrant:
    node_id: int
    expires_at_ms: int
    partitions: dict[tuple[str, int], tuple[int, int]]  # -> (min offset, leader epoch)
    replica_id: int | None = None  # a follower's grant
    produce_relay: bool = False  # the gateway's produce relay's grant
    produce_topics: frozenset[str] = frozenset()  # a client's produce grant's topics
    fetch_relay: bool = False  # the gateway's fetch relay's grant
    acls_offset: int = 0  # a client's grant: the metadata offset of the ACLs it was given under

    @property
    def for_client(self) -> bool:
        """Made by the gateway for a client (a consumer's partitions, a producer's topics),
        under the ACLs of `acls_offset`; not a node's or the gateway's own."""
        return self.replica_id is None and not self.produce_relay and not self.fetch_relay


def verify(secret: bytes, grant: bytes, signature: bytes, node_id: int) -> VerifiedGrant:
    """The grant's content, once its signature, version, node and expiry check out;
    InvalidRequestError naming what failed otherwise."""
    key = (secret, grant, signature, node_id)
    verified = _verified.get(key)
    if verified is None:
        verified = _signed_content(secret, grant, signature, node_id)
        if len(grant) <= CACHED_GRANT_MAX_BYTES:
            if len(_verified) >= VERIFIED_CACHE_SIZE:
                _verified.clear()  # grants expire in seconds: what is dropped comes back
            _verified[key] = verified
    now_ms = time.time_ns() // 1_000_000
    if verified.expires_at_ms <= now_ms:
        raise InvalidRequestError(
            f"transfer grant: expired {now_ms - verified.expires_at_ms} ms ago; ask the "
            f"gateway for a new one"
        )
    return verified


# A follower sends the same grant round after round, and the gateway's relay one with every
# produce: the same bytes are verified once, then found here (the expiry is still checked
# on each use). Only grants that verified are kept, and only small ones (a consumer's grant
# for thousands of partitions is verified each time rather than held).
_verified: dict[tuple[bytes, bytes, bytes, int], VerifiedGrant] = {}


def _signed_content(secret: bytes, grant: bytes, signature: bytes, node_id: int) -> VerifiedGrant:
    if not hmac.compare_digest(sign(secret, grant), signature):
        raise InvalidRequestError("transfer grant: the signature does not verify")
    try:
        parsed = bulk_pb2.TransferGrant.FromString(grant)
    except Exception as exc:  # protobuf's DecodeError and friends
        raise InvalidRequestError(f"transfer grant: malformed ({exc})") from None
    if parsed.version != GRANT_VERSION:
        raise InvalidRequestError(f"transfer grant: unknown version {parsed.version}")
    if parsed.node_id != node_id:
        raise InvalidRequestError(
            f"transfer grant: issued for node {parsed.node_id}, this is node {node_id}"
        )
    return VerifiedGrant(
        parsed.node_id,
        parsed.expires_at_ms,
        {(p.topic, p.partition): (p.min_offset, p.leader_epoch) for p in parsed.partitions},
        parsed.replica_id if parsed.replica else None,
        parsed.produce_relay,
        frozenset(parsed.produce_topics),
        parsed.fetch_relay,
        parsed.acls_offset,
    )
