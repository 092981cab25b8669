"""Which gateway is the controller: the one holding the etcd key `controller`, created on its
session's lease (gateway_session.py) only while no other holds it. The key's create revision
is the election's fence (`Fence`): the registry's store writes the controller's decisions
with a compare on it (cluster/registry_store.py), so after its lease expired — it was
paused, or cut off — none of its writes lands, and the first refused one makes it step
down. Any gateway campaigns when the key is gone (watched) and on each controller tick, so
another takes over within a lease TTL of the controller's death. `SoleController` is the
file backend's: one gateway, always it.

The watch can deliver an event late: after a cut link heals, a connection that was open
through the cut resumes only at its next TCP retransmission, seconds after new requests
already pass. So an event is never taken on its own word: the deletion of the key is
checked against etcd before this gateway steps down (its own new election may stand
already), a key created before this gateway's election is no rival, and a campaign that
finds the key held on this gateway's own lease takes it as its election.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass

from .etcd_keys import Changes
from .etcd_keyspace import EtcdKeyspace
from .gateway_session import GatewaySession

logger = logging.getLogger(__name__)

KEY = "controller"


@dataclass(frozen=True)
class Fence:
    """The election a controller's writes depend on: its key (under the prefix) and its
    create revision."""

    key: str
    create_revision: int


class SoleController:
    """The file backend: this gateway is the only one, so the controller."""

    fence: Fence | None = None
    is_controller = True

    def __init__(self, address: str = "") -> None:
        self.address = address

    @property
    def controller_address(self) -> str:
        return self.address

    def campaign(self) -> None:
        pass

    def step_down(self, reason: str) -> None:
        pass


class ControllerElection:
    def __init__(self, keyspace: EtcdKeyspace, session: GatewaySession) -> None:
        self.keyspace = keyspace
        self.session = session
        self._lock = threading.Lock()
        self.fence: Fence | None = None  # set while this gateway is the controller
        self._controller_address = ""
        session.began.append(lambda lease: self.campaign())
        session.ended.append(lambda: self.step_down("its session lease expired"))
        keyspace.subscribe(KEY, self._changed)

    @property
    def address(self) -> str:
        return self.session.address

    @property
    def is_controller(self) -> bool:
        with self._lock:
            return self.fence is not None

    @property
    def controller_address(self) -> str:
        with self._lock:
            return self._controller_address

    def campaign(self) -> None:
        """Become the controller if no gateway is, or take the key this gateway holds."""
        lease = self.session.lease
        if lease == 0 or self.is_controller:
            return
        revision = self.keyspace.create(KEY, json.dumps({"address": self.address}), lease)
        if revision is None:
            found = self.keyspace.get(KEY)
            if found is None or found.lease != lease:
                return
            revision = found.create_revision  # won earlier, its news lost on the way
        with self._lock:
            self.fence = Fence(KEY, revision)
            self._controller_address = self.address
        logger.info("this gateway (%s) is the controller (election %d)", self.address, revision)

    def step_down(self, reason: str) -> None:
        with self._lock:
            was, self.fence = self.fence, None
            if was is not None and self._controller_address == self.address:
                self._controller_address = ""
        if was is not None:
            logger.warning("this gateway is no longer the controller: %s", reason)

    def _changed(self, changes: Changes, full: bool) -> None:
        found = changes.get(KEY)
        if found is None:
            try:
                self._key_gone()
            except Exception as exc:  # the controller tick campaigns again
                logger.info("campaign failed: %s", exc)
            return
        address = json.loads(found.value)["address"]
        with self._lock:
            fence = self.fence
            if fence is not None and found.create_revision < fence.create_revision:
                return  # an election before this gateway's, delivered late
            self._controller_address = address
        if fence is not None and found.create_revision != fence.create_revision:
            self.step_down(f"{address} was elected")

    def _key_gone(self) -> None:
        """The watch says the key was deleted: true only if etcd says so now."""
        current = self.keyspace.get(KEY)
        with self._lock:
            fence = self.fence
        if current is not None:
            if fence is None or current.create_revision != fence.create_revision:
                self._changed({KEY: current}, False)
            return
        with self._lock:
            self._controller_address = ""
        self.step_down("the controller key is gone")
        self.campaign()
