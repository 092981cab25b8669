"""Every fault a campaign can inject, by name, in groups by what they need; and which of
them this machine and work tree can inject."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable

from tests.faults.disk_faults import DiskBitflip, DiskFull, DiskPowerCut, LastReplicaStanding
from tests.faults.fault_kinds import (
    ClientKill,
    DelayAnswers,
    DropAnswers,
    EtcdKill,
    EtcdPause,
    Fault,
    GatewayKill,
    GatewayPause,
    GatewayTerm,
    LeaderCutFromFollowers,
    LeaderCutFromGateway,
    NodeCrash,
    NodeKill,
    NodePause,
    NodeTerm,
    SlowFollower,
)
from tests.faults.flood_fault import ClientFlooding
from tests.faults.foreign_registry import NodeForeignRegistry
from tests.faults.store_faults import StoreErrors, StoreKill, StoreSlow

PROCESS_FAULTS: dict[str, Callable[[], Fault]] = {
    "node-kill": NodeKill,
    "node-crash": NodeCrash,
    "node-pause": NodePause,
    "node-term": NodeTerm,
    "node-foreign-registry": NodeForeignRegistry,
    "gateway-kill": GatewayKill,
    "gateway-term": GatewayTerm,
    "gateway-pause": GatewayPause,
    "client-kill": ClientKill,
    "client-flood": ClientFlooding,
}
ETCD_FAULTS: dict[str, Callable[[], Fault]] = {
    "etcd-kill": EtcdKill,
    "etcd-pause": EtcdPause,
}
NETWORK_FAULTS: dict[str, Callable[[], Fault]] = {
    "partition-leader-from-followers": LeaderCutFromFollowers,
    "partition-leader-from-gateway": LeaderCutFromGateway,
    "slow-follower": SlowFollower,
}
PROXY_FAULTS: dict[str, Callable[[], Fault]] = {
    "drop-answers": DropAnswers,
    "delay-answers": DelayAnswers,
}
# Faults needing each node's data dir on a loop-mounted filesystem of its own.
MOUNTED_DISK_FAULTS: dict[str, Callable[[], Fault]] = {
    "disk-power-cut": DiskPowerCut,
    "disk-full": DiskFull,
    "last-replica-standing": LastReplicaStanding,
}
DISK_FAULTS: dict[str, Callable[[], Fault]] = {"disk-bitflip": DiskBitflip, **MOUNTED_DISK_FAULTS}
# Faults of the object store, for campaigns with a tiered topic (--tiered).
STORE_FAULTS: dict[str, Callable[[], Fault]] = {
    "store-kill": StoreKill,
    "store-slow": StoreSlow,
    "store-errors": StoreErrors,
}
ALL_FAULTS = {
    **PROCESS_FAULTS,
    **ETCD_FAULTS,
    **NETWORK_FAULTS,
    **PROXY_FAULTS,
    **DISK_FAULTS,
    **STORE_FAULTS,
}


def available_faults(etcd: bool = False, tiered: bool = False) -> list[str]:
    """The faults this machine and work tree can inject into a cluster with or without etcd
    (and a tiered topic's object store): network faults need root and the network lab (not
    yet with etcd), answer faults the proxy, power cuts and full disks root and loop mounts,
    store faults a tiered campaign."""
    names = list(PROCESS_FAULTS)
    if tiered:
        names += list(STORE_FAULTS)
    if etcd:
        names += list(ETCD_FAULTS)
    elif os.geteuid() == 0 and _importable("tests.faults.netns"):
        names += list(NETWORK_FAULTS)
    if _importable("tests.faults.proxy"):
        names += list(PROXY_FAULTS)
    if _importable("tests.faults.disks"):
        from tests.faults.disks import loop_mounts_possible

        names += [n for n in DISK_FAULTS if n not in MOUNTED_DISK_FAULTS or loop_mounts_possible()]
    return names


def _importable(module: str) -> bool:
    return importlib.util.find_spec(module) is not None
