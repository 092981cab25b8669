"""Which leader each followed partition is copied from (Kafka's ReplicaFetcherManager): one
`ReplicaFetcher` (replica_fetcher.py) per leader node, created when the first partition
followed there arrives, and replaced, carrying its partitions, when that leader's addresses
change. The replica manager decides what is followed where (from each partition's
registration); this module only keeps the fetchers. Callers serialize their calls (the
replica manager's partitions lock)."""

from __future__ import annotations

from seglog.security.tls import TlsFiles

from .partition import Partition
from .remote_fetches import RemoteFetches
from .replica_fetcher import FetcherSettings, ReplicaFetcher
from .replication_throttle import ReplicationThrottle

TopicPartition = tuple[str, int]


class FollowerFetchers:
    def __init__(self, node_id: int, settings: FetcherSettings) -> None:
        self.node_id = node_id
        self.settings = settings
        self.by_leader: dict[int, ReplicaFetcher] = {}
        self.throttle = ReplicationThrottle()  # one budget for the whole node
        # The node's object store reads, for a tiered topic's start (tiered_catch_up.py).
        self.remote: RemoteFetches | None = None

    def use_remote(self, remote: RemoteFetches) -> None:
        self.remote = remote
        for fetcher in self.by_leader.values():
            fetcher.remote = remote

    def follow(
        self,
        held: Partition,
        leader: int,
        address: str,
        bulk_address: str,
        secret: bytes | None,
        tls: TlsFiles | None,
    ) -> None:
        """Copy `held` from `leader` at these addresses (after `unfollow` of its previous
        leader)."""
        existing = self.by_leader.get(leader)
        if (
            existing is not None
            and existing.address == address
            and existing.bulk_address == bulk_address
        ):
            existing.add_partition(held)
            return
        carried: list[Partition] = []
        if existing is not None:
            # The leader's address changed (it restarted elsewhere, or its bulk listener
            # came or went): every partition still followed there moves to the new
            # fetcher. Their terms did not change, so no later state would re-add them,
            # and they would stay silently unfetched until this node restarts.
            carried = existing.followed_partitions()
            existing.shutdown()
        fetcher = ReplicaFetcher(
            self.node_id,
            leader,
            address,
            self.settings,
            bulk_address=bulk_address,
            secret=secret,
            tls=tls,
            throttle=self.throttle,
        )
        fetcher.remote = self.remote
        self.by_leader[leader] = fetcher
        fetcher.start()
        for other in carried:
            if other is not held:
                fetcher.add_partition(other)
        fetcher.add_partition(held)

    def unfollow(self, tp: TopicPartition) -> None:
        for fetcher in self.by_leader.values():
            fetcher.remove_partition(tp)

    def detach_all(self) -> list[ReplicaFetcher]:
        """Forget every fetcher and hand them back (for shutting down outside the lock)."""
        fetchers = list(self.by_leader.values())
        self.by_leader.clear()
        return fetchers
