"""Which gateway coordinates which consumer groups.

As in Kafka, a group belongs to one partition of `__consumer_offsets` (its id's hash modulo
the partition count), and each partition to one coordinator. Here the coordinator of
partition n is the gateway holding the etcd key `coordinators/<n>`, created on its session's
lease (gateway_session.py). The first gateway asked about a group of an unclaimed partition
claims it; the others answer NOT_COORDINATOR with its address. When the coordinating
gateway dies, its lease expires, the keys go, and the next gateway asked claims the
partition and reads its groups back from `__consumer_offsets` (the `gained` listeners drop
any stale copy). A gateway that loses its session forgets the groups it coordinated
(`lost`): their members meet the new coordinator and join it.

`SoleCoordinator` is the file backend's: one gateway coordinates every group.

Transaction coordinators are placed the same way (Kafka places them like group coordinators):
a second `EtcdCoordination` with the prefix `txn_coordinators/`, whose partitions are
`__transaction_state`'s (transactions/coordinator.py). So are share partitions' holders
(`share_coordinators/`, over `__share_group_state`'s partitions: share/placement.py).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable

from .etcd_keys import Changes
from .etcd_keyspace import EtcdKeyspace
from .gateway_session import GatewaySession

logger = logging.getLogger(__name__)

PREFIX = "coordinators/"
TRANSACTION_PREFIX = "txn_coordinators/"
SHARE_PREFIX = "share_coordinators/"


class SoleCoordinator:
    def __init__(self, address: str = "") -> None:
        self.address = address

    def coordinator_of(self, partition: int) -> str:
        """The coordinator's address ("" for this gateway when it is the only one)."""
        return self.address


class EtcdCoordination:
    def __init__(
        self,
        keyspace: EtcdKeyspace,
        session: GatewaySession,
        prefix: str = PREFIX,
        what: str = "the groups of offsets partition",
    ) -> None:
        self.keyspace = keyspace
        self.session = session
        self.prefix = prefix
        self.what = what
        self._lock = threading.Lock()
        self._owners: dict[int, str] = {}  # offsets partition -> its coordinator's address
        self._mine: set[int] = set()
        # Called with an offsets partition this gateway began / stopped coordinating.
        self.gained: list[Callable[[int], None]] = []
        self.lost: list[Callable[[int], None]] = []
        session.ended.append(self._lose_all)
        keyspace.subscribe(prefix, self._changed)

    @property
    def address(self) -> str:
        return self.session.address

    def owner(self, partition: int) -> str:
        """The coordinating gateway's address as last seen, "" when none holds it."""
        with self._lock:
            return self._owners.get(partition, "")

    def coordinator_of(self, partition: int) -> str:
        """The coordinating gateway's address, claiming the partition when none holds it."""
        with self._lock:
            owner = self._owners.get(partition)
        if owner:
            return owner
        lease = self.session.lease
        if lease and self.keyspace.create(
            f"{self.prefix}{partition}", json.dumps({"address": self.address}), lease
        ):
            self._own(partition, self.address)
            return self.address
        found = self.keyspace.get(f"{self.prefix}{partition}")
        if found is None:
            return ""
        owner = json.loads(found.value)["address"]
        self._own(partition, owner)
        return str(owner)

    def _own(self, partition: int, owner: str) -> None:
        with self._lock:
            self._owners[partition] = owner
            gained = owner == self.address and partition not in self._mine
            lost = owner != self.address and partition in self._mine
            if gained:
                self._mine.add(partition)
            if lost:
                self._mine.discard(partition)
        if gained:
            logger.info("this gateway coordinates %s %d", self.what, partition)
            for listener in self.gained:
                listener(partition)
        if lost:
            self._notify_lost(partition)

    def _release(self, partition: int) -> None:
        with self._lock:
            self._owners.pop(partition, None)
            lost = partition in self._mine
            self._mine.discard(partition)
        if lost:
            self._notify_lost(partition)

    def _notify_lost(self, partition: int) -> None:
        logger.info("this gateway no longer coordinates %s %d", self.what, partition)
        for listener in self.lost:
            listener(partition)

    def _lose_all(self) -> None:
        with self._lock:
            mine = sorted(self._mine)
        for partition in mine:
            self._release(partition)

    def _changed(self, changes: Changes, full: bool) -> None:
        seen = set()
        for key, kv in changes.items():
            try:
                partition = int(key.removeprefix(self.prefix))
            except ValueError:
                continue
            seen.add(partition)
            if kv is None:
                self._release(partition)
            else:
                self._own(partition, json.loads(kv.value)["address"])
        if full:
            with self._lock:
                gone = [p for p in self._owners if p not in seen]
            for partition in gone:
                self._release(partition)
