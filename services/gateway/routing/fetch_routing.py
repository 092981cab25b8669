"""Fetch routed to the partitions' leaders: the request split by leader node, each node's
part relayed in the form the node sent it (fetch_answers.py: over the node's bulk listener
when it takes them, fetch_relay.py, else gRPC), several nodes concurrently (fetch_fanout.py),
the answer cut to the request's limits (fetch_budget.py). Each relayed fetch carries the
leader epoch it was routed by, so a node with another view answers NOT_LEADER instead of
judging the offset against its own log. A partition that cannot be routed, or whose node
fails, answers its error in its place, so one bad partition does not hide its neighbours'
data.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import grpc

from seglog.errors import SeglogError
from seglog.rpc import check_fetch_request, client_leader_epoch
from seglog.v1 import common_pb2
from services.wait_slots import WaitSlots

from .call_scope import CallScope
from .fetch_answers import FetchAnswer
from .fetch_budget import within_budget
from .fetch_fanout import fetch_across_nodes
from .fetch_relay import FetchRelay, cancel_with, fetch_error
from .leader_appends import Target
from .leader_routing import LeaderRouting

DEFAULT_TIMEOUT_MS = 30_000


class FetchRouting:
    def __init__(
        self, leaders: LeaderRouting, fetch_relay: FetchRelay | None, waiting_fetches: WaitSlots
    ) -> None:
        self.leaders = leaders
        # Consumers' fetches over the leaders' bulk listeners (fetch_relay.py), else gRPC.
        self.fetch_relay = fetch_relay
        self.waiting_fetches = waiting_fetches

    def fetch_messages(
        self,
        request: common_pb2.FetchRequest,
        scope: CallScope,
        raw: bytes | None = None,
        *,
        keep_first: bool = True,
    ) -> Iterator[FetchAnswer]:
        """The fetch's answers (fetch_answers.py, each of whole batches) as the
        leaders send them, within the request's max_bytes and partition_max_bytes but for
        the answer's first batch (fetch_budget.py; not even that without `keep_first`);
        SeglogError at once for a request refused whole. `raw`: the request's own bytes,
        when the caller has them. The calls to the nodes end when `scope` ends, or when the
        messages are closed."""
        check_fetch_request(request)
        return within_budget(self._messages(request, scope, raw), request, keep_first=keep_first)

    def _messages(
        self, request: common_pb2.FetchRequest, scope: CallScope, raw: bytes | None
    ) -> Iterator[FetchAnswer]:
        # A relayed long poll holds a gateway thread for as long as the node waits: past the
        # bound, the node is asked to answer at once with what it has.
        if request.max_wait_ms > 0 and not self.waiting_fetches.try_acquire():
            request.max_wait_ms = 0
            return self._fetch(request, request.SerializeToString(), scope)
        if raw is None:
            raw = request.SerializeToString()
        if request.max_wait_ms <= 0:
            return self._fetch(request, raw, scope)
        release = _once(self.waiting_fetches.release)
        scope.add_callback(release)
        return self._released(self._fetch(request, raw, scope), release)

    @staticmethod
    def _released(
        messages: Iterator[FetchAnswer], release: Callable[[], None]
    ) -> Iterator[FetchAnswer]:
        try:
            yield from messages
        finally:
            release()

    def _fetch(
        self, request: common_pb2.FetchRequest, raw: bytes, context: CallScope
    ) -> Iterator[FetchAnswer]:
        by_node: dict[int, tuple[Target, list[int]]] = {}
        epochs_added = False
        for i, p in enumerate(request.partitions):
            try:
                route, target = self.leaders.route(p.topic, p.partition, client_leader_epoch(p))
            except SeglogError as exc:
                yield fetch_error(p.topic, p.partition, exc)
                continue
            if client_leader_epoch(p) < 0:
                # The node answers only while it leads the epoch the fetch was routed by (as a
                # Kafka consumer's fetch carries its leader epoch): a node whose view is older
                # or newer answers NOT_LEADER, which is retried, instead of judging the offset
                # against a log that is not the leader's (OFFSET_OUT_OF_RANGE resets consumers).
                p.current_leader_epoch = route.leader_epoch
                epochs_added = True
            by_node.setdefault(target.node_id, (target, []))[1].append(i)
        if not by_node:
            return
        if epochs_added:
            raw = request.SerializeToString()
        if len(by_node) == 1 and len(next(iter(by_node.values()))[1]) == len(request.partitions):
            target, indexes = next(iter(by_node.values()))
            yield from self._relay(target, raw, request, indexes, context)
            return
        yield from fetch_across_nodes(
            request,
            by_node,
            lambda target, payload, indexes, keep_cancel: self._relay(
                target, payload, request, indexes, context, keep_cancel
            ),
        )

    def _relay(
        self,
        target: Target,
        payload: bytes,
        request: common_pb2.FetchRequest,
        indexes: list[int],
        context: CallScope,
        keep_cancel: Callable[[Callable[[], object]], None] | None = None,
    ) -> Iterator[FetchAnswer]:
        timeout_s = request.max_wait_ms / 1000 + DEFAULT_TIMEOUT_MS / 1000
        if self.fetch_relay is not None:
            answered = yield from self.fetch_relay.fetch(
                target, request, payload, indexes, timeout_s, context, keep_cancel
            )
            if answered:
                return
        stream = target.connection.fetch_raw(payload, timeout=timeout_s)
        cancel = getattr(stream, "cancel", None)
        if cancel is not None:  # the traced channel hands back a plain generator
            cancel_with(context, cancel)
            if keep_cancel is not None:
                keep_cancel(cancel)
        try:
            yield from stream
        except grpc.RpcError as exc:
            error = self.leaders.node_failure(target, exc)
            for i in indexes:
                p = request.partitions[i]
                yield fetch_error(p.topic, p.partition, error)


def _once(action: Callable[[], None]) -> Callable[[], None]:
    """`action`, run at most once however many times the result is called (a call's end and
    its cancellation callback may both release its slot)."""
    done = threading.Event()
    lock = threading.Lock()

    def run() -> None:
        with lock:
            if done.is_set():
                return
            done.set()
        action()

    return run
