"""Storage nodes' sessions as etcd leases, shared by every gateway.

A node's session is the key `nodes/<id>` on a lease of `broker.session.timeout.ms` (rounded
up to whole seconds, etcd's unit). Nodes talk to gateways, not to etcd: registering at any
gateway grants the lease and writes the key; each heartbeat, at whichever gateway the node
reaches, renews the lease. A node that stops heartbeating loses its lease, etcd deletes the
key, and the watch tells every gateway at once: the controller fences the node, routing sees
it down. The key's value is what other gateways need to route to the node and to judge it:

    {"address": "10.0.0.5:7071", "bulk_address": "10.0.0.5:7072",
     "offline": [["orders", 3, "disk error"]], "log_config_defaults": {...},
     "shutting_down": false, "lease": 7587879395566010946}

Heartbeats renew the lease; the key is rewritten only when its contents change (an offline
partition, a controlled shutdown).

A lease lapses in etcd when no gateway renewed it for its TTL, and that is not always the
node's death: while the gateways are cut off from etcd they answer the node's heartbeats
(the data path goes on) but cannot renew its lease. So, as Kafka's controller gives every
broker a fresh session after a failover:
- while this gateway is cut off from etcd (a call failed, or waits past a second), a
  heartbeat is answered at once, without waiting on etcd: the node must not fence itself
  (registry_client.py) for an outage that no one can elect through;
- a session this gateway sees end while it is, or was within a lease TTL, cut off from etcd
  (EtcdKeyspace.cut_off_within) stays live until one TTL after the outage ended: its grace;
- a heartbeat that finds the node's lease lapsed (in grace or not) opens a new lease for the
  same session: the process heartbeating is the one that registered (a restarted node
  registers anew, and is fenced then), so it keeps its place in the ISRs.
A node that died meanwhile is down once its grace ends, and the controller fences it then.
The end of a session is taken from the watch only once etcd confirms the key is gone, so a
deletion delivered late (a watch stream resumes after new calls pass) cannot end the
session its renewal began since.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from seglog.errors import RegistryUnavailableError

from .etcd_keys import Changes
from .etcd_keyspace import EtcdKeyspace

logger = logging.getLogger(__name__)

PREFIX = "nodes/"
Offline = dict[tuple[str, int], str]


@dataclass(frozen=True)
class NodeSession:
    node_id: int
    address: str
    lease: int
    bulk_address: str = ""
    offline: Offline = field(default_factory=dict)
    log_config_defaults: dict[str, str] = field(default_factory=dict)
    shutting_down: bool = False

    def to_json(self) -> str:
        return json.dumps(
            {
                "address": self.address,
                "bulk_address": self.bulk_address,
                "offline": [[t, p, reason] for (t, p), reason in sorted(self.offline.items())],
                "log_config_defaults": self.log_config_defaults,
                "shutting_down": self.shutting_down,
                "lease": self.lease,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, node_id: int, text: str) -> NodeSession:
        data = json.loads(text)
        return cls(
            node_id,
            data["address"],
            int(data["lease"]),
            data.get("bulk_address", ""),
            {(t, int(p)): reason for t, p, reason in data.get("offline", [])},
            dict(data.get("log_config_defaults", {})),
            bool(data.get("shutting_down", False)),
        )


class EtcdNodeSessions:
    def __init__(
        self,
        keyspace: EtcdKeyspace,
        session_timeout_ms: int,
    ) -> None:
        self.keyspace = keyspace
        # etcd refuses TTLs under its minimum (about 2 s with default timings) by raising
        # them: a shorter session timeout than that is not possible here.
        self.ttl_s = max(2, math.ceil(session_timeout_ms / 1000))
        # Called with (node id, its session or None once it ended) on every change.
        self.listeners: list[Callable[[int, NodeSession | None], None]] = []
        self._lock = threading.Lock()
        self._renewing = threading.Lock()  # one lease renewal at a time
        self._sessions: dict[int, NodeSession] = {}
        # Sessions whose lease lapsed while this gateway was cut off from etcd: live until
        # one TTL after the outage, waiting for the node's next heartbeat to renew them.
        self._lapsed: set[int] = set()
        keyspace.subscribe(PREFIX, self._changed)

    def is_live(self, node_id: int) -> bool:
        return self.get(node_id) is not None

    def has_session(self, node_id: int) -> bool:
        """Whether the node holds a session now (a lapsed one still in its grace included),
        read without acting on it: what routing asks on the data path."""
        with self._lock:
            return node_id in self._sessions

    def get(self, node_id: int) -> NodeSession | None:
        with self._lock:
            lapsed = node_id in self._lapsed
        if lapsed and not self.keyspace.cut_off_within(self.ttl_s):
            self._apply(node_id, None)  # its grace is over: down
        with self._lock:
            return self._sessions.get(node_id)

    def open(
        self,
        node_id: int,
        address: str,
        *,
        bulk_address: str = "",
        offline: Offline | None = None,
        log_config_defaults: dict[str, str] | None = None,
    ) -> NodeSession:
        """A new session (a new lease): the node's previous one, if any, is left to expire."""
        lease = self.keyspace.grant(self.ttl_s)
        session = NodeSession(
            node_id,
            address,
            lease,
            bulk_address,
            dict(offline or {}),
            dict(log_config_defaults or {}),
        )
        self._write(session)
        return session

    def keep_alive(
        self, node_id: int, address: str, *, offline: Offline, bulk_address: str
    ) -> bool:
        """Renew the node's lease, or give its session a new one when it lapsed; False when
        it has no session here (ended, or another address holds it): the node must register
        again. With etcd unreachable the session is taken as alive: nothing can fence the
        node while etcd is away from every gateway, and its lease is renewed on return."""
        session = self.get(node_id)
        if session is None or session.address != address:
            return False
        if self.keyspace.is_cut_off():
            return True  # renewed on a heartbeat once etcd answers (its grace covers a lapse)
        try:
            with self._lock:
                lapsed = node_id in self._lapsed
            if lapsed or self.keyspace.keep_alive(session.lease) <= 0:
                session = self._renew(session)
            if session.offline != offline or session.bulk_address != bulk_address:
                self._write(replace(session, offline=dict(offline), bulk_address=bulk_address))
        except RegistryUnavailableError as exc:
            logger.warning("node %d's session not renewed: %s", node_id, exc)
        return True

    def _renew(self, lapsed: NodeSession) -> NodeSession:
        """The same session on a new lease (the heartbeat proves the process lives on)."""
        with self._renewing:
            current = self.get(lapsed.node_id)
            if current is not None and current.lease != lapsed.lease:
                return current  # a concurrent heartbeat renewed it
            renewed = replace(lapsed, lease=self.keyspace.grant(self.ttl_s))
            self._write(renewed)
        logger.warning(
            "node %d's session lease %x had lapsed in etcd while it heartbeated: renewed on "
            "lease %x",
            lapsed.node_id,
            lapsed.lease,
            renewed.lease,
        )
        return renewed

    def shut_down(self, node_id: int) -> None:
        """Mark the node as shutting down (controlled shutdown), for every gateway."""
        session = self.get(node_id)
        if session is not None and not session.shutting_down:
            self._write(replace(session, shutting_down=True))

    def _write(self, session: NodeSession) -> None:
        self.keyspace.put(f"{PREFIX}{session.node_id}", session.to_json(), session.lease)
        self._apply(session.node_id, session)

    def _ended(self, node_id: int) -> None:
        """The node's key is gone from etcd: its session ends, or waits in grace when this
        gateway could not have renewed its lease."""
        if not self.keyspace.cut_off_within(self.ttl_s):
            self._apply(node_id, None)
            return
        with self._lock:
            if node_id not in self._sessions or node_id in self._lapsed:
                return
            self._lapsed.add(node_id)
        logger.warning(
            "node %d's session lease lapsed while this gateway was cut off from etcd: it "
            "stays live until %d s after the outage, for its heartbeats to renew it",
            node_id,
            self.ttl_s,
        )

    def _apply(self, node_id: int, session: NodeSession | None) -> None:
        with self._lock:
            self._lapsed.discard(node_id)
            if session is None:
                if self._sessions.pop(node_id, None) is None:
                    return
            elif self._sessions.get(node_id) == session:
                return
            else:
                self._sessions[node_id] = session
        for listener in self.listeners:
            listener(node_id, session)

    def _changed(self, changes: Changes, full: bool) -> None:
        seen = set()
        for key, kv in changes.items():
            try:
                node_id = int(key.removeprefix(PREFIX))
            except ValueError:
                continue
            seen.add(node_id)
            if kv is None:
                try:
                    kv = self.keyspace.get(key)  # a late deletion: the key may be back
                except RegistryUnavailableError:
                    pass  # cut off again: taken as ended, which grants the grace
            if kv is None:
                self._ended(node_id)
            else:
                self._apply(node_id, NodeSession.from_json(node_id, kv.value))
        if full:
            with self._lock:
                gone = [n for n in self._sessions if n not in seen]
            for node_id in gone:
                self._ended(node_id)
