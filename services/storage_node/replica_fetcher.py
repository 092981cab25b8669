"""A follower's fetcher (Kafka's ReplicaFetcherThread): one thread per leader node, copying
the partitions this node follows there by Kafka's replica fetch (`replica_id` set), node to
node: through the leader's bulk listener when the cluster has a secret (the leader sends
from its files with sendfile, this side receives into the buffer it appends from; see
proto/seglog/v1/bulk.md), else, or while the bulk path fails, StorageNode.Fetch.

Each round asks, per partition, from the follower's log end offset, naming the leader epoch
it follows and the epoch of its last batch, through a fetch session (follower_session.py,
fetch_sessions.py; Kafka's KIP-227): the first request names every partition, later ones
only those whose fetch state changed (answered, added, removed, backing off), and the
leader answers only partitions with news; an idle round names and answers none. A partition
added or removed while a round waits at the leader joins the next round (at most
`replica.fetch.wait.max.ms` later), as in Kafka. A round that fails in any way drops the
session: the next request is a full one. The answers are applied in order:
- records: appended as the leader stored them (Log.append_as_follower: offsets, timestamps
  and epochs kept, nothing re-encoded), rolling segments at the leader's segment base
  offsets so the files end byte-identical; then the high watermark becomes the leader's
  (clamped to the log end) and the log start moves up to the leader's.
- a diverging epoch (KIP-320/KIP-595): the follower holds batches the leader does not; it
  truncates to the offset Kafka's AbstractFetcherThread computes (below) and fetches again.
- OFFSET_OUT_OF_RANGE: asked for the leader's log ends, it truncates to a shorter leader log,
  or starts at the leader's log start when behind it (a tiered topic: tiered_catch_up.py).
- other errors (a fenced or unknown epoch, the leader down): it backs off for
  `replica.fetch.backoff.ms`; the registry's next state moves it to its new leader.
- a first batch starting below the follower's log end and holding it (the logs diverged
  inside a batch): it truncates to that batch's base and fetches again (follower_truncation).
- records the log refuses otherwise (failing checks, a full disk): that partition alone
  backs off, logged as an error; the round goes on (as Kafka's AbstractFetcherThread does).

Truncation point for a diverging epoch (leader answered epoch E ending at offset X):
    X undefined (-1)                        -> the high watermark
    locally, epoch E's entry is E itself    -> min(local end of E, X, LEO)
    locally, the largest epoch <= E is F<E  -> min(local end of F, LEO), then ask again
    nothing known locally for E             -> min(X, LEO)
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

import grpc

from seglog.errors import SeglogError
from seglog.rpc import grants
from seglog.rpc.bulk_client import BulkConnection, BulkFetchError
from seglog.rpc.channels import open_channel
from seglog.security.tls import TlsFiles, channel_credentials, client_ssl_context
from seglog.v1 import bulk_pb2, common_pb2, storage_pb2_grpc

from .follower_session import FollowerSession, PartitionFetch
from .follower_truncation import cut_at_leader_batch, repair_out_of_range, truncation_offset
from .partition import Partition
from .remote_fetches import RemoteFetches
from .replication_throttle import ReplicationThrottle, round_max_bytes

logger = logging.getLogger(__name__)

_FETCH = "/seglog.v1.StorageNode/Fetch"
BULK_RETRY_S = 30.0  # after a bulk failure, the gRPC path this long
BULK_CONNECT_TIMEOUT_S = 5.0
TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class FetcherSettings:
    """Kafka's replica.fetch.* settings, with its defaults."""

    replica_fetch_wait_max_ms: int = 500
    replica_fetch_min_bytes: int = 1
    replica_fetch_max_bytes: int = 1024 * 1024
    replica_fetch_response_max_bytes: int = 10 * 1024 * 1024
    replica_fetch_backoff_ms: int = 1000


@dataclass
class _Followed:
    partition: Partition
    leader_epoch: int  # the term this fetcher follows; a newer one comes as a new entry
    backoff_until: float = 0.0


class _SessionGone(Exception):
    """The leader answered a session error: open a new session with a full request."""


