"""The share core built over the gateway's routing: its state written and read through the
same produce and fetch the data path uses, start offsets from the leaders' ListOffsets, each
share partition's operations done where it is held (placement.py), here or forwarded to the
holder (forwarding.py), whose ShareState service is built here too."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import grpc

from seglog.errors import InvalidConfigError, SeglogError
from seglog.v1 import common_pb2

from ..authorization import Authorization
from ..cluster.group_configs import GroupConfig
from ..cluster.registry import Registry
from ..coordination.group_coordinators import EtcdCoordination, SoleCoordinator
from ..routing.data_plane import DataPlane, error_of
from .dead_letters import DeadLetterQueue
from .forwarding import RemoteGateways, ShareStateService
from .partition_ops import LocalOps, ShareRouter
from .partition_states import PartitionStates
from .placement import SharePlacement
from .settings import ShareSettings
from .share_core import ShareGroups
from .share_group_log import ShareGroupLog
from .state_access import RoutedAccess
from .state_store import StateStore


class ShareParts(NamedTuple):
    core: ShareGroups
    state_service: ShareStateService  # for the peer server (internal_listener.py build_peer_server)


def share_groups(
    registry: Registry,
    authorization: Authorization,
    data_plane: DataPlane,
    create_topic: Callable[[str, int, dict[str, str]], None],
    settings: ShareSettings,
    consumer_group_exists: Callable[[str], bool] = lambda group_id: False,
    *,
    coordination: EtcdCoordination | SoleCoordinator | None = None,
    internal_address_of: Callable[[str], str | None] = lambda address: None,
    peers: Callable[[], list[str]] = list,
    credentials: grpc.ChannelCredentials | None = None,
    group_config: Callable[[str], GroupConfig] | None = None,
    create_dead_letter_topic: Callable[[str], None] | None = None,
    group_log: ShareGroupLog | None = None,
    not_coordinated_here: Callable[[str], SeglogError | None] = lambda group_id: None,
) -> ShareParts:
    """The share core over the data plane's routing (its state written and read through the
    same produce and fetch, its start offsets from the leaders' ListOffsets).
    `create_dead_letter_topic(name)`: a dead-letter topic of the cluster's defaults."""
    store = StateStore(
        registry,
        data_plane.producing,
        data_plane.fetching,
        data_plane.queries,
        create_topic,
        settings.share_coordinator_state_topic_num_partitions,
    )

    def offset_of(topic: str, partition: int, timestamp: int) -> int:
        (result,) = data_plane.queries.per_leader_list_offsets(
            [common_pb2.ListOffsetsPartition(topic=topic, partition=partition, timestamp=timestamp)]
        )
        error = error_of(result.error, result.error_message)
        if error is not None:
            raise error
        return int(result.offset)

    states = PartitionStates(registry, store, settings, offset_of, group_config)

    def no_creation(name: str) -> None:
        raise InvalidConfigError(f"dead-letter topic {name!r} is not created here")

    dead_letters = DeadLetterQueue(
        registry,
        RoutedAccess(data_plane.producing, data_plane.fetching, data_plane.queries),
        settings,
        create_dead_letter_topic or no_creation,
        group_config,
    )
    local = LocalOps(states, dead_letters)
    placement = SharePlacement(
        states, coordination if coordination is not None else SoleCoordinator(), internal_address_of
    )
    router = ShareRouter(local, placement.holder_of, RemoteGateways(credentials), peers)
    core = ShareGroups(
        registry,
        authorization,
        data_plane,
        states,
        settings,
        consumer_group_exists,
        router,
        log=group_log,
        not_coordinated_here=not_coordinated_here,
        share_coordinator=placement.coordinator_address,
    )
    return ShareParts(core, ShareStateService(local, placement.holder_of))
