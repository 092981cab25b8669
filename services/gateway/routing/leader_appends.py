"""A produce request's parts sent to their leaders: over the leader's bulk listener when it
takes them (produce_relay.py), else over gRPC, and several leaders' parts at once (the last
from the caller's own thread, the others on a bounded pool), each in the caller's trace
context."""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import grpc

from seglog.errors import SeglogError

from ..node_connections import NodeConnection
from .produce_relay import ProduceRelay

# Leaders' parts relayed at once beside the callers' own threads, over all requests.
MAX_CONCURRENT_PARTS = 32


@dataclass(frozen=True)
class Target:
    """A partition's leader as routed: its node, its gRPC connection and bulk address."""

    node_id: int
    connection: NodeConnection
    bulk_address: str = ""


class LeaderAppends:
    def __init__(
        self,
        relay: ProduceRelay | None,
        node_failure: Callable[[Target, grpc.RpcError], SeglogError],
    ) -> None:
        self.relay = relay
        self._node_failure = node_failure
        self._pool = ThreadPoolExecutor(
            max_workers=MAX_CONCURRENT_PARTS, thread_name_prefix="produce-relay"
        )

    def append(self, target: Target, request: bytes, timeout_s: float) -> bytes:
        """The leader's answer (ProduceResponse wire bytes) to `request`; SeglogError when
        the node refused the request as a whole or could not be reached."""
        if self.relay is not None:
            answer = self.relay.relay(target.node_id, target.bulk_address, request, timeout_s)
            if answer is not None:
                return answer
        try:
            relayed: bytes = target.connection.append_relay(request, timeout=timeout_s)
            return relayed
        except grpc.RpcError as exc:
            raise self._node_failure(target, exc) from None

    def append_all(
        self, parts: Sequence[tuple[Target, bytes]], timeout_s: float
    ) -> list[bytes | SeglogError]:
        """Each part's answer, or the error that stood for it, in order."""
        context = contextvars.copy_context()
        calls = [
            self._pool.submit(context.copy().run, self.append, target, request, timeout_s)
            for target, request in parts[:-1]
        ]
        answers: list[bytes | SeglogError] = []
        for i, (target, request) in enumerate(parts):
            try:
                if i < len(calls):
                    answers.append(calls[i].result())
                else:
                    answers.append(self.append(target, request, timeout_s))
            except SeglogError as error:
                answers.append(error)
        return answers

    def close(self) -> None:
        """After the server stopped: the relay's connections and the pool's threads."""
        self._pool.shutdown(wait=False)
        if self.relay is not None:
            self.relay.close()
