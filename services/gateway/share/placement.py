"""Which gateway holds which share partitions: the coordinator of the partition's
__share_group_state partition (state_store.py places each key as Kafka's SharePartitionKey
does), claimed in etcd as group and transaction coordinators are (keys
`share_coordinators/<n>`, coordination/group_coordinators.py); on the file backend this
gateway holds them all.

Kafka keeps a SharePartition on the partition leader's broker and its state at the share
coordinator; seglog's brokers are its gateways, so one gateway (the share coordinator)
keeps both. A gateway that gains a state partition reads its share partitions back from the
topic on first use; one that loses it forgets them (`forget`), so a partition is never
answered from a stale copy after another gateway held it.
"""

from __future__ import annotations

from collections.abc import Callable

from seglog.errors import CoordinatorNotAvailableError, SeglogError

from ..coordination.group_coordinators import EtcdCoordination, SoleCoordinator
from .partition_states import PartitionId, PartitionStates
from .state_formats import StateKey, topic_uuid


class SharePlacement:
    def __init__(
        self,
        states: PartitionStates,
        coordination: EtcdCoordination | SoleCoordinator,
        internal_address_of: Callable[[str], str | None],
    ) -> None:
        """`internal_address_of(grpc_address)`: the peer server of the live gateway
        at that address (None when not known)."""
        self.states = states
        self.coordination = coordination
        self.internal_address_of = internal_address_of
        if isinstance(coordination, EtcdCoordination):
            coordination.gained.append(self.forget)
            coordination.lost.append(self.forget)

    def holder_of(self, pid: PartitionId) -> str:
        """ "" when this gateway holds the share partition, else the holder's internal
        listener; CoordinatorNotAvailableError while none can be found."""
        if isinstance(self.coordination, SoleCoordinator):
            return ""
        self.states.store.ensure_topic()
        key, topic_id = self.states.key_of(pid)
        partition = self.states.store.partition_for(key, topic_id)
        try:
            owner = self.coordination.coordinator_of(partition)
        except SeglogError as exc:
            raise CoordinatorNotAvailableError(
                f"no gateway holds share partition {pid}: {exc}"
            ) from None
        if owner == self.coordination.address:
            return ""
        internal = self.internal_address_of(owner) if owner else None
        if not internal:
            raise CoordinatorNotAvailableError(
                f"share partition {pid} is held by the gateway at {owner or '(none yet)'}, "
                "whose peer server is not known"
            )
        return internal

    def coordinator_address(self, group_id: str, topic_id: str, partition: int) -> str:
        """The gRPC address of the gateway holding the share partition whose Kafka key is
        "group_id:topic_id:partition" (FindCoordinator's SHARE key), "" for this one,
        claiming its state partition when none holds it; CoordinatorNotAvailableError
        while none can be found. The topic is not looked up: Kafka places the key by its
        hash alone (SharePartitionKey)."""
        if isinstance(self.coordination, SoleCoordinator):
            return ""
        self.states.store.ensure_topic()
        key = StateKey(group_id, topic_uuid(topic_id), partition)
        state_partition = self.states.store.partition_for(key, topic_id)
        try:
            owner = self.coordination.coordinator_of(state_partition)
        except SeglogError as exc:
            raise CoordinatorNotAvailableError(
                f"no gateway holds share state partition {state_partition}: {exc}"
            ) from None
        if not owner:
            raise CoordinatorNotAvailableError(
                f"no gateway holds share state partition {state_partition} yet"
            )
        return "" if owner == self.coordination.address else owner

    def forget(self, state_partition: int) -> None:
        self.states.forget_state_partition(state_partition)
