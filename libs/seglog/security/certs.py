"""A small certificate authority for a seglog cluster: what `make run TLS=1` and the tests use
to make a cluster CA and the certificates of the gateway, the storage nodes and clients
(the `cryptography` package does the work; nothing here is hand-rolled crypto).

Identities live in the certificate's subject common name, as Kafka's default principal
builder reads them (`User:<CN>`):

    gateway       the gateway (a client of the nodes, the server clients call)
    node-<id>     storage node <id>: only it may register or heartbeat as that id
    <anything>    a client principal

Every certificate also names its host names and addresses (subject alternative names), so
TLS hostname checks pass on loopback ("localhost", 127.0.0.1).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

GATEWAY_IDENTITY = "gateway"
NODE_IDENTITY_PREFIX = "node-"
DEFAULT_VALID_DAYS = 365


def node_identity(node_id: int, prefix: str = NODE_IDENTITY_PREFIX) -> str:
    """The certificate subject (CN) that proves node `node_id`: `node-<id>`, or another
    prefix where certificates are named otherwise (Kubernetes: a StatefulSet pod's name,
    `seglog-node-<ordinal>`, which per-pod issuers put in the CN)."""
    return f"{prefix}{node_id}"


def node_id_of(identity: str, prefix: str = NODE_IDENTITY_PREFIX) -> int | None:
    """The node id a certificate's identity names, or None when it names no node."""
    if not identity.startswith(prefix):
        return None
    number = identity[len(prefix) :]
    return int(number) if number.isdigit() else None


@dataclass(frozen=True)
class Issued:
    cert_pem: bytes
    key_pem: bytes


class CertificateAuthority:
    def __init__(self, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
        self.cert = cert
        self.key = key

    @classmethod
    def create(
        cls, name: str = "seglog cluster CA", valid_days: int = 3650
    ) -> CertificateAuthority:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=valid_days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(key, hashes.SHA256())
        )
        return cls(cert, key)

    @classmethod
    def load(cls, cert_path: Path, key_path: Path) -> CertificateAuthority:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        return cls(cert, key)

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(
        self,
        identity: str,
        *,
        hosts: tuple[str, ...] = ("localhost", "127.0.0.1"),
        valid_days: int = DEFAULT_VALID_DAYS,
        not_before: datetime.datetime | None = None,
    ) -> Issued:
        """A key and a certificate for `identity` (its common name), usable as server and
        client certificate. `identity` "": no common name at all — what etcd's JSON gateway
        requires of its clients when it checks client certificates."""
        key = ec.generate_private_key(ec.SECP256R1())
        start = not_before or datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        cert = (
            x509.CertificateBuilder()
            .subject_name(
                x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, identity)] if identity else [])
            )
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(start + datetime.timedelta(days=valid_days))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .sign(self.key, hashes.SHA256())
        )
        return Issued(
            cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
        )

    def write(self, directory: Path) -> tuple[Path, Path]:
        """ca.pem and ca.key (0600) into `directory`."""
        directory.mkdir(parents=True, exist_ok=True)
        cert_path, key_path = directory / "ca.pem", directory / "ca.key"
        cert_path.write_bytes(self.cert_pem)
        _write_private(
            key_path,
            self.key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
        )
        return cert_path, key_path


def write_issued(issued: Issued, directory: Path, name: str) -> tuple[Path, Path]:
    """<name>.pem and <name>.key (0600) into `directory`; replaced atomically, so a server
    that reloads on change never reads half a file."""
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / f"{name}.pem", directory / f"{name}.key"
    _write_private(key_path, issued.key_pem)
    tmp = cert_path.with_name(cert_path.name + ".tmp")
    tmp.write_bytes(issued.cert_pem)
    os.replace(tmp, cert_path)
    return cert_path, key_path


def _write_private(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.replace(tmp, path)
