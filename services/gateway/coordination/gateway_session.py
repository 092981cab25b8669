"""This gateway's own session in etcd: one lease, kept alive by a thread, holding the key
`gateways/<address>` (its gRPC address, its Kafka listener's advertised address when it
has one, and its peer server's, where other gateways ask it of the share partitions it
holds) and whatever the gateway holds on the cluster's behalf (the controller
key, group coordinators' keys). When the process dies or is cut off, the lease expires and
everything it held is released at once; another gateway takes it over.

A lease found expired (the process was paused or cut off from etcd for longer than its TTL)
ends the session: listeners drop what it held (the controller steps down, coordinators
forget their groups), then a new lease begins the next session. etcd unreachable is not an
expiry by itself: when etcd was down, it extends the leases as it comes back (a new etcd
leader refreshes them); when it ran on while this gateway was cut off from it, the lease
lapsed there, and the first keep-alive answered after the cut ends the session.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Callable

from seglog.errors import RegistryUnavailableError

from .etcd_keys import Changes
from .etcd_keyspace import EtcdKeyspace

logger = logging.getLogger(__name__)

PREFIX = "gateways/"


class GatewaySession:
    def __init__(self, keyspace: EtcdKeyspace, address: str, ttl_ms: int) -> None:
        self.keyspace = keyspace
        self.address = address
        self.kafka_address: str | None = None  # set before start when it has a listener
        self.internal_address: str | None = None  # set before start
        self.ttl_s = max(2, math.ceil(ttl_ms / 1000))
        self.lease = 0
        # Called with the new lease when a session begins, and with none when it ends.
        self.began: list[Callable[[int], None]] = []
        self.ended: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._gateways: set[str] = set()
        self._kafka_addresses: dict[str, str] = {}  # gRPC address -> Kafka address
        self._internal_addresses: dict[str, str] = {}  # gRPC address -> peer server
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._keep_alive, name="gateway-session", daemon=True
        )
        keyspace.subscribe(PREFIX, self._changed)

    def live_gateways(self) -> list[str]:
        with self._lock:
            return sorted(self._gateways)

    def live_kafka_addresses(self) -> dict[str, str]:
        """Each live gateway with a Kafka listener: gRPC address -> advertised Kafka address."""
        with self._lock:
            return {a: k for a, k in self._kafka_addresses.items() if a in self._gateways}

    def live_internal_address(self, address: str) -> str | None:
        """The peer server of the live gateway at gRPC `address` (None: not known)."""
        with self._lock:
            return self._internal_addresses.get(address) if address in self._gateways else None

    def internal_peers(self) -> list[str]:
        """The peer servers of the other live gateways."""
        with self._lock:
            return sorted(
                internal
                for address, internal in self._internal_addresses.items()
                if address in self._gateways and address != self.address
            )

    def start(self) -> None:
        self._begin()
        self._thread.start()

    def _begin(self) -> None:
        lease = self.keyspace.grant(self.ttl_s)
        published: dict[str, object] = {"address": self.address}
        if self.kafka_address is not None:
            published["kafka"] = self.kafka_address
        if self.internal_address is not None:
            published["internal"] = self.internal_address
        self.keyspace.put(PREFIX + self.address, json.dumps(published), lease)
        with self._lock:
            self.lease = lease
            self._gateways.add(self.address)
            if self.kafka_address is not None:
                self._kafka_addresses[self.address] = self.kafka_address
            if self.internal_address is not None:
                self._internal_addresses[self.address] = self.internal_address
        logger.info("gateway session began (lease %x, %d s)", lease, self.ttl_s)
        for listener in self.began:
            listener(lease)

    def _end(self) -> None:
        with self._lock:
            self.lease = 0
        for listener in self.ended:
            listener()

    def _keep_alive(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                if self.lease == 0:
                    self._begin()
                elif self.keyspace.keep_alive(self.lease) <= 0:
                    logger.warning(
                        "this gateway's session lease %x expired (paused or cut off from "
                        "etcd for over %d s): releasing what it held",
                        self.lease,
                        self.ttl_s,
                    )
                    self._end()
                    self._begin()
            except RegistryUnavailableError as exc:
                logger.info("gateway session not renewed: %s", exc)
            except Exception:
                logger.exception("gateway session keep-alive failed")

    def _changed(self, changes: Changes, full: bool) -> None:
        with self._lock:
            if full:
                self._gateways = {k.removeprefix(PREFIX) for k, kv in changes.items() if kv}
                if self.lease:
                    self._gateways.add(self.address)
            else:
                for key, kv in changes.items():
                    if kv is None:
                        self._gateways.discard(key.removeprefix(PREFIX))
                    else:
                        self._gateways.add(key.removeprefix(PREFIX))
            for key, kv in changes.items():
                if kv is not None:
                    kafka = _published(kv.value, "kafka")
                    if kafka is not None:
                        self._kafka_addresses[key.removeprefix(PREFIX)] = kafka
                    internal = _published(kv.value, "internal")
                    if internal is not None:
                        self._internal_addresses[key.removeprefix(PREFIX)] = internal

    def close(self) -> None:
        """Stop and release at once (revoking the lease), so others take over now rather
        than after a TTL."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        lease, self.lease = self.lease, 0
        if lease:
            self.keyspace.revoke(lease)


def _published(value: str, field: str) -> str | None:
    """An address a gateway published: "kafka" (older gateways publish none; its nodes'
    lanes are at its port + each node's id, kafka/brokers.py) or "internal"."""
    try:
        published = json.loads(value)
    except ValueError:
        return None
    found = published.get(field) if isinstance(published, dict) else None
    return found if isinstance(found, str) else None
