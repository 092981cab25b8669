"""Which gateway holds which role: with the registry in etcd, this gateway's session (its
lease), the controller election and the claims on groups', transactions and share state
partitions, all over the keyspace; with the registry in the data dir, this gateway alone,
holding every role. The composition root (server.py) builds them once the registry is
read."""

from __future__ import annotations

from dataclasses import dataclass

from .election import ControllerElection, SoleController
from .etcd_keyspace import EtcdKeyspace
from .gateway_session import GatewaySession
from .group_coordinators import (
    SHARE_PREFIX,
    TRANSACTION_PREFIX,
    EtcdCoordination,
    SoleCoordinator,
)


@dataclass(frozen=True)
class GatewayRoles:
    session: GatewaySession | None
    election: ControllerElection | SoleController
    coordination: EtcdCoordination | SoleCoordinator  # groups' offsets partitions
    txn_coordination: EtcdCoordination | SoleCoordinator  # transactions partitions
    share_coordination: EtcdCoordination | SoleCoordinator  # share state partitions


def gateway_roles(keyspace: EtcdKeyspace | None, session_timeout_ms: int) -> GatewayRoles:
    if keyspace is None:
        return GatewayRoles(
            None, SoleController(), SoleCoordinator(), SoleCoordinator(), SoleCoordinator()
        )
    session = GatewaySession(keyspace, "", session_timeout_ms)
    roles = GatewayRoles(
        session,
        ControllerElection(keyspace, session),
        EtcdCoordination(keyspace, session),
        EtcdCoordination(keyspace, session, TRANSACTION_PREFIX, "transactions partition"),
        EtcdCoordination(keyspace, session, SHARE_PREFIX, "share state partition"),
    )
    # Every subscriber has its first snapshot before anything routes or decides.
    keyspace.start_watch()
    return roles
