"""The consumer's side of the bulk fetch path (proto/seglog/v1/bulk.md), used by the Consumer's
fetcher and the Spark reader: transfer grants from the gateway, kept per partition until
shortly before they expire, and one kept connection per leader node (rpc/bulk_client.py,
the bulk client every reader of the path shares).

A node that cannot be reached is left alone for `UNREACHABLE_S`; its partitions go through
the gateway's gRPC Fetch meanwhile. One that fails mid-answer loses its grants, so the next
round asks the gateway again (the partition's leader may have moved).
"""

from __future__ import annotations

import functools
import logging
import selectors
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..rpc.bulk_client import BulkConnection, BulkFetchError, BulkMessage
from ..v1 import bulk_pb2, common_pb2, gateway_pb2_grpc
from .structs import TopicPartition

logger = logging.getLogger(__name__)

UNREACHABLE_S = 30.0
# A partition the gateway gave no grant for (the bulk path is off, its leader is moving) goes
# through the gRPC path this long before a grant is asked for again.
NO_GRANT_RETRY_S = 10.0
RENEW_BEFORE_MS = 2000  # a grant this close to its expiry is renewed first
CONNECT_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class Grant:
    node_id: int
    bulk_address: str
    grant: bytes
    signature: bytes
    expires_at_ms: int
    min_offsets: dict[TopicPartition, int]

    def covers(self, tp: TopicPartition, offset: int, now_ms: int) -> bool:
        minimum = self.min_offsets.get(tp)
        return (
            minimum is not None
            and offset >= minimum
            and now_ms < self.expires_at_ms - RENEW_BEFORE_MS
        )


@dataclass
class _Sent:
    """A request in flight: its partitions (with their fetch offsets) and the caller's
    context for them (the consumer's partition epochs when it was sent), handed back with
    each message of its answer."""

    partitions: list[tuple[TopicPartition, int]]
    context: Mapping[TopicPartition, int]


