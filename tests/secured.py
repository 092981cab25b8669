"""Production's security for the clusters of processes tests start: a cluster CA made for the
test, each server and caller with its own certificate from it (mutual TLS on gRPC and on the
Kafka listener, as `make run TLS=1`), and what each kind of client needs to present one."""

from __future__ import annotations

import ssl
from pathlib import Path

from seglog.client.admin import Admin
from seglog.security.certs import GATEWAY_IDENTITY, CertificateAuthority, write_issued
from seglog.security.tls import ClientSecurity, TlsFiles

# The tests' operator: the only super user, who creates topics and ACLs before any client
# calls (as an administrator does), and whom the harness asks about the cluster.
OPERATOR = "operator"


class ClusterCertificates:
    """A CA under `directory` and certificates it issues, each made on first ask."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.authority = CertificateAuthority.create()
        self.authority.write(directory)

    def files(self, identity: str) -> TlsFiles:
        cert, key = self.directory / f"{identity}.pem", self.directory / f"{identity}.key"
        if not cert.exists():
            write_issued(self.authority.issue(identity), self.directory, identity)
        return TlsFiles(cert, key, self.directory / "ca.pem")

    def server_flags(self, identity: str = GATEWAY_IDENTITY) -> list[str]:
        """A gateway's or node's command-line flags for its certificate (`node-<id>`)."""
        files = self.files(identity)
        return [
            *("--tls-cert", str(files.cert)),
            *("--tls-key", str(files.key)),
            *("--tls-ca", str(files.ca)),
        ]

    def client_security(self, identity: str) -> ClientSecurity:
        files = self.files(identity)
        return ClientSecurity(files.ca, files.cert, files.key)

    def admin(self, address: str, identity: str = OPERATOR) -> Admin:
        files = self.files(identity)
        return Admin(
            address,
            ssl_cafile=str(files.ca),
            ssl_certfile=str(files.cert),
            ssl_keyfile=str(files.key),
        )

    def librdkafka(self, identity: str) -> dict[str, str]:
        return librdkafka_tls(self.files(identity))

    def ssl_context(self, identity: str) -> ssl.SSLContext:
        """For a raw Kafka connection (tests/kafka_wire.py) with `identity`'s certificate; the
        server's certificate is checked against the CA, not against a host name."""
        files = self.files(identity)
        context = ssl.create_default_context(cafile=str(files.ca))
        context.check_hostname = False
        context.load_cert_chain(str(files.cert), str(files.key))
        return context


def librdkafka_tls(files: TlsFiles) -> dict[str, str]:
    """confluent-kafka's settings for an SSL listener, presenting `files`' certificate."""
    return {
        "security.protocol": "SSL",
        "ssl.ca.location": str(files.ca),
        "ssl.certificate.location": str(files.cert),
        "ssl.key.location": str(files.key),
        "ssl.endpoint.identification.algorithm": "none",
    }
