"""The share core built over the gateway's routing: its state written and read through the
same produce and fetch the data path uses, start offsets from the leaders' ListOffsets."""

from __future__ import annotations

from collections.abc import Callable

from seglog.v1 import common_pb2

from ..authorization import Authorization
from ..cluster.registry import Registry
from ..routing.data_plane import DataPlane, error_of
from .partition_states import PartitionStates
from .settings import ShareSettings
from .share_core import ShareGroups
from .state_store import StateStore


def share_groups(
    registry: Registry,
    authorization: Authorization,
    data_plane: DataPlane,
    create_topic: Callable[[str, int, dict[str, str]], None],
    settings: ShareSettings,
    consumer_group_exists: Callable[[str], bool] = lambda group_id: False,
) -> ShareGroups:
    """The share core over the data plane's routing (its state written and read through the
    same produce and fetch, its start offsets from the leaders' ListOffsets)."""
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

    return ShareGroups(
        registry,
        authorization,
        data_plane,
        PartitionStates(registry, store, settings, offset_of),
        settings,
        consumer_group_exists,
    )
