"""Kafka's client quotas at the gateway: byte rates per user principal and/or client id
(`producer_byte_rate` on Produce, `consumer_byte_rate` on Fetch and on ShareFetch's answers),
kept in the registry (AlterClientQuotas) and enforced here, on the gRPC relay's answers.

Which quota applies to a call is Kafka's rule: the most specific entity that sets the key,
in this order (user = the principal's name without "User:", client id = the call's
`client-id` metadata, "<default>" = the entity type's default):

    user + client id, user + <default> client, user,
    <default> user + client id, <default> user + <default> client, <default> user,
    client id, <default> client

Callers that match the same entity share one budget (a user's quota is the sum of all its
clients), except through a <default>, which gives each user or client its own.

Each budget is a token bucket refilled at the rate, holding at most one second of it. Bytes
past it put the bucket in debt; the caller is throttled until the debt is repaid (at most
MAX_THROTTLE_MS), and the answer says for how long in `throttle_time_ms` (ProduceResponse
field 3, each FetchResponse's field 13, appended to the answer's wire bytes: protobuf reads
the last occurrence of a field). How, is Kafka's: on gRPC, where a channel cannot be muted,
the answer is held back that long; on the Kafka listener, KIP-219's answer-then-mute (the
answer goes at once, and the connection reads no further request for that long).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar, cast

from seglog.rpc.wire import encode_uvarint
from seglog.v1 import bulk_pb2, common_pb2

# The quota keys and entities are the cluster's (where quotas are kept); the relay's
# callers name the keys through this module too.
from ..cluster.client_quotas import CLIENT_ID, DEFAULT_NAME, USER, EntityKey
from ..cluster.client_quotas import CONSUMER_BYTE_RATE as CONSUMER_BYTE_RATE
from ..cluster.client_quotas import PRODUCER_BYTE_RATE as PRODUCER_BYTE_RATE
from .fetch_answers import FetchAnswer, size_of

# A fetch's answers as the caller holds them: wire bytes (gRPC) or either form (the core's).
Answer = TypeVar("Answer", bound=FetchAnswer)

# A bucket holds one second of its rate: a client idle for a while may send that much at once.
BURST_S = 1.0
# Kafka bounds a throttle by its quota window; a held answer must also stay within clients'
# request timeouts (30 s by default).
MAX_THROTTLE_MS = 10_000
_PRODUCE_THROTTLE_FIELD = bytes([3 << 3])  # ProduceResponse.throttle_time_ms, varint
_FETCH_THROTTLE_FIELD = bytes([13 << 3])  # FetchResponse.throttle_time_ms, varint


def quota_user(principal: str) -> str:
    """The user a quota names for a principal (`User:alice` -> `alice`)."""
    return principal.split(":", 1)[1] if ":" in principal else principal


def entity_key(user: str | None, client_id: str | None) -> EntityKey:
    parts = [(USER, user)] if user is not None else []
    if client_id is not None:
        parts.append((CLIENT_ID, client_id))
    return tuple(sorted(parts))


def _candidates(user: str, client_id: str) -> list[EntityKey]:
    """The entities that may apply to (user, client id), most specific first."""
    order: list[tuple[str | None, str | None]] = [
        (user, client_id),
        (user, DEFAULT_NAME),
        (user, None),
        (DEFAULT_NAME, client_id),
        (DEFAULT_NAME, DEFAULT_NAME),
        (DEFAULT_NAME, None),
        (None, client_id),
        (None, DEFAULT_NAME),
    ]
    return [entity_key(u, c) for u, c in order]


class _Bucket:
    __slots__ = ("tokens", "refilled_at")

    def __init__(self, rate: float, now: float) -> None:
        self.tokens = rate * BURST_S
        self.refilled_at = now


class ClientQuotas:
    def __init__(
        self,
        quotas: Callable[[], dict[EntityKey, dict[str, float]]],
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """`quotas`: the registry's current quotas."""
        self.quotas = quotas
        self.clock = clock
        self.sleep = sleep
        self._buckets: dict[tuple[str, EntityKey], _Bucket] = {}
        self._lock = threading.Lock()
        self.throttled_ms = 0  # in all, for tests and metrics

    def throttle_ms(self, key: str, user: str, client_id: str, size_bytes: int) -> int:
        """Count `size_bytes` against the caller's `key` quota; how long to hold its answer."""
        quotas = self.quotas()
        if not quotas:
            return 0
        for entity in _candidates(user, client_id):
            rate = quotas.get(entity, {}).get(key)
            if rate is not None:
                break
        else:
            return 0
        # A <default> entity gives each caller its own budget: the bucket is named after the
        # caller where the entity says <default>.
        budget = tuple(
            (kind, {USER: user, CLIENT_ID: client_id}[kind] if name == DEFAULT_NAME else name)
            for kind, name in entity
        )
        now = self.clock()
        with self._lock:
            bucket = self._buckets.get((key, budget))
            if bucket is None:
                bucket = self._buckets[(key, budget)] = _Bucket(rate, now)
            bucket.tokens = min(rate * BURST_S, bucket.tokens + (now - bucket.refilled_at) * rate)
            bucket.refilled_at = now
            bucket.tokens -= size_bytes
            if bucket.tokens >= 0:
                return 0
            throttle = min(MAX_THROTTLE_MS, int(-bucket.tokens / rate * 1000) + 1)
            self.throttled_ms += throttle
            return throttle

    def metered_of(self, key: str, user: str, client_id: str) -> bool:
        """Whether a `key` quota applies to the caller named by user and client id."""
        quotas = self.quotas()
        if not quotas:
            return False
        return any(key in quotas.get(entity, {}) for entity in _candidates(user, client_id))

    @staticmethod
    def refuse_grants(request: bulk_pb2.FetchGrantsRequest) -> bulk_pb2.FetchGrantsResponse:
        """FetchGrants' answer to a caller with a consumer_byte_rate quota: no bulk transfer
        grant (the nodes' bulk path is not metered), so its consumer reads through the
        gateway's Fetch, which is."""
        response = bulk_pb2.FetchGrantsResponse()
        for p in request.partitions:
            response.errors.add(
                topic=p.topic,
                partition=p.partition,
                error=common_pb2.INVALID_REQUEST,
                error_message="a consumer_byte_rate quota applies: fetch through the gateway",
            )
        return response

    @staticmethod
    def refuse_produce_grants(
        request: bulk_pb2.ProduceGrantsRequest,
    ) -> bulk_pb2.ProduceGrantsResponse:
        """ProduceGrants' answer to a caller with a producer_byte_rate quota: no grant (a
        node's bulk listener meters nothing), so its producer sends through the gateway's
        Produce, which holds its answers while it is over the quota."""
        response = bulk_pb2.ProduceGrantsResponse()
        for topic in request.topics:
            response.errors.add(
                topic=topic,
                partition=-1,
                error=common_pb2.INVALID_REQUEST,
                error_message="a producer_byte_rate quota applies: produce through the gateway",
            )
        return response

    def hold_produce_of(
        self, user: str, client_id: str, scope: object, request_bytes: int, answer: bytes
    ) -> bytes:
        """The Produce answer, held back and marked when the caller (named by user and client
        id) is over its quota."""
        if not self.quotas():
            return answer
        throttle = self.throttle_ms(PRODUCER_BYTE_RATE, user, client_id, request_bytes)
        if throttle == 0:
            return answer
        self._hold(scope, throttle)
        return answer + _PRODUCE_THROTTLE_FIELD + encode_uvarint(throttle)

    def _hold(self, context: object, throttle_ms: int) -> None:
        """Hold the answer back; the Kafka listener's calls instead mute their connection
        after the answer (KIP-219), which they do themselves when asked to."""
        defer = getattr(context, "defer_throttle", None)
        if defer is None or not defer(throttle_ms):
            self.sleep(throttle_ms / 1000)

    def hold_share_fetch_of(self, user: str, client_id: str, scope: object, size_bytes: int) -> int:
        """Count a ShareFetch answer's records against the caller's consumer_byte_rate quota,
        as Kafka does (its fetch quota meters ShareFetch too), holding it back (gRPC) or
        muting the connection after it (the Kafka listener) while over; the throttle in ms."""
        if size_bytes == 0 or not self.quotas():
            return 0
        throttle = self.throttle_ms(CONSUMER_BYTE_RATE, user, client_id, size_bytes)
        if throttle:
            self._hold(scope, throttle)
        return throttle

    def hold_fetch_of(
        self, user: str, client_id: str, scope: object, answers: Iterator[Answer]
    ) -> Iterator[Answer]:
        """The Fetch stream, each answer held back while the caller (named by user and client
        id) is over its quota (its size counts: fetch_answers.size_of). A FetchResponse
        message is also marked with the throttle; a relayed piece is not (the Kafka listener,
        which reads those, says the throttle itself)."""
        if not self.quotas():
            yield from answers
            return
        for answer in answers:
            throttle = self.throttle_ms(CONSUMER_BYTE_RATE, user, client_id, size_of(answer))
            if throttle:
                self._hold(scope, throttle)
                if isinstance(answer, bytes):
                    marked = answer + _FETCH_THROTTLE_FIELD + encode_uvarint(throttle)
                    answer = cast(Answer, marked)
            yield answer
