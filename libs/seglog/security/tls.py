"""TLS for seglog's listeners and channels, through gRPC's own credentials (and the `ssl`
module for the plain-socket bulk port), from PEM files.

- A server's certificate and key are read again whenever either file changes (gRPC asks
  before each new handshake), so certificates rotate without a restart, as cert-manager
  rotates them in Kubernetes; connections already open keep the certificate they began with.
- With a CA file, a gRPC server requires clients to present a certificate from that CA
  (mutual TLS; gRPC's Python server cannot ask for one without requiring it). The bulk port
  asks but does not require: its grants are what authorize a read there.
- A peer's identity is its certificate's subject common name (`peer_identity`).
"""

from __future__ import annotations

import os
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

CLIENT_AUTH = ("none", "optional", "required")  # optional: the plain-socket bulk port only


@dataclass(frozen=True)
class TlsFiles:
    cert: Path
    key: Path
    ca: Path | None = None

    @classmethod
    def from_flags(cls, cert: str | None, key: str | None, ca: str | None) -> TlsFiles | None:
        """None when no certificate is given (plaintext); ValueError when half is."""
        if not cert and not key:
            if ca:
                raise ValueError(
                    "a CA file needs a certificate and key too (--tls-cert, --tls-key)"
                )
            return None
        if not cert or not key:
            raise ValueError("TLS needs both a certificate and its key (--tls-cert, --tls-key)")
        return cls(Path(cert), Path(key), Path(ca) if ca else None)

    def read(self) -> tuple[bytes, bytes, bytes | None]:
        return (
            self.cert.read_bytes(),
            self.key.read_bytes(),
            self.ca.read_bytes() if self.ca else None,
        )

    def stamp(self) -> tuple[float, ...]:
        paths = [self.cert, self.key] + ([self.ca] if self.ca else [])
        return tuple(os.stat(p).st_mtime_ns for p in paths)


def server_credentials(files: TlsFiles, client_auth: str) -> grpc.ServerCredentials:
    """Credentials that pick up new certificate files before each new handshake. gRPC's
    Python server either requires client certificates or does not ask for them."""
    if client_auth not in ("none", "required"):
        raise ValueError(f"client auth must be one of {CLIENT_AUTH}, got {client_auth!r}")
    if client_auth != "none" and files.ca is None:
        raise ValueError("asking clients for certificates needs a CA file (--tls-ca)")
    lock = threading.Lock()
    seen = [files.stamp()]

    def configuration() -> grpc.ServerCertificateConfiguration:
        cert, key, ca = files.read()
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)

    def fetch() -> grpc.ServerCertificateConfiguration | None:
        with lock:
            try:
                stamp = files.stamp()
            except OSError:
                return None  # mid-rotation: keep the current one
            if stamp == seen[0]:
                return None
            seen[0] = stamp
        try:
            return configuration()
        except (OSError, ValueError):
            return None

    return grpc.dynamic_ssl_server_credentials(
        configuration(), fetch, require_client_authentication=client_auth == "required"
    )


def channel_credentials(files: TlsFiles | None, ca: Path | None = None) -> grpc.ChannelCredentials:
    """A client's: verify the server against the CA; present our certificate if we have one."""
    if files is None:
        return grpc.ssl_channel_credentials(root_certificates=ca.read_bytes() if ca else None)
    cert, key, root = files.read()
    return grpc.ssl_channel_credentials(
        root_certificates=root, private_key=key, certificate_chain=cert
    )


def peer_identity(context: grpc.ServicerContext) -> str | None:
    """The common name of the peer's verified certificate, None without one."""
    auth: dict[str, Any] = context.auth_context()
    names = auth.get("x509_common_name")
    return names[0].decode() if names else None


def server_ssl_context(files: TlsFiles, client_auth: str) -> ssl.SSLContext:
    """The bulk port's: the same certificate; client certificates as the gRPC listeners."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(files.cert, files.key)
    if files.ca is not None:
        context.load_verify_locations(files.ca)
    context.verify_mode = {
        "none": ssl.CERT_NONE,
        "optional": ssl.CERT_OPTIONAL,
        "required": ssl.CERT_REQUIRED,
    }[client_auth]
    return context


def client_ssl_context(files: TlsFiles | None, ca: Path | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    root = files.ca if files is not None else ca
    if root is not None:
        context.load_verify_locations(root)
    if files is not None:
        context.load_cert_chain(files.cert, files.key)
    return context


TLS_CA_ENV, TLS_CERT_ENV, TLS_KEY_ENV = "SEGLOG_TLS_CA", "SEGLOG_TLS_CERT", "SEGLOG_TLS_KEY"
BEARER_TOKEN_ENV = "SEGLOG_BEARER_TOKEN"
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL")


@dataclass(frozen=True)
class ClientSecurity:
    """A client's TLS: the CA to verify the gateway and nodes with, and its own certificate
    when it authenticates with one (kafka-python's ssl_cafile, ssl_certfile, ssl_keyfile)."""

    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    bearer_token: str | None = None  # sent as `authorization: Bearer ...` on every call

    @classmethod
    def resolve(
        cls,
        security_protocol: str | None = None,
        cafile: str | None = None,
        certfile: str | None = None,
        keyfile: str | None = None,
        bearer_token: str | None = None,
    ) -> ClientSecurity | None:
        """From explicit settings, else from SEGLOG_TLS_CA / _CERT / _KEY (what `make run
        TLS=1` prints to export); None: plaintext."""
        protocol = (security_protocol or "").upper()
        if protocol and protocol not in SECURITY_PROTOCOLS:
            raise ValueError(
                f"security_protocol must be PLAINTEXT or SSL, got {security_protocol!r}"
            )
        if protocol == "PLAINTEXT":
            return None
        bearer_token = bearer_token or os.environ.get(BEARER_TOKEN_ENV) or None
        if not (cafile or certfile or keyfile):
            cafile = os.environ.get(TLS_CA_ENV)
            certfile = os.environ.get(TLS_CERT_ENV)
            keyfile = os.environ.get(TLS_KEY_ENV)
        if not (cafile or certfile or keyfile):
            if protocol == "SSL" or bearer_token:
                return cls(bearer_token=bearer_token)  # the system's CAs
            return None
        if bool(certfile) != bool(keyfile):
            raise ValueError("a client certificate needs its key too (ssl_certfile, ssl_keyfile)")
        return cls(
            Path(cafile) if cafile else None,
            Path(certfile) if certfile else None,
            Path(keyfile) if keyfile else None,
            bearer_token,
        )

    def channel_credentials(self) -> grpc.ChannelCredentials:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=self.ca.read_bytes() if self.ca else None,
            private_key=self.key.read_bytes() if self.key else None,
            certificate_chain=self.cert.read_bytes() if self.cert else None,
        )
        if self.bearer_token:
            return grpc.composite_channel_credentials(
                credentials, grpc.access_token_call_credentials(self.bearer_token)
            )
        return credentials

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        if self.ca is not None:
            context.load_verify_locations(self.ca)
        if self.cert is not None and self.key is not None:
            context.load_cert_chain(self.cert, self.key)
        return context
