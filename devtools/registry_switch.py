"""The switch of `make run`'s registry between the gateway's file registry and etcd
(local_cluster.py `--etcd`): one registry at a time holds the cluster, and switching keeps it.

`--etcd` on the data of a plain run starts an empty etcd, into which the first gateway copies
its file registry whole (services/gateway/cluster/registry_bootstrap.py), leaving it aside as
`gateway/metadata.moved-to-etcd`; a plain run on data whose registry is in etcd (so moved, or
made there by a first `--etcd` run) copies it into `gateway/metadata` before the gateway
starts, and moves etcd's data aside as `etcd.moved-to-file` (an older copy of either
replaced). A registry moved into an etcd that is gone is refused, and so are two registries
in one data dir (by the gateway), with the commands that resolve it.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from seglog.security.certs import GATEWAY_IDENTITY
from services.gateway.cluster.metadata_etcd_store import EtcdMetadataStore
from services.gateway.cluster.registry_bootstrap import (
    METADATA_DIR,
    MOVED_TO_ETCD,
    RegistryConflictError,
    adopt_into_file,
    file_registry_exists,
    moved_into_etcd,
)
from services.gateway.coordination.etcd_keys import DEFAULT_PREFIX
from services.gateway.coordination.etcd_keyspace import EtcdKeyspace

from .credentials import identity_files, secret_file
from .embedded_etcd import EtcdProcess


class RegistrySwitchRefused(Exception):
    """The data dir's registry cannot be brought to the backend asked for (said why)."""


@dataclass(frozen=True)
class RegistrySwitch:
    """Which registry a run starts on, decided before any gateway starts."""

    data: Path
    adopting: bool  # --etcd on a file registry: the first gateway copies it into etcd

    @classmethod
    def prepare(cls, data: Path, *, etcd: bool, tls: bool) -> RegistrySwitch:
        """A plain run brings a registry in etcd back to the file first; `--etcd` on a file
        registry adopts it. RegistrySwitchRefused when the registry cannot be brought."""
        if not etcd:
            try:
                registry_back_from_etcd(data, tls)
            except (RuntimeError, RegistryConflictError) as exc:
                raise RegistrySwitchRefused(str(exc)) from exc
        return cls(data, adopting=etcd and file_registry_exists(data / "gateway"))

    def adopted(self) -> str:
        """Once the gateways run on etcd: what became of the file registry it adopted ("" if
        none was)."""
        gateway_dir = self.data / "gateway"
        if not (self.adopting and moved_into_etcd(gateway_dir)):
            return ""
        return (
            f"the file registry of {gateway_dir} was copied into it, and kept "
            f"aside as gateway/{METADATA_DIR}{MOVED_TO_ETCD}"
        )

    def two_registries_fix(self) -> str:
        """The commands that resolve a gateway's refusal of two registries in one data dir."""
        data = self.data
        return (
            f"mv {data / 'etcd'} {data / 'etcd.aside'} (the file registry goes "
            f"to a new etcd), or mv {data / 'gateway' / METADATA_DIR} "
            f"{data / 'gateway' / 'metadata.aside'} (etcd's is kept)"
        )


def registry_back_from_etcd(data: Path, tls: bool) -> None:
    """A plain run on data whose registry is in etcd (moved there by `--etcd`, or made there
    by a first run with `--etcd`): etcd's registry copied into the gateway's data dir, then
    etcd's data moved aside, so neither the cluster nor a stale registry is left behind
    (registry_bootstrap.py)."""
    gateway_dir, etcd_dir = data / "gateway", data / "etcd"
    if file_registry_exists(gateway_dir):
        return
    if not etcd_dir.is_dir():
        if not moved_into_etcd(gateway_dir):
            return  # a new data dir
        raise RuntimeError(
            f"the registry of {gateway_dir} was moved into etcd, and {etcd_dir} is gone: "
            f"run with etcd again (make run ETCD=1), or to start this data over as a new "
            f"cluster move {data} aside"
        )
    client = None
    if tls:
        client = identity_files(data / "tls", "")
    etcd = EtcdProcess(
        etcd_dir,
        log_path=data / "logs" / "etcd.log",
        tls=identity_files(data / "tls", "etcd") if tls else None,
    )
    endpoint = etcd.start()
    try:
        keyspace = EtcdKeyspace(
            endpoint,
            DEFAULT_PREFIX,
            tls=client,
            user=GATEWAY_IDENTITY if tls else None,
            password=secret_file(data / "etcd-password") if tls else None,
        )
        try:
            store = EtcdMetadataStore(keyspace)
            if not store.load():
                return  # etcd never held a registry: nothing to bring back
            image = adopt_into_file(store, gateway_dir)
        finally:
            keyspace.close()
    finally:
        etcd.stop()
    aside = data / "etcd.moved-to-file"
    if aside.exists():
        shutil.rmtree(aside)
    etcd_dir.rename(aside)
    print(
        f"seglog local cluster: the registry in etcd (cluster {image.cluster_id}, "
        f"{len(image.topics)} topics) was copied back into {gateway_dir / METADATA_DIR}; "
        f"etcd's data kept aside as {aside}",
        flush=True,
    )
