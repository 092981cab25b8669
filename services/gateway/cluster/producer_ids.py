"""Producer ids for idempotent producers (Kafka's InitProducerId), as the broker core hands
them out: a new id at epoch 0 each time, from blocks the registry allocates durably (so no
two gateways, and no restart, ever hand out the same id). Needs IdempotentWrite on the
cluster, as Kafka's broker checks. A transactional id's producer id is the transaction
coordinator's (transactions/coordinator.py, which calls `allocate`); the gRPC API has no
transactions yet and refuses one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass

from seglog.errors import InvalidRequestError

from ..authorization import CLUSTER, Authorization
from ..broker.caller import Caller
from .registry import Registry


@dataclass(frozen=True)
class ProducerIdAndEpoch:
    producer_id: int
    epoch: int


class ProducerIds:
    def __init__(self, registry: Registry, authorization: Authorization) -> None:
        self.registry = registry
        self.authorization = authorization
        self._ids: Iterator[int] | None = None
        self._lock = threading.Lock()

    def init_producer_id(self, caller: Caller, transactional_id: str | None) -> ProducerIdAndEpoch:
        self.authorization.check(caller, [("IdempotentWrite", *CLUSTER)], "InitProducerId")
        if transactional_id:
            raise InvalidRequestError(
                "transactions are not supported on the gRPC API: leave transactional_id empty"
            )
        return ProducerIdAndEpoch(self.allocate(), 0)

    def allocate(self) -> int:
        """A producer id no one has had."""
        with self._lock:
            if self._ids is None:
                self._ids = iter(self.registry.allocate_producer_ids())
            producer_id = next(self._ids, None)
            if producer_id is None:
                self._ids = iter(self.registry.allocate_producer_ids())
                producer_id = next(self._ids)
        return producer_id
