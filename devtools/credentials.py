"""The cluster's secrets and certificates for `make run` (local_cluster.py), made once into
the data dir and kept between runs: the secret that signs bulk transfer grants, etcd's
passwords, and under `--tls` a cluster CA with the gateway's, each node's, an `admin`
client's and etcd's certificates.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from seglog.security.certs import (
    GATEWAY_IDENTITY,
    CertificateAuthority,
    node_identity,
    write_issued,
)
from seglog.security.tls import TlsFiles


def tls_flags(directory: Path, nodes: int) -> tuple[list[str], dict[int, list[str]]]:
    """A cluster CA and the gateway's, each node's and an `admin` client's certificates,
    made once into `directory` (kept between runs, renewed by deleting them)."""
    if (directory / "ca.pem").exists():
        authority = CertificateAuthority.load(directory / "ca.pem", directory / "ca.key")
    else:
        authority = CertificateAuthority.create()
        authority.write(directory)
    ca = str(directory / "ca.pem")

    def flags(identity: str) -> list[str]:
        if not (directory / f"{identity}.pem").exists():
            write_issued(authority.issue(identity), directory, identity)
        cert, key = directory / f"{identity}.pem", directory / f"{identity}.key"
        return ["--tls-cert", str(cert), "--tls-key", str(key), "--tls-ca", ca]

    flags("admin")
    return flags(GATEWAY_IDENTITY), {n: flags(node_identity(n)) for n in range(1, nodes + 1)}


def identity_files(directory: Path, identity: str) -> TlsFiles:
    """`identity`'s certificate from the CA `tls_flags` made (made once, then kept); "":
    one without a common name, kept as `etcd-client`."""
    authority = CertificateAuthority.load(directory / "ca.pem", directory / "ca.key")
    name = identity or "etcd-client"
    if not (directory / f"{name}.pem").exists():
        write_issued(authority.issue(identity), directory, name)
    return TlsFiles(directory / f"{name}.pem", directory / f"{name}.key", directory / "ca.pem")


def secret_file(path: Path) -> str:
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_hex(32))
    return path.read_text().strip()
