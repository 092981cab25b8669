"""The share groups' core: what the adapters call, with a `Caller` and typed requests.

Authorization as Kafka's KafkaApis checks it: ShareGroupHeartbeat needs Read on the group
(and Describe on each topic it subscribes to), ShareGroupDescribe Describe on the group,
ShareFetch and ShareAcknowledge Read on the group (else the whole request is refused) and
Read on each topic (else that topic's partitions are). Records are read from the partition
leaders through the data plane's typed fetch, the same as a Kafka Fetch's (routing/).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from seglog.errors import (
    GroupIdNotFoundError,
    InvalidRequestError,
    PermissionDeniedError,
    SeglogError,
    UnknownTopicOrPartitionError,
)

from ..authorization import Authorization
from ..broker.caller import Caller
from ..cluster.group_configs import READ_COMMITTED
from ..cluster.registry import Registry
from ..routing.call_scope import CallScope
from ..routing.data_plane import DataPlane, FetchPosition, FetchQuery
from ..routing.quotas import quota_user
from .batch_walk import batch_headers
from .committed_reads import committed_batches
from .partition_ops import AckBatch, LocalOps, ShareRouter, ShareStart
from .partition_states import PartitionId, PartitionStates
from .settings import ShareSettings
from .share_group_log import ShareGroupLog
from .share_membership import (
    ASSIGNOR,
    HeartbeatAnswer,
    ShareHeartbeat,
    ShareMember,
    ShareMembership,
)
from .share_partition import AcquiredRange
from .share_sessions import FINAL_EPOCH, INITIAL_EPOCH, ShareSessions

logger = logging.getLogger(__name__)

MAX_FETCH_BYTES = 55 * 1024 * 1024  # Kafka's fetch.max.bytes caps a client's max_bytes
MIN_READ_BYTES = 64 * 1024


class PartitionAsk(NamedTuple):
    topic: str
    partition: int
    acks: tuple[AckBatch, ...] = ()


@dataclass(frozen=True)
class ShareFetchQuery:
    group_id: str
    member_id: str
    session_epoch: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    max_records: int
    partitions: Sequence[PartitionAsk]
    forgotten: Sequence[tuple[str, int]] = ()


class PartitionAnswer(NamedTuple):
    topic: str
    partition: int
    error: SeglogError | None
    ack_error: SeglogError | None
    records: bytes
    acquired: tuple[AcquiredRange, ...]


@dataclass(frozen=True)
class ShareFetchAnswer:
    acquisition_lock_timeout_ms: int
    partitions: list[PartitionAnswer] = field(default_factory=list)


@dataclass(frozen=True)
class DescribedShareGroup:
    group_id: str
    error: SeglogError | None
    state: str = "Dead"
    epoch: int = 0
    assignment_epoch: int = 0
    assignor: str = ASSIGNOR
    members: tuple[ShareMember, ...] = ()


class ShareGroups:
    def __init__(
        self,
        registry: Registry,
        authorization: Authorization,
        data_plane: DataPlane,
        states: PartitionStates,
        settings: ShareSettings,
        consumer_group_exists: Callable[[str], bool] = lambda group_id: False,
        router: ShareRouter | None = None,
        log: ShareGroupLog | None = None,
        not_coordinated_here: Callable[[str], SeglogError | None] = lambda group_id: None,
        share_coordinator: Callable[[str, str, int], str] = lambda g, t, p: "",
    ) -> None:
        """`consumer_group_exists(group_id)`: whether a consumer (classic) group has the id,
        which a share group then cannot take (Kafka: "Group X is not a share group").
        `router`: where each share partition's state is held (all here by default).
        `log`: the groups' records in __consumer_offsets (None: memory only);
        `not_coordinated_here(group_id)`: why this gateway may not serve the group's
        membership (NotCoordinatorError naming the coordinator), None when it may."""
        self.not_coordinated_here = not_coordinated_here
        # (group, topic id, partition) -> the holding gateway's gRPC address, "" for this
        # one (placement.py): FindCoordinator's SHARE keys.
        self.share_coordinator = share_coordinator
        self.router = router if router is not None else ShareRouter(LocalOps(states))
        self.consumer_group_exists = consumer_group_exists
        self.registry = registry
        self.authorization = authorization
        self.data_plane = data_plane
        self.states = states
        self.settings = settings
        self.sessions = ShareSessions()
        self.membership = ShareMembership(
            self.partitions_of,
            self._member_gone,
            heartbeat_interval_ms=settings.group_share_heartbeat_interval_ms,
            session_timeout_ms=settings.group_share_session_timeout_ms,
            max_size=settings.group_share_max_size,
            group_config=states.group_config,
            log=log,
        )

    def partitions_of(self, topic: str) -> int:
        found = self.registry.topics.get(topic)
        return len(found.partitions) if found is not None else 0

    def _member_gone(self, group_id: str, member_id: str) -> None:
        self.sessions.drop_member(group_id, member_id)
        for pid, _ in self.states.of_group(group_id):
            # Through the local operations: what reaches the delivery limit is dead-lettered.
            self.router.local.release_member(pid, member_id)

    # -- membership -----------------------------------------------------------------------

    def heartbeat(self, caller: Caller, beat: ShareHeartbeat) -> HeartbeatAnswer:
        self.authorization.check(caller, [("Read", "group", beat.group_id)], "ShareGroupHeartbeat")
        for topic in beat.subscribed_topics or ():
            if not self.authorization.allows(caller, "Describe", "topic", topic):
                raise PermissionDeniedError(
                    f"{caller.principal} may not Describe topic {topic!r} (ShareGroupHeartbeat)",
                    details={"resource": "topic"},
                )
        problem = self.not_coordinated_here(beat.group_id)
        if problem is not None:
            raise problem
        if self.membership.group(beat.group_id) is None and self.consumer_group_exists(
            beat.group_id
        ):
            raise GroupIdNotFoundError(f"Group {beat.group_id} is not a share group.")
        return self.membership.heartbeat(beat)

    def describe(self, caller: Caller, group_ids: Sequence[str]) -> list[DescribedShareGroup]:
        self.membership.expire_all()  # members gone quiet are not shown
        out = []
        for group_id in group_ids:
            if not self.authorization.allows(caller, "Describe", "group", group_id):
                error = PermissionDeniedError(
                    f"{caller.principal} may not Describe group {group_id!r}"
                )
                out.append(DescribedShareGroup(group_id, error))
                continue
            problem = self.not_coordinated_here(group_id)
            if problem is not None:
                out.append(DescribedShareGroup(group_id, problem))
                continue
            with self.membership.lock:
                group = self.membership.loaded(group_id)
                if group is None:
                    out.append(DescribedShareGroup(group_id, None))
                    continue
                out.append(
                    DescribedShareGroup(
                        group_id,
                        None,
                        group.state,
                        group.epoch,
                        group.assignment_epoch,
                        ASSIGNOR,
                        tuple(group.members.values()),
                    )
                )
        return out

    def listing(self, caller: Caller) -> list[tuple[str, str]]:
        """(group, state) of every share group the caller may Describe."""
        self.membership.expire_all()
        with self.membership.lock:
            groups = [(g.group_id, g.state) for g in self.membership.groups.values()]
        return [g for g in groups if self.authorization.allows(caller, "Describe", "group", g[0])]

    def start_offsets(self, caller: Caller, group_id: str) -> dict[tuple[str, int], ShareStart]:
        """The share-partition start offset of each partition the group has read (its
        "committed" offset, as kafka-share-groups --describe shows it)."""
        self.authorization.check(
            caller, [("Describe", "group", group_id)], "DescribeShareGroupOffsets"
        )
        return {
            (topic, partition): start
            for (topic, partition), start in self.router.start_offsets(group_id).items()
            if self.authorization.allows(caller, "Describe", "topic", topic)
        }

    # -- fetching and acknowledging ------------------------------------------------------------

    def fetch(self, caller: Caller, query: ShareFetchQuery, scope: CallScope) -> ShareFetchAnswer:
        self.authorization.check(caller, [("Read", "group", query.group_id)], "ShareFetch")
        if query.session_epoch == INITIAL_EPOCH and any(p.acks for p in query.partitions):
            raise InvalidRequestError("a share session's first fetch acknowledges nothing")
        session = self.sessions.use(
            query.group_id,
            query.member_id,
            query.session_epoch,
            [(p.topic, p.partition) for p in query.partitions],
            query.forgotten,
        )
        answers: dict[tuple[str, int], PartitionAnswer] = {}
        for ask in query.partitions:
            if ask.acks:
                error = self._acknowledge(caller, query.group_id, query.member_id, ask)
                answers[(ask.topic, ask.partition)] = PartitionAnswer(
                    ask.topic, ask.partition, None, error, b"", ()
                )
        if session is None:  # the final request: the session is closed
            named = [(p.topic, p.partition) for p in query.partitions]
            self._member_gone_from_session(query.group_id, query.member_id, named)
        elif query.max_records > 0:
            self._fetch(caller, query, list(session.partitions), answers, scope)
            self._meter(caller, answers.values(), scope)
        return ShareFetchAnswer(self._lock_ms(query.group_id), list(answers.values()))

    def _meter(self, caller: Caller, answers: Iterable[PartitionAnswer], scope: CallScope) -> None:
        """The records' bytes count against the caller's consumer_byte_rate, as a Fetch's do."""
        quotas = self.data_plane.quotas()
        if quotas is not None:
            size_bytes = sum(len(a.records) for a in answers)
            user = quota_user(caller.principal)
            quotas.hold_share_fetch_of(user, caller.client_id or "", scope, size_bytes)

    def acknowledge(
        self,
        caller: Caller,
        group_id: str,
        member_id: str,
        session_epoch: int,
        partitions: Sequence[PartitionAsk],
    ) -> ShareFetchAnswer:
        self.authorization.check(caller, [("Read", "group", group_id)], "ShareAcknowledge")
        self.sessions.check(group_id, member_id, session_epoch)
        answers = [
            PartitionAnswer(
                p.topic,
                p.partition,
                self._acknowledge(caller, group_id, member_id, p),
                None,
                b"",
                (),
            )
            for p in partitions
        ]
        if session_epoch == FINAL_EPOCH:
            named = [(p.topic, p.partition) for p in partitions]
            self._member_gone_from_session(group_id, member_id, named)
        return ShareFetchAnswer(self._lock_ms(group_id), answers)

    def _lock_ms(self, group_id: str) -> int:
        """The group's share.record.lock.duration.ms (its own, else the gateway's)."""
        return round(self.states.limits_of(group_id).lock_duration_s * 1000)

    def _member_gone_from_session(
        self, group_id: str, member_id: str, named: Sequence[tuple[str, int]]
    ) -> None:
        """Release what the member holds: on every partition of the group held here, and on
        those its last request named wherever they are held (elsewhere, what it held of
        others is released when its locks lapse)."""
        for pid, _ in self.states.of_group(group_id):
            self.router.local.release_member(pid, member_id)
        for topic, index in named:
            try:
                self.router.release_member((group_id, topic, index), member_id)
            except SeglogError as exc:
                logger.info("releasing %s's records of %s-%d: %s", member_id, topic, index, exc)

    def _acknowledge(
        self, caller: Caller, group_id: str, member_id: str, ask: PartitionAsk
    ) -> SeglogError | None:
        """Apply a partition's acknowledgements, all or none, and write the state before
        answering; the error, if they were not applied."""
        if not self.authorization.allows(caller, "Read", "topic", ask.topic):
            return PermissionDeniedError(f"{caller.principal} may not Read topic {ask.topic!r}")
        pid: PartitionId = (group_id, ask.topic, ask.partition)
        try:
            self._check_partition(pid)
            self.router.acknowledge(pid, member_id, ask.acks)
        except SeglogError as exc:
            return exc
        return None

    def _check_partition(self, pid: PartitionId) -> None:
        if not 0 <= pid[2] < self.partitions_of(pid[1]):
            raise UnknownTopicOrPartitionError(f"no partition {pid[1]}-{pid[2]}")

    def _fetch(
        self,
        caller: Caller,
        query: ShareFetchQuery,
        keys: list[tuple[str, int]],
        answers: dict[tuple[str, int], PartitionAnswer],
        scope: CallScope,
    ) -> None:
        max_bytes = max(1, min(query.max_bytes, MAX_FETCH_BYTES))
        positions: list[FetchPosition] = []
        offsets: dict[tuple[str, int], int] = {}
        for topic, index in keys:
            pid: PartitionId = (query.group_id, topic, index)
            try:
                self._check_partition(pid)
                prepared = self.router.prepare(pid)
            except SeglogError as exc:
                _put(answers, PartitionAnswer(topic, index, exc, None, b"", ()))
                continue
            if prepared.fetch_offset is not None:
                offsets[(topic, index)] = prepared.fetch_offset
                read = _read_bytes(prepared.bytes_per_record, query.max_records, max_bytes)
                positions.append(FetchPosition(topic, index, prepared.fetch_offset, read))
        if not positions:
            return
        fetched: dict[tuple[str, int], list[bytes | memoryview]] = {}
        aborted: dict[tuple[str, int], list[tuple[int, int]]] = {}
        errors: dict[tuple[str, int], SeglogError] = {}
        committed = self._isolation(query.group_id) == READ_COMMITTED
        pieces = self.data_plane.fetch(
            caller,
            FetchQuery(
                positions,
                max_bytes,
                max(query.min_bytes, 1),
                max(query.max_wait_ms, 0),
                isolation_level=1 if committed else 0,
                metered=False,  # the answer's records are charged instead (_meter)
            ),
            scope,
        )
        try:
            for piece in pieces:
                key = (piece.topic, piece.partition)
                if piece.error is not None:
                    errors[key] = piece.error
                elif piece.records:
                    fetched.setdefault(key, []).append(bytes(piece.records))
                    aborted.setdefault(key, []).extend(piece.aborted_transactions)
        except SeglogError as exc:
            for key in offsets:
                errors.setdefault(key, exc)
        finally:
            pieces.close()
        budget = max(query.max_records, 1)
        for key, offset in offsets.items():
            if key in errors:
                _put(answers, PartitionAnswer(*key, errors[key], None, b"", ()))
                continue
            chunks = fetched.get(key)
            if not chunks or budget <= 0:
                continue
            answer = self._acquire(
                query, key, offset, b"".join(chunks), budget, aborted.get(key, [])
            )
            if answer is not None:
                budget -= sum(r.last_offset - r.first_offset + 1 for r in answer.acquired)
                _put(answers, answer)

    def _isolation(self, group_id: str) -> str:
        config = self.states.group_config
        return config(group_id).share_isolation_level if config is not None else ""

    def _acquire(
        self,
        query: ShareFetchQuery,
        key: tuple[str, int],
        offset: int,
        records: bytes,
        budget: int,
        aborted: list[tuple[int, int]],
    ) -> PartitionAnswer | None:
        headers = list(batch_headers(records))
        # Read committed: aborted transactions' batches are archived, never delivered.
        batches = committed_batches((h for _, h in headers), aborted)
        pid: PartitionId = (query.group_id, *key)
        try:
            acquired = self.router.acquire(
                pid,
                query.member_id,
                offset,
                batches,
                budget,
                sum(h.size_in_bytes for _, h in headers),
            )
        except SeglogError as exc:
            return PartitionAnswer(*key, exc, None, b"", ())
        if not acquired:
            return None
        # Only the batches holding acquired records go out (clients read the records of the
        # AcquiredRecords ranges alone).
        parts = [
            records[pos : pos + h.size_in_bytes]
            for pos, h in headers
            if any(
                r.first_offset <= h.last_offset and h.base_offset <= r.last_offset for r in acquired
            )
        ]
        return PartitionAnswer(*key, None, None, b"".join(parts), tuple(acquired))


def _read_bytes(bytes_per_record: float, max_records: int, max_bytes: int) -> int:
    """What to read of a partition for `max_records` records: twice what they took so far,
    at least 64 KiB (the first batch always comes whole), at most the request's max_bytes.
    Reading the client's whole max_bytes (50 MiB by default) to acquire 500 records read
    and dropped 30 times what it used."""
    if not bytes_per_record:
        return min(max_bytes, MIN_READ_BYTES)
    wanted = int(bytes_per_record * max(max_records, 1) * 2)
    return max(1, min(max_bytes, max(MIN_READ_BYTES, wanted)))


def _put(answers: dict[tuple[str, int], PartitionAnswer], answer: PartitionAnswer) -> None:
    key = (answer.topic, answer.partition)
    before = answers.get(key)
    if before is not None:
        answer = answer._replace(ack_error=before.ack_error)
    answers[key] = answer
