"""The gateway's connection to etcd v3: seglog's keys under one prefix, read and written
through etcd's JSON gateway (/v3/kv/range, /kv/txn, /lease/*, /watch) with the etcd3gw
client, and one watch over the whole prefix that survives etcd restarts.

Keys (under the prefix, `/seglog` by default):

    metadata/...            the registry's metadata log: a head key, batches of records and
                            a snapshot (cluster/metadata_etcd_store.py)
    registry                the registry's former whole document, read once to migrate
    controller              the elected controller gateway: its address, on its lease
    gateways/<address>      each running gateway, on its lease (gateway_session.py)
    nodes/<id>              each storage node's session, on a lease the gateways keep
                            alive from its heartbeats (node_sessions.py)
    coordinators/<n>        the gateway coordinating the groups of __consumer_offsets
                            partition n, on that gateway's lease (group_coordinators.py)
    txn_coordinators/<n>    the gateway coordinating the transactional ids of
                            __transaction_state partition n, likewise

The watch gives every subscriber a snapshot of its keys first (a range read), then each
change in revision order; when the stream ends (etcd stopped, a member lost) it reconnects
with backoff and starts again from a fresh snapshot, so nothing is missed and compaction
never strands it. Endpoints are tried in order; a failed one moves the client to the next.

The keyspace also notes when etcd stopped answering this gateway and when it answered again
(`cut_off_within`): leases lapse in etcd while a gateway cut off from it cannot renew them,
and what it learns of them on its return must be read in that light (node_sessions.py).
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import socket
import threading
import time
from typing import Any

import requests
from etcd3gw.client import Etcd3Client
from etcd3gw.exceptions import ConnectionFailedError, ConnectionTimeoutError, Etcd3Exception

from seglog.errors import RegistryUnavailableError
from seglog.security.tls import TlsFiles

from .etcd_keys import DEFAULT_PREFIX, Changes, KeyValue, Subscriber, b64, range_end, unb64

logger = logging.getLogger(__name__)

_API_PATH = "/v3/"  # etcd >= 3.4
_WATCH_RETRY_MAX_S = 2.0
# An answer this late means etcd did not hear this gateway for that long, as much a cut as
# a call that failed: leases it renews may have lapsed meanwhile.
_LATE_ANSWER_S = 1.0


class EtcdKeyspace:
    def __init__(
        self,
        endpoints: str,
        prefix: str = DEFAULT_PREFIX,
        *,
        timeout_s: float = 5.0,
        tls: TlsFiles | None = None,
        user: str | None = None,
        password: str | None = None,
    ) -> None:
        self.prefix = prefix.rstrip("/") + "/"
        self.endpoints = [e.strip() for e in endpoints.split(",") if e.strip()]
        if not self.endpoints:
            raise ValueError("no etcd endpoint given")
        self._clients = []
        for endpoint in self.endpoints:
            secure = endpoint.startswith("https://")
            if secure and (tls is None or tls.ca is None):
                raise ValueError(
                    f"etcd endpoint {endpoint} is https: the gateway needs a client "
                    f"certificate for it (--registry-etcd-cert, -key and -ca)"
                )
            host, _, port = (
                endpoint.removeprefix("https://").removeprefix("http://").rpartition(":")
            )
            self._clients.append(
                Etcd3Client(
                    host=host or "127.0.0.1",
                    port=int(port),
                    protocol="https" if secure else "http",
                    # Paths, read at each new connection: rotated certificates are picked up.
                    ca_cert=str(tls.ca) if secure and tls and tls.ca else None,
                    cert_cert=str(tls.cert) if secure and tls else None,
                    cert_key=str(tls.key) if secure and tls else None,
                    timeout=timeout_s,
                    api_path=_API_PATH,
                )
            )
            # The environment's CA bundle (REQUESTS_CA_BUNDLE) would override the cluster CA
            # given above, and its proxies have no business between a gateway and etcd.
            self._clients[-1].session.trust_env = False
        if user is not None and password is None:
            raise ValueError(f"etcd user {user!r} needs its password")
        self._login = None if user is None else {"name": user, "password": password}
        self._logged_in = [False] * len(self._clients)
        self._current = 0
        self._lock = threading.Lock()
        self._unreachable_since: float | None = None  # time.monotonic(), while cut off
        self._reachable_again_at = -math.inf
        self._asked_at: dict[int, float] = {}  # each call awaiting its answer: when it was sent
        self._calls = itertools.count()
        self._subscribers: list[tuple[str, Subscriber]] = []
        self._stop = threading.Event()
        self._watch_response: requests.Response | None = None
        self._watch_thread: threading.Thread | None = None

    def key(self, name: str) -> str:
        return self.prefix + name

    def is_cut_off(self) -> bool:
        return self.cut_off_within(0.0)

    def cut_off_within(self, window_s: float) -> bool:
        """True while no etcd endpoint answers this gateway (a call failed, or one has been
        waiting for its answer too long), and for `window_s` after one answers again."""
        now = time.monotonic()
        with self._lock:
            if self._unreachable_since is not None:
                return True
            if any(now - asked_at > _LATE_ANSWER_S for asked_at in self._asked_at.values()):
                return True
            return now - self._reachable_again_at < window_s

    def _answered(self, asked_at: float) -> None:
        now = time.monotonic()
        with self._lock:
            if self._unreachable_since is not None or now - asked_at > _LATE_ANSWER_S:
                self._unreachable_since = None
                self._reachable_again_at = now

    def _unanswered(self) -> None:
        with self._lock:
            if self._unreachable_since is None:
                self._unreachable_since = time.monotonic()

    # -- calls -----------------------------------------------------------------------------

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """One call, tried on each endpoint in turn from the last one that answered."""
        call = next(self._calls)
        asked_at = time.monotonic()
        with self._lock:
            start = self._current
            self._asked_at[call] = asked_at
        try:
            return self._post_from(start, asked_at, path, body)
        finally:
            with self._lock:
                del self._asked_at[call]

    def _post_from(
        self, start: int, asked_at: float, path: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        last: Exception | None = None
        for step in range(len(self._clients)):
            index = (start + step) % len(self._clients)
            try:
                result: dict[str, Any] = self._post_logged_in(index, path, body)
            except (ConnectionFailedError, ConnectionTimeoutError) as exc:
                last = exc
                continue
            except Etcd3Exception as exc:
                self._answered(asked_at)
                raise RegistryUnavailableError(
                    f"etcd at {self.endpoints[index]} refused {path}: {exc.detail_text}"
                ) from None
            with self._lock:
                self._current = index
            self._answered(asked_at)
            return result
        self._unanswered()
        raise RegistryUnavailableError(
            f"no etcd endpoint of {', '.join(self.endpoints)} answers: {last}"
        )

    def range(self, name: str, *, prefix: bool = False) -> tuple[int, list[KeyValue]]:
        """The keys (one, or all starting with `name`) and the store's revision."""
        body = {"key": b64(self.key(name))}
        if prefix:
            body["range_end"] = range_end(self.key(name))
        result = self._post("/kv/range", body)
        return int(result["header"]["revision"]), [self._kv(kv) for kv in result.get("kvs", [])]

    def get(self, name: str) -> KeyValue | None:
        _, found = self.range(name)
        return found[0] if found else None

    def put(self, name: str, value: str, lease: int = 0) -> int:
        result = self._post(
            "/kv/put", {"key": b64(self.key(name)), "value": b64(value), "lease": lease}
        )
        return int(result["header"]["revision"])

    def delete(self, name: str) -> None:
        self._post("/kv/deleterange", {"key": b64(self.key(name))})

    def txn(
        self,
        compare: list[dict[str, Any]],
        success: list[dict[str, Any]],
        failure: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        return self._post(
            "/kv/txn", {"compare": compare, "success": success, "failure": failure or []}
        )

    def create(self, name: str, value: str, lease: int) -> int | None:
        """Put `name` only if it does not exist; its create revision, or None."""
        answer = self.txn([self.compare_created(name, 0)], [self.put_op(name, value, lease)])
        return int(answer["header"]["revision"]) if answer.get("succeeded") else None

    def compare_modified(self, name: str, revision: int) -> dict[str, Any]:
        return {
            "key": b64(self.key(name)),
            "target": "MOD",
            "result": "EQUAL",
            "mod_revision": str(revision),
        }

    def compare_created(self, name: str, revision: int) -> dict[str, Any]:
        return {
            "key": b64(self.key(name)),
            "target": "CREATE",
            "result": "EQUAL",
            "create_revision": str(revision),
        }

    def put_op(self, name: str, value: str, lease: int = 0) -> dict[str, Any]:
        return {"request_put": {"key": b64(self.key(name)), "value": b64(value), "lease": lease}}

    def range_op(self, name: str) -> dict[str, Any]:
        return {"request_range": {"key": b64(self.key(name))}}

    def delete_op(self, name: str) -> dict[str, Any]:
        return {"request_delete_range": {"key": b64(self.key(name))}}

    def delete_range_op(self, first: str, end: str) -> dict[str, Any]:
        """Delete every key from `first` up to, not including, `end`."""
        return {
            "request_delete_range": {"key": b64(self.key(first)), "range_end": b64(self.key(end))}
        }

    def txn_ranges(self, answer: dict[str, Any]) -> list[KeyValue]:
        """The keys read by the range operations of a transaction's answer."""
        out = []
        for response in answer.get("responses", []):
            for kv in response.get("response_range", {}).get("kvs", []):
                out.append(self._kv(kv))
        return out

    # -- leases ----------------------------------------------------------------------------

    def grant(self, ttl_s: int) -> int:
        return int(self._post("/lease/grant", {"TTL": ttl_s, "ID": 0})["ID"])

    def keep_alive(self, lease: int) -> int:
        """The lease's renewed TTL in seconds, or -1 when it has expired."""
        result = self._post("/lease/keepalive", {"ID": lease})
        return int(result.get("result", {}).get("TTL", -1))

    def revoke(self, lease: int) -> None:
        try:
            self._post("/lease/revoke", {"ID": lease})
        except RegistryUnavailableError as exc:  # it expires on its own
            logger.info("revoking lease %x: %s", lease, exc)

    # -- the watch -------------------------------------------------------------------------

    def subscribe(self, name_prefix: str, subscriber: Subscriber) -> None:
        """`subscriber(changes, full)` for every key starting with `name_prefix`; call
        before `start_watch`."""
        self._subscribers.append((name_prefix, subscriber))

    def start_watch(self) -> None:
        """Deliver the first snapshot before returning, then watch on a thread."""
        revision = self._snapshot()
        self._watch_thread = threading.Thread(
            target=self._watch_loop, args=(revision,), name="etcd-watch", daemon=True
        )
        self._watch_thread.start()

    def _snapshot(self) -> int:
        revision, found = self.range("", prefix=True)
        by_key = {kv.key: kv for kv in found}
        for name_prefix, subscriber in self._subscribers:
            mine: Changes = {k: kv for k, kv in by_key.items() if k.startswith(name_prefix)}
            self._deliver(subscriber, mine, True)
        return revision

    def _deliver(self, subscriber: Subscriber, changes: Changes, full: bool) -> None:
        try:
            subscriber(changes, full)
        except Exception:
            logger.exception("an etcd watch subscriber failed")

    def _watch_loop(self, revision: int) -> None:
        backoff_s = 0.05
        while not self._stop.is_set():
            try:
                self._stream(revision + 1)
                backoff_s = 0.05
            except Exception as exc:  # the stream broke: etcd stopped or a member left
                if self._stop.is_set():
                    return
                logger.info("etcd watch interrupted: %s", exc)
            if self._stop.wait(backoff_s):
                return
            backoff_s = min(backoff_s * 2, _WATCH_RETRY_MAX_S)
            try:
                revision = self._snapshot()
            except RegistryUnavailableError as exc:
                logger.info("etcd not reachable yet: %s", exc)
                revision = -1
            if revision < 0:
                revision = self._wait_for_snapshot()
                if revision < 0:
                    return

    def _wait_for_snapshot(self) -> int:
        backoff_s = 0.05
        while not self._stop.wait(backoff_s):
            try:
                return self._snapshot()
            except RegistryUnavailableError:
                backoff_s = min(backoff_s * 2, _WATCH_RETRY_MAX_S)
        return -1

    def _post_logged_in(self, index: int, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """The call on one endpoint, logged in first when etcd's auth is on. etcd's tokens
        lapse (simple tokens after 5 idle minutes, and on any restart of the member): a call
        refused for its token logs in again and is tried once more."""
        client = self._clients[index]
        if self._login is not None and not self._logged_in[index]:
            self._log_in(index)
        try:
            answer: dict[str, Any] = client.post(client.get_url(path), json=body)
            return answer
        except Etcd3Exception as exc:
            if self._login is None or "auth token" not in str(exc.detail_text):
                raise
        self._log_in(index)
        again: dict[str, Any] = client.post(client.get_url(path), json=body)
        return again

    def _log_in(self, index: int) -> None:
        client = self._clients[index]
        client.session.headers.pop("Authorization", None)
        answer = client.post(client.get_url("/auth/authenticate"), json=self._login)
        # Later calls, the watch stream's included, carry the token in the session's headers.
        client.session.headers["Authorization"] = answer["token"]
        self._logged_in[index] = True

    def _stream(self, start_revision: int) -> None:
        with self._lock:
            client = self._clients[self._current]
        request: dict[str, Any] = {
            "create_request": {
                "key": b64(self.prefix),
                "range_end": range_end(self.prefix),
                "start_revision": start_revision,
            }
        }
        response = client.session.post(
            client.get_url("/watch"), json=request, stream=True, timeout=(5, None)
        )
        self._watch_response = response
        try:
            for line in response.iter_lines():
                if self._stop.is_set():
                    return
                if not line.strip():
                    continue
                result = json.loads(line).get("result", {})
                if result.get("canceled") or result.get("compact_revision"):
                    raise RuntimeError(f"watch canceled: {result}")
                events = result.get("events", [])
                if events:
                    self._dispatch(events)
            raise RuntimeError("watch stream ended")
        finally:
            response.close()

    def _dispatch(self, events: list[dict[str, Any]]) -> None:
        changes: Changes = {}
        for event in events:
            kv = event["kv"]
            name = unb64(kv["key"]).removeprefix(self.prefix)
            changes[name] = None if event.get("type") == "DELETE" else self._kv(kv)
        for name_prefix, subscriber in self._subscribers:
            mine = {k: v for k, v in changes.items() if k.startswith(name_prefix)}
            if mine:
                self._deliver(subscriber, mine, False)

    def _kv(self, kv: dict[str, Any]) -> KeyValue:
        return KeyValue(
            unb64(kv["key"]).removeprefix(self.prefix),
            unb64(kv["value"]) if kv.get("value") else "",
            int(kv.get("mod_revision", 0)),
            int(kv.get("create_revision", 0)),
            int(kv.get("lease", 0)),
        )

    def close(self) -> None:
        self._stop.set()
        response = self._watch_response
        if response is not None:
            try:  # wake the read blocked on the stream (as etcd3gw's Watcher.stop does)
                socket.fromfd(
                    response.raw._fp.fileno(), socket.AF_INET, socket.SOCK_STREAM
                ).shutdown(socket.SHUT_RDWR)
            except Exception:  # already closed
                pass
            response.close()
        if self._watch_thread is not None:
            self._watch_thread.join(timeout=5)
