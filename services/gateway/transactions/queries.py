"""DescribeTransactions and ListTransactions over the coordinator's transactions, as Kafka
answers them: Describe on each transactional id (an id the caller may not Describe is
refused in a describe and left out of a list); a list covers the log partitions this gateway
coordinates (the admin client asks every broker and merges)."""

from __future__ import annotations

from dataclasses import dataclass

from seglog.coordinator_errors import TransactionalIdNotFoundError
from seglog.errors import SeglogError

from ..authorization import Authorization
from ..broker.caller import Caller
from .log_formats import TopicPartition
from .placement import TransactionPlacement
from .state import BY_KAFKA_NAME, TxnState


@dataclass(frozen=True)
class TransactionDescription:
    transactional_id: str
    state: str  # Kafka's name: Empty, Ongoing, PrepareCommit, ...
    timeout_ms: int
    start_ms: int
    producer_id: int
    producer_epoch: int
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str


class TransactionQueries:
    def __init__(self, placement: TransactionPlacement, authorization: Authorization) -> None:
        self.placement = placement
        self.authorization = authorization

    def describe(self, caller: Caller, transactional_id: str) -> TransactionDescription:
        self.authorization.check(
            caller, [("Describe", "transactional_id", transactional_id)], "DescribeTransactions"
        )
        partition = self.placement.check_here(transactional_id)
        with self.placement.lock(partition):
            metadata = self.placement.transactions(partition).get(transactional_id)
            if metadata is None or metadata.producer_epoch < 0:
                raise TransactionalIdNotFoundError(
                    f"transactional id {transactional_id!r} is not known"
                )
            return TransactionDescription(
                transactional_id,
                metadata.state.kafka_name,
                metadata.timeout_ms,
                metadata.start_ms,
                metadata.producer_id,
                metadata.producer_epoch,
                tuple(sorted(metadata.partitions)),
            )

    def list(
        self,
        caller: Caller,
        states: list[str],
        producer_ids: list[int],
        min_duration_ms: int,
        now_ms: int,
    ) -> tuple[list[TransactionListing], list[str]]:
        """The transactions matching every filter given, and the state names not known."""
        unknown = [name for name in states if name not in BY_KAFKA_NAME]
        wanted = {BY_KAFKA_NAME[name] for name in states if name in BY_KAFKA_NAME}
        listed: list[TransactionListing] = []
        for partition in self.placement.owned_partitions():
            with self.placement.lock(partition):
                try:
                    transactions = list(self.placement.transactions(partition).values())
                except SeglogError:
                    continue  # unreadable now: the admin client's other answers stand
            for metadata in transactions:
                if metadata.producer_epoch < 0:
                    continue
                if states and metadata.state not in wanted:
                    continue
                if producer_ids and metadata.producer_id not in producer_ids:
                    continue
                if min_duration_ms >= 0 and not (
                    metadata.state is TxnState.ONGOING
                    and now_ms - metadata.start_ms >= min_duration_ms
                ):
                    continue
                if not self.authorization.allows(
                    caller, "Describe", "transactional_id", metadata.transactional_id
                ):
                    continue
                listed.append(
                    TransactionListing(
                        metadata.transactional_id, metadata.producer_id, metadata.state.kafka_name
                    )
                )
        return sorted(listed, key=lambda t: t.transactional_id), unknown
