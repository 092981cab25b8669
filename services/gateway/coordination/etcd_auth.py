"""Locking an etcd down for seglog, through the same JSON gateway the gateways speak: a
`root` user (etcd requires one before auth goes on), a role with read-write on the registry's
key prefix and nothing else, the gateways' user holding that role, then auth on. Run once
per etcd cluster, by `make run ETCD=1 TLS=1` and by the production overlay's Job
(`python -m services.gateway.coordination.etcd_auth`); run again it sees auth on and changes
nothing.

Before auth is on, etcd takes these calls from any client it lets connect — with
`--client-cert-auth`, only holders of a certificate from its CA (without a common name, as its
JSON gateway requires).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Mapping
from typing import Any

import requests

from seglog.security.tls import TlsFiles

from .etcd_keys import DEFAULT_PREFIX, b64, range_end

ROLE = "seglog"
READY_TIMEOUT_S = 30.0
ROOT_PASSWORD_ENV = "SEGLOG_ETCD_ROOT_PASSWORD"
GATEWAY_PASSWORD_ENV = "SEGLOG_REGISTRY_ETCD_PASSWORD"


class EtcdAuthError(RuntimeError):
    pass


def lock_down(
    endpoint: str,
    prefix: str,
    users: Mapping[str, str],
    root_password: str,
    tls: TlsFiles | None,
) -> bool:
    """Give `users` (name -> password) read-write on keys under `prefix`, and turn auth on;
    False when auth was already on (nothing changed)."""
    session = requests.Session()
    session.trust_env = False  # the cluster CA, not the environment's bundle
    if tls is not None:
        session.verify = str(tls.ca) if tls.ca else True
        session.cert = (str(tls.cert), str(tls.key))

    def call(path: str, body: dict[str, Any], *, exists_ok: bool = False) -> dict[str, Any]:
        answer = session.post(f"{endpoint.rstrip('/')}/v3/{path}", json=body, timeout=10)
        if answer.status_code == 200:
            result: dict[str, Any] = answer.json()
            return result
        if exists_ok and "already exists" in answer.text:
            return {}
        raise EtcdAuthError(f"etcd {path}: {answer.status_code} {answer.text.strip()}")

    # A member that just opened its port may not serve yet (no leader elected): its first
    # answers are connection errors or 5xx, waited out up to a deadline.
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        try:
            status = session.post(f"{endpoint.rstrip('/')}/v3/auth/status", json={}, timeout=10)
            if status.status_code < 500 or time.monotonic() > deadline:
                break
        except requests.ConnectionError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.1)
    if status.status_code != 200:
        # With auth on, etcd answers even this only to a logged-in user.
        if "user name is empty" in status.text:
            return False
        raise EtcdAuthError(f"etcd auth/status: {status.status_code} {status.text.strip()}")
    if status.json().get("enabled"):
        return False
    call("auth/user/add", {"name": "root", "password": root_password}, exists_ok=True)
    call("auth/user/grant", {"user": "root", "role": "root"})
    call("auth/role/add", {"name": ROLE}, exists_ok=True)
    permission = {"permType": "READWRITE", "key": b64(prefix), "range_end": range_end(prefix)}
    call("auth/role/grant", {"name": ROLE, "perm": permission})
    for user, password in users.items():
        call("auth/user/add", {"name": user, "password": password}, exists_ok=True)
        call("auth/user/grant", {"user": user, "role": ROLE})
    call("auth/enable", {})
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m services.gateway.coordination.etcd_auth",
        description=(
            "Turn etcd's auth on for seglog: the gateways' user gets read-write on the "
            f"registry's prefix. Passwords from {ROOT_PASSWORD_ENV} and {GATEWAY_PASSWORD_ENV}."
        ),
    )
    parser.add_argument("--endpoint", required=True, help="https://host:port of one member")
    parser.add_argument("--prefix", default=DEFAULT_PREFIX, help="the registry's key prefix")
    parser.add_argument("--user", default="gateway", help="the gateways' etcd user")
    parser.add_argument("--cert", help="PEM client certificate (no common name)")
    parser.add_argument("--key", help="PEM private key")
    parser.add_argument("--ca", help="PEM CA of etcd's certificate")
    args = parser.parse_args(argv)
    root_password = os.environ.get(ROOT_PASSWORD_ENV)
    password = os.environ.get(GATEWAY_PASSWORD_ENV)
    if not root_password or not password:
        print(f"set {ROOT_PASSWORD_ENV} and {GATEWAY_PASSWORD_ENV}", file=sys.stderr)
        return 2
    try:
        tls = TlsFiles.from_flags(args.cert, args.key, args.ca)
        locked = lock_down(
            args.endpoint, args.prefix.rstrip("/") + "/", {args.user: password}, root_password, tls
        )
    except (ValueError, EtcdAuthError, requests.RequestException) as exc:
        print(f"etcd auth: {exc}", file=sys.stderr)
        return 1
    print("etcd auth turned on" if locked else "etcd auth was already on; nothing changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