class ReplicaFetcher:
    def __init__(
        self,
        node_id: int,
        leader_id: int,
        address: str,
        settings: FetcherSettings,
        *,
        bulk_address: str = "",
        secret: bytes | None = None,
        tls: TlsFiles | None = None,
        throttle: ReplicationThrottle | None = None,
    ) -> None:
        self.node_id = node_id  # this follower's: the replica id of its fetches
        # The node's reassignment throttle, shared by its fetchers (replication_throttle.py).
        self.throttle = throttle or ReplicationThrottle()
        self.bulk_address = bulk_address
        self.secret = secret
        self._bulk_connection: BulkConnection | None = None
        self._bulk_unusable_until = 0.0
        self._grants: grants.ReusedGrants | None = None  # made with the first bulk round
        self.leader_id = leader_id
        self.address = address
        self.settings = settings
        self._partitions: dict[TopicPartition, _Followed] = {}
        self._lock = threading.Lock()
        self._session = FollowerSession()
        self._changed_partitions: set[TopicPartition] = set()  # under _lock
        self._backoffs: dict[TopicPartition, float] = {}  # the fetcher thread's: until when
        self.rounds = 0  # whole answers received (tests and measurements)
        self.remote: RemoteFetches | None = None  # a tiered topic's start (tiered_catch_up.py)
        self._changed = threading.Event()
        self._stop = threading.Event()
        self.tls = tls
        self._channel = open_channel(
            address, credentials=None if tls is None else channel_credentials(tls)
        )
        self._fetch = self._channel.unary_stream(
            _FETCH,
            request_serializer=common_pb2.FetchRequest.SerializeToString,
            response_deserializer=common_pb2.FetchResponse.FromString,
        )
        self._stub = storage_pb2_grpc.StorageNodeStub(self._channel)
        self._call: grpc.Call | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"replica-fetcher-{leader_id}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def shutdown(self) -> None:
        self._stop.set()
        self._changed.set()
        call = self._call
        if call is not None:
            call.cancel()
        self._close_bulk()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)
        self._channel.close()

    def add_partition(self, partition: Partition) -> None:
        tp = (partition.topic, partition.partition)
        self._prepare(partition)
        with self._lock:
            self._partitions[tp] = _Followed(partition, partition.leader_epoch)
            self._changed_partitions.add(tp)
        self._changed.set()

    def followed_partitions(self) -> list[Partition]:
        with self._lock:
            return [entry.partition for entry in self._partitions.values()]

    def remove_partition(self, tp: TopicPartition) -> None:
        with self._lock:
            removed = self._partitions.pop(tp, None)
            if removed is not None:
                self._changed_partitions.add(tp)
        if removed is not None:
            self._changed.set()

    @staticmethod
    def _prepare(partition: Partition) -> None:
        """Kafka's initial fetch state: a log without epochs proves nothing: cut it to its HW."""
        log = partition.log
        if log.leader_epochs.latest_epoch < 0 and log.log_end_offset > log.high_watermark:
            with partition._lock:
                log.truncate_to(log.high_watermark)

    # -- the loop --------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            request, followed = self._build_request()
            if request is None:
                # Until a backoff ends (a throttled partition's, often well under 0.5 s).
                next_due = min(self._backoffs.values(), default=None)
                wait_s = 0.5 if followed else 5.0
                if next_due is not None:
                    wait_s = min(wait_s, max(next_due - time.monotonic(), 0.001))
                self._changed.wait(wait_s)
                self._changed.clear()
                continue
            self._changed.clear()
            answered = False
            try:
                answered = self._round(request, followed)
            finally:
                if answered:
                    self._session.answered()
                    self.rounds += 1
                else:
                    self._session.reset()

    def _round(
        self, request: common_pb2.FetchRequest, followed: dict[TopicPartition, _Followed]
    ) -> bool:
        """One request and its answer, through the bulk path when it serves, else gRPC;
        True when the whole answer arrived."""
        if self._bulk_usable():
            try:
                self._fetch_bulk(request, followed)
                return True
            except _SessionGone:
                return False  # a full request at once
            except (BulkFetchError, OSError, SeglogError) as exc:
                if self._stop.is_set():
                    return False
                # The gRPC path serves meanwhile (with a new session, a full request); the
                # bulk one is tried again later.
                logger.info("bulk fetch from leader %d failed: %s", self.leader_id, exc)
                self._close_bulk(unusable_for_s=BULK_RETRY_S)
                return False
        try:
            self._call = self._fetch(
                request, timeout=self.settings.replica_fetch_wait_max_ms / 1000 + 30
            )
            for response in self._call:
                self._apply(response, response.records, followed)
            return True
        except _SessionGone:
            if self._call is not None:
                self._call.cancel()
        except grpc.RpcError as exc:
            if self._stop.is_set() or exc.code() == grpc.StatusCode.CANCELLED:
                return False
            logger.info("fetch from leader %d failed: %s", self.leader_id, exc.code())
            self._back_off_all(followed)
        except Exception:
            logger.exception("replica fetcher for leader %d failed", self.leader_id)
            self._back_off_all(followed)
        finally:
            self._call = None
        return False

    # -- the bulk path (bulk.md): the leader sends from its files, this side recv_into ------

    def _bulk_usable(self) -> bool:
        return (
            self.secret is not None
            and bool(self.bulk_address)
            and time.monotonic() >= self._bulk_unusable_until
        )

    def _fetch_bulk(
        self, request: common_pb2.FetchRequest, followed: dict[TopicPartition, _Followed]
    ) -> None:
        """One round through the leader's bulk listener, under a grant this node signs for
        itself (the replica id is its own; the request carries the epochs)."""
        if self._grants is None:
            assert self.secret is not None
            self._grants = grants.ReusedGrants(self.secret, self.leader_id, replica_id=self.node_id)
        grant, signature = self._grants.get(
            tuple((p.topic, p.partition) for p in request.partitions)
        )
        connection = self._bulk_connection
        if connection is None or connection.closed:
            tls = None if self.tls is None else client_ssl_context(self.tls)
            connection = BulkConnection.open(
                self.bulk_address, connect_timeout_s=BULK_CONNECT_TIMEOUT_S, ssl_context=tls
            )
            self._bulk_connection = connection
        connection.send(grant, signature, request, node_id=self.leader_id)
        for message in connection.receive():
            self._apply(message.header, message.records, followed)

    def _close_bulk(self, unusable_for_s: float = 0.0) -> None:
        connection, self._bulk_connection = self._bulk_connection, None
        if unusable_for_s:
            self._bulk_unusable_until = time.monotonic() + unusable_for_s
        if connection is not None:
            connection.close()

    def _build_request(
        self,
    ) -> tuple[common_pb2.FetchRequest | None, dict[TopicPartition, _Followed]]:
        """The next session request: every partition ready to fetch when no session is
        open, else only those that changed (O(changes), not O(partitions))."""
        now = time.monotonic()
        with self._lock:
            followed = dict(self._partitions)
            changed, self._changed_partitions = self._changed_partitions, set()
        due = [tp for tp, until in self._backoffs.items() if until <= now]
        for tp in due:
            del self._backoffs[tp]
        changed.update(due)
        candidates = changed if self._session.is_open else followed.keys()
        ready = {}
        for tp in candidates:
            entry = followed.get(tp)
            if entry is None or entry.backoff_until > now:
                continue
            rate = self._throttled_rate(entry)
            if rate and self.throttle.wait_s() > 0:
                self._back_off(tp, entry, self.throttle.wait_s())
                continue
            log = entry.partition.log
            ready[tp] = PartitionFetch(
                log.log_end_offset,
                entry.leader_epoch,
                log.leader_epochs.latest_epoch,
                log.log_start_offset,
                round_max_bytes(rate, self.settings.replica_fetch_max_bytes) if rate else 0,
            )
        request = common_pb2.FetchRequest(
            replica_id=self.node_id,
            min_bytes=self.settings.replica_fetch_min_bytes,
            max_wait_ms=self.settings.replica_fetch_wait_max_ms,
            max_bytes=self.settings.replica_fetch_response_max_bytes,
        )
        if not self._session.fill(request, ready, changed, self.settings.replica_fetch_max_bytes):
            return None, followed
        if not self._session.sent:
            # It only forgets: the leader has nothing left to wait for, and this side's own
            # wait (for a backoff's end, a new partition) must not sit behind the leader's.
            request.max_wait_ms = 0
        return request, followed

    def _back_off(self, tp: TopicPartition, entry: _Followed, for_s: float | None = None) -> None:
        if for_s is None:
            for_s = self.settings.replica_fetch_backoff_ms / 1000
        entry.backoff_until = time.monotonic() + for_s
        self._backoffs[tp] = entry.backoff_until

    def _throttled_rate(self, entry: _Followed) -> int:
        """The bytes/s this replica's copy of the partition is held to (0: none): set while
        a reassignment adds this replica with a throttle."""
        registration = entry.partition.registration
        return 0 if registration is None else registration.throttles(self.node_id)

    def _back_off_all(self, followed: dict[TopicPartition, _Followed]) -> None:
        for tp, entry in followed.items():
            self._back_off(tp, entry)
        self._stop.wait(min(self.settings.replica_fetch_backoff_ms / 1000, 1.0))

    def _apply(
        self,
        response: common_pb2.FetchResponse | bulk_pb2.BulkFetchChunk,
        records: bytes | memoryview,
        followed: dict[TopicPartition, _Followed],
    ) -> None:
        if not response.topic:  # a session answer's header
            if not self._session.header(response.session_id, response.session_error):
                logger.info(
                    "fetch session with leader %d: %s; opening a new one",
                    self.leader_id,
                    common_pb2.FetchSessionError.Name(response.session_error),
                )
                raise _SessionGone()
            return
        tp = (response.topic, response.partition)
        entry = followed.get(tp)
        with self._lock:
            current = self._partitions.get(tp)
            self._changed_partitions.add(tp)  # its fetch state may change now
        if current is None:
            return  # no longer followed here: the next request forgets it
        if entry is None or current is not entry:
            self._session.forget_sent(tp)  # followed anew since: named again
            return
        partition = entry.partition
        with partition._lock:
            registration = partition.registration
            if (
                registration is None
                or registration.leader != self.leader_id
                or registration.leader_epoch != entry.leader_epoch
            ):
                # Its entry is replaced or unfollowed shortly; meanwhile it rests, and the
                # leader's session forgets it (and what it answered) until it is named again.
                self._back_off(tp, entry)
                return
            log = partition.log
            if response.error != common_pb2.NONE:
                self._fetch_error(entry, response)
                return
            if response.HasField("diverging_epoch"):
                target = truncation_offset(
                    log, response.diverging_epoch, response.diverging_end_offset
                )
                logger.info(
                    "%s-%d: diverges from leader %d (epoch %d ends at %d there): truncating to %d",
                    tp[0],
                    tp[1],
                    self.leader_id,
                    response.diverging_epoch,
                    response.diverging_end_offset,
                    target,
                )
                before = (log.log_end_offset, log.leader_epochs.latest_epoch)
                log.truncate_to(target)
                if (log.log_end_offset, log.leader_epochs.latest_epoch) == before:
                    # No progress: asking again at once would get the same answer.
                    self._back_off(tp, entry)
                return
            if records:
                try:
                    log.append_as_follower(
                        records, segment_base_offset=response.segment_base_offset
                    )
                except SeglogError as exc:
                    if cut_at_leader_batch(log, records) is None:  # else diverged: fetch again
                        self._refused(tp, entry, exc)
                    return
                rate = registration.throttles(self.node_id)
                if rate:
                    wait_s = self.throttle.charge(len(records), rate)
                    if wait_s > 0:
                        self._back_off(tp, entry, wait_s)
            log.update_high_watermark(min(response.high_watermark, log.log_end_offset))
            if log.log_start_offset < response.log_start_offset <= log.log_end_offset:
                log.delete_records_before(response.log_start_offset)

    def _refused(self, tp: TopicPartition, entry: _Followed, exc: SeglogError) -> None:
        """The log refused the partition's records: it alone rests (module docstring)."""
        logger.error(
            "%s-%d: records from leader %d not appended at offset %d: %s",
            tp[0],
            tp[1],
            self.leader_id,
            entry.partition.log.log_end_offset,
            exc,
        )
        self._back_off(tp, entry)

    def _fetch_error(
        self, entry: _Followed, response: common_pb2.FetchResponse | bulk_pb2.BulkFetchChunk
    ) -> None:
        if response.error == common_pb2.OFFSET_OUT_OF_RANGE and repair_out_of_range(
            self._stub, entry.partition.log, response.topic, response.partition, self.remote
        ):
            return
        logger.info(
            "%s-%d: fetch from leader %d: %s %s",
            response.topic,
            response.partition,
            self.leader_id,
            common_pb2.ErrorCode.Name(response.error),
            response.error_message,
        )
        self._back_off((response.topic, response.partition), entry)