class BulkReader:
    def __init__(
        self,
        stub: gateway_pb2_grpc.GatewayStub,
        timeout_s: float,
        *,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.stub = stub
        self.ssl_context = ssl_context
        self.timeout_s = timeout_s
        self._grants: dict[TopicPartition, Grant] = {}
        self._connections: dict[str, BulkConnection] = {}
        self._unreachable_until: dict[str, float] = {}
        self._no_grant_until: dict[TopicPartition, float] = {}
        # The consumer's fetches in flight (`fetch_some`): per connection, each request sent
        # and not yet answered, in the order sent (answers come so).
        self._in_flight: dict[BulkConnection, deque[_Sent]] = {}
        self._lock = threading.Lock()

    # -- grants ------------------------------------------------------------------------------

    def route(
        self, wanted: Sequence[tuple[TopicPartition, int]]
    ) -> tuple[dict[str, tuple[Grant, list[tuple[TopicPartition, int]]]], list[TopicPartition]]:
        """(node bulk address -> grant and partitions) for what can go the bulk way, and the
        partitions that must take the gRPC path."""
        now_ms = time.time_ns() // 1_000_000
        now = time.monotonic()
        missing = [
            (tp, o)
            for tp, o in wanted
            if not self._usable(tp, o, now_ms) and self._no_grant_until.get(tp, 0) <= now
        ]
        if missing:
            self._request_grants(missing)
        by_address: dict[str, tuple[Grant, list[tuple[TopicPartition, int]]]] = {}
        fallback = []
        for tp, offset in wanted:
            grant = self._grants.get(tp)
            if (
                grant is None
                or not grant.covers(tp, offset, now_ms)
                or self._unreachable_until.get(grant.bulk_address, 0) > now
            ):
                fallback.append(tp)
                continue
            entry = by_address.setdefault(grant.bulk_address + f"#{id(grant)}", (grant, []))
            entry[1].append((tp, offset))
        return by_address, fallback

    def _usable(self, tp: TopicPartition, offset: int, now_ms: int) -> bool:
        grant = self._grants.get(tp)
        return grant is not None and grant.covers(tp, offset, now_ms)

    def _request_grants(self, missing: list[tuple[TopicPartition, int]]) -> None:
        request = bulk_pb2.FetchGrantsRequest()
        for tp, offset in missing:
            request.partitions.add(topic=tp.topic, partition=tp.partition, fetch_offset=offset)
        retry_at = time.monotonic() + NO_GRANT_RETRY_S
        try:
            response = self.stub.FetchGrants(request, timeout=self.timeout_s)
        except Exception as exc:  # the gRPC path still works
            logger.debug("FetchGrants failed: %s", exc)
            for tp, _ in missing:
                self._no_grant_until[tp] = retry_at
            return
        for error in response.errors:
            self._no_grant_until[TopicPartition(error.topic, error.partition)] = retry_at
        for g in response.grants:
            parsed = bulk_pb2.TransferGrant.FromString(g.grant)
            grant = Grant(
                g.node_id,
                g.bulk_address,
                g.grant,
                g.signature,
                g.expires_at_ms,
                {TopicPartition(p.topic, p.partition): p.min_offset for p in parsed.partitions},
            )
            for tp in grant.min_offsets:
                self._grants[tp] = grant

    def forget(self, tp: TopicPartition) -> None:
        """The node answered that it does not lead the partition (any more)."""
        self._grants.pop(tp, None)

    # -- transfers ---------------------------------------------------------------------------

    def fetch(
        self,
        wanted: Sequence[tuple[TopicPartition, int]],
        request_for: Callable[..., common_pb2.FetchRequest],
        on_message: Callable[[BulkMessage], bool],
    ) -> tuple[set[TopicPartition], bool]:
        """One round: every node's request is sent before any answer is read, so the nodes'
        long polls run side by side (they wait only when no partition must also go through
        the gateway). Returns the partitions the gateway must serve, and whether
        `on_message` reported a retriable error or a node failed."""
        by_grant, fallback = self.route(wanted)
        rest = set(fallback)
        sent = []
        for grant, partitions in by_grant.values():
            try:
                request = request_for(partitions, wait=not fallback)
                sent.append((self.send(grant, request), partitions))
            except BulkFetchError:
                rest.update(tp for tp, _ in partitions)
        failed = False
        unread = [connection for connection, _ in sent]
        try:
            for connection, partitions in sent:
                unread.remove(connection)
                retriable, broken = self._read_answer(connection, on_message)
                failed |= retriable or broken
                if broken:
                    self._forget_all(partitions)
        finally:
            for connection in unread:  # `on_message` raised: these answers stay unread
                connection.close()
        return rest, failed

    def fetch_some(
        self,
        wanted: Sequence[tuple[TopicPartition, int]],
        request_for: Callable[..., common_pb2.FetchRequest],
        on_message: Callable[[BulkMessage, Mapping[TopicPartition, int]], bool],
        wait_s: float,
        context: Mapping[TopicPartition, int],
    ) -> tuple[set[TopicPartition], bool, bool]:
        """The consumer's round, as Kafka's fetcher does it: each node has a fetch in flight
        and its answer is taken as soon as it comes, whatever the other nodes' long polls.
        A request goes to each node for its wanted partitions not already in flight; then
        the answers ready are read, waiting up to `wait_s` for the first when every wanted
        partition goes the bulk way or a request was just sent (a request sent while some
        partitions go through the gateway does not long-poll, so its answer comes at once).
        A round that waited for every node's answer held each record behind the slowest
        long poll: with two of three partitions idle, records of the third took
        fetch.max.wait.ms (500 ms) to arrive.

        `on_message(message, context)` gets the `context` given when the message's request
        was sent (an answer may come rounds later).

        Returns the partitions the gateway must serve, whether `on_message` reported a
        retriable error or a node failed, and whether this side was busy (a request sent or
        an answer read: the gateway's fetch then should not long-poll)."""
        by_grant, fallback = self.route(wanted)
        rest = set(fallback)
        with self._lock:
            busy = {
                tp
                for queued in self._in_flight.values()
                for sent in queued
                for tp, _ in sent.partitions
            }
        sent_any = False
        for grant, partitions in by_grant.values():
            idle = [(tp, offset) for tp, offset in partitions if tp not in busy]
            if not idle:
                continue
            try:
                request = request_for(idle, wait=not fallback)
                connection = self.send(grant, request)
            except BulkFetchError:
                rest.update(tp for tp, _ in idle)
                continue
            with self._lock:
                self._in_flight.setdefault(connection, deque()).append(
                    _Sent(idle, {tp: context[tp] for tp, _ in idle if tp in context})
                )
            sent_any = True
        failed = False
        answered = False
        for connection in self._ready(wait_s if sent_any or not fallback else 0.0):
            with self._lock:
                queued = self._in_flight.get(connection)
                sent = queued.popleft() if queued else _Sent([], {})
                if queued is not None and not queued:
                    del self._in_flight[connection]
            answered = True
            retriable, broken = self._read_answer(
                connection, functools.partial(_with_context, on_message, sent.context)
            )
            failed |= retriable or broken
            if broken:  # the requests queued behind it are lost with it
                with self._lock:
                    queued = self._in_flight.pop(connection, deque())
                for lost in (sent, *queued):
                    self._forget_all(lost.partitions)
        return rest, failed, answered or sent_any

    def _read_answer(
        self, connection: BulkConnection, on_message: Callable[[BulkMessage], bool]
    ) -> tuple[bool, bool]:
        """One answer, each message to `on_message`: whether one reported a retriable error,
        and whether the connection failed (its partitions' grants are then forgotten by the
        caller: the next round asks the gateway again)."""
        retriable = False
        try:
            for message in connection.receive():
                if message.error == common_pb2.NOT_LEADER_OR_FOLLOWER:
                    self.forget(TopicPartition(message.topic, message.partition))
                retriable |= on_message(message)
        except BulkFetchError as exc:
            logger.debug("bulk fetch failed, the gateway serves these: %s", exc)
            return retriable, True
        return retriable, False

    def _forget_all(self, partitions: list[tuple[TopicPartition, int]]) -> None:
        for tp, _ in partitions:
            self.forget(tp)

    def _ready(self, wait_s: float) -> list[BulkConnection]:
        """The connections with an answer coming, after waiting up to `wait_s` for one."""
        with self._lock:
            awaited = list(self._in_flight)
        if not awaited:
            return []
        buffered = [c for c in awaited if c.has_buffered_bytes()]
        if buffered:
            return buffered
        with selectors.DefaultSelector() as selector:
            for connection in awaited:
                try:
                    selector.register(connection, selectors.EVENT_READ)
                except (ValueError, OSError):  # closed by `interrupt` meanwhile
                    return [connection]
            return [key.fileobj for key, _ in selector.select(wait_s)]  # type: ignore[misc]

    def send(self, grant: Grant, request: common_pb2.FetchRequest) -> BulkConnection:
        """Send one fetch to the grant's node; its answer is read with the connection's
        `receive`."""
        connection = self._connection(grant.bulk_address)
        connection.send(grant.grant, grant.signature, request, node_id=grant.node_id)
        return connection

    def interrupt(self) -> None:
        """Abandon the answers in flight (a seek or reassignment): their connections close."""
        with self._lock:
            connections = list(self._connections.values())
            self._connections.clear()
            self._in_flight.clear()
        for connection in connections:
            connection.shutdown()

    def close(self) -> None:
        self.interrupt()

    def _connection(self, address: str) -> BulkConnection:
        """The kept connection to the node, or a new one when there is none or it failed."""
        with self._lock:
            connection = self._connections.get(address)
        if connection is not None and not connection.closed:
            return connection
        try:
            connection = BulkConnection.open(
                address,
                connect_timeout_s=CONNECT_TIMEOUT_S,
                ssl_context=self.ssl_context,
                traced=True,
            )
        except BulkFetchError:
            self._unreachable_until[address] = time.monotonic() + UNREACHABLE_S
            raise
        with self._lock:
            self._connections[address] = connection
        return connection


def _with_context(
    on_message: Callable[[BulkMessage, Mapping[TopicPartition, int]], bool],
    context: Mapping[TopicPartition, int],
    message: BulkMessage,
) -> bool:
    return on_message(message, context)
