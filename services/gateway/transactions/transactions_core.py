"""The transactions core as the composition root builds it: the log, the placement, the
marker writer, the state machine and the queries, and one background thread that every
`transaction.abort.timed.out.transaction.cleanup.interval.ms` aborts timed-out transactions
and takes up log partitions: each one this gateway coordinates is read back (a restarted
sole gateway resumes its Prepare states at once), and on the controller gateway each one no
gateway holds is read and, when a transaction in it is unfinished, claimed (so a transaction
whose coordinator died completes or times out without any client asking; the others stay
unclaimed until a client's FindCoordinator places them, which spreads them over gateways).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import grpc

from seglog.errors import SeglogError

from ..authorization import Authorization
from ..cluster.registry import Registry
from ..coordination.group_coordinators import EtcdCoordination, SoleCoordinator
from ..node_connections import NodeConnections
from .completion_waits import CompletionWaits
from .coordinator import TransactionCoordinator, TransactionSettings
from .marker_calls import MarkerCalls
from .markers import MarkerWriter
from .placement import TransactionPlacement
from .queries import TransactionQueries
from .remote_verification import RemoteVerifier
from .state import PREPARING, TxnState
from .txn_log import TRANSACTION_STATE_TOPIC, TransactionLog

logger = logging.getLogger(__name__)

LOG_WRITE_TIMEOUT_MS = 5000  # Kafka's transaction.state.log... request timeout for appends


class TransactionsCore:
    def __init__(
        self,
        registry: Registry,
        connections: NodeConnections,
        authorization: Authorization,
        *,
        create_topic: Callable[[str, int, dict[str, str]], None],
        allocate_producer_id: Callable[[], int],
        offsets_partition_for: Callable[[str], int],
        coordination: EtcdCoordination | SoleCoordinator,
        groups: object | None = None,
        settings: TransactionSettings | None = None,
        gateway_credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        settings = settings or TransactionSettings()
        self.settings = settings
        self.log = TransactionLog(
            registry,
            connections,
            create_topic,
            num_partitions=settings.transaction_state_log_num_partitions,
            write_timeout_ms=LOG_WRITE_TIMEOUT_MS,
        )
        self.markers = MarkerWriter(
            registry, connections, lambda c: self.coordinator.complete(c), groups=groups
        )
        # A leader change sends the markers waiting on its partitions again at once.
        registry.listeners.append(self.markers.leaders_changed)
        self.placement = TransactionPlacement(
            self.log, coordination, lambda m, e: self.coordinator.resume(m, e)
        )
        self.waits = CompletionWaits()
        self.coordinator = TransactionCoordinator(
            registry,
            authorization,
            self.placement,
            self.markers,
            allocate_producer_id,
            offsets_partition_for,
            settings,
            self.waits,
        )
        self.queries = TransactionQueries(self.placement, authorization)
        self.marker_calls = MarkerCalls(registry, connections, authorization)
        # Asks the coordinating gateway about a transactional id coordinated elsewhere.
        self.remote_verifier = RemoteVerifier(gateway_credentials)
        # True on the gateway that adopts orphaned log partitions (the controller).
        self.adopts_orphans: Callable[[], bool] = lambda: True
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="txn-timeouts", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self.markers.stop()
        self.remote_verifier.close()
        self.waits.stop()

    def _run(self) -> None:
        interval_s = (
            self.settings.transaction_abort_timed_out_transaction_cleanup_interval_ms / 1000
        )
        while True:
            try:
                self.take_up_partitions()
                self.coordinator.abort_timed_out()
            except Exception:  # the next round tries again
                logger.exception("transaction coordinator's periodic work")
            if self._stop.wait(interval_s):
                return

    def take_up_partitions(self) -> None:
        """Read back each log partition this gateway coordinates, and (controller) claim the
        unclaimed ones with unfinished transactions (once the topic exists)."""
        if TRANSACTION_STATE_TOPIC not in self.log.registry.topics:
            return
        coordination = self.placement.coordination
        for partition in range(self.log.num_partitions):
            if isinstance(coordination, EtcdCoordination):
                owner = coordination.owner(partition)
                if owner != coordination.address and not (
                    not owner and self.adopts_orphans() and self._unfinished(partition)
                ):
                    continue
                try:
                    if coordination.coordinator_of(partition) != coordination.address:
                        continue  # another gateway claimed it first
                except SeglogError:
                    continue
            with self.placement.lock(partition):
                try:
                    self.placement.transactions(partition)
                except SeglogError as exc:
                    logger.info(
                        "%s-%d not read back yet: %s", TRANSACTION_STATE_TOPIC, partition, exc
                    )

    def _unfinished(self, partition: int) -> bool:
        """Whether an unclaimed log partition holds a transaction not yet complete."""
        try:
            loaded = self.log.load(partition)
        except SeglogError:
            return False
        unfinished = (TxnState.ONGOING, *PREPARING)
        return any(
            value is not None and TxnState(value.status) in unfinished for value in loaded.values()
        )
