"""The GroupCoordinator gRPC service, an adapter over the groups core: membership
(membership.py: joins, heartbeats, leaves), offsets and group admin (group_calls.py), which
coordinator (groups_core.py). Each method names the call's Caller, builds the core's typed
request and encodes its answer; the core authorizes.

Errors are answered in the response's `error` field, so a consumer reads
REBALANCE_IN_PROGRESS and the like as data, not as failed calls — except the call's own
refusal (PERMISSION_DENIED, a credential that does not verify) and NOT_COORDINATOR /
COORDINATOR_NOT_AVAILABLE (coordination/group_coordinators.py): a call about a group another
gateway coordinates fails whole, naming that gateway, as a call sent to the wrong place."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import grpc

from seglog.errors import (
    AuthenticationError,
    CoordinatorNotAvailableError,
    GroupIdNotFoundError,
    NotCoordinatorError,
    PermissionDeniedError,
    SeglogError,
)
from seglog.rpc import check_entries
from seglog.rpc.status import abort, set_error
from seglog.v1 import groups_pb2
from services.wait_slots import SERVER_MAX_WORKERS, PeerWaitSlots, WaitSlots

from ..authorization import Authorization
from ..broker.caller import Caller
from ..coordination.group_coordinators import EtcdCoordination
from .consumer_groups import ConsumerHeartbeat
from .consumer_protocol import assignment_partitions
from .coordinator import EMPTY
from .group_calls import GroupCalls, OffsetCommit
from .group_state import CLASSIC, Group, Member, OffsetToCommit
from .groups_core import GroupsCore
from .managed_protocol import JoinAgainLater
from .membership import GroupHeartbeat, GroupLeave, GroupMembership, ManagedJoin
from .offsets_formats import CONSUMER_PROTOCOL_TYPE

T = TypeVar("T")
# Joins one connection may have waiting for their rebalances at once (a consumer waits in
# one; a client running several consumers on one channel gets the rest answered at once).
JOINS_WAITING_PER_CONNECTION = 2
# What fails a call whole rather than being answered in its response.
_CALL_ERRORS = (
    AuthenticationError,
    PermissionDeniedError,
    NotCoordinatorError,
    CoordinatorNotAvailableError,
)
_NOT_HERE = (NotCoordinatorError, CoordinatorNotAvailableError)
DEFAULT_REBALANCE_TIMEOUT_MS = 300_000


class GroupCoordinatorService:
    def __init__(
        self,
        core: GroupsCore,
        membership: GroupMembership,
        calls: GroupCalls,
        authorization: Authorization,
    ) -> None:
        self.core = core
        self.membership = membership
        self.calls = calls
        self.authorization = authorization
        # A join waits for its rebalance on a gateway thread: a quarter of the pool at most,
        # so node heartbeats, produce and fetch always find one, and at most
        # JOINS_WAITING_PER_CONNECTION from one connection, so a looping client cannot take
        # them all. A join finding no slot is recorded without waiting (JoinAgainLater).
        self.waiting_joins = WaitSlots(SERVER_MAX_WORKERS // 4)
        self.waiting_joins_by_peer = PeerWaitSlots(JOINS_WAITING_PER_CONNECTION)

    def _caller(self, context: grpc.ServicerContext) -> Caller:
        try:
            return self.authorization.caller_of(context)
        except SeglogError as exc:
            abort(context, exc)

    def _answered(
        self, context: grpc.ServicerContext, response: object, work: Callable[[], T]
    ) -> T | None:
        """`work`'s answer; None with its error set on `response`, or the call failed whole
        for an error of the call itself (_CALL_ERRORS)."""
        try:
            return work()
        except _CALL_ERRORS as exc:
            abort(context, exc)
        except SeglogError as exc:
            set_error(response, exc)
            return None

    # -- which gateway coordinates ------------------------------------------------------------

    def FindCoordinator(
        self, request: groups_pb2.FindCoordinatorRequest, context: grpc.ServicerContext
    ) -> groups_pb2.FindCoordinatorResponse:
        caller = self._caller(context)
        response = groups_pb2.FindCoordinatorResponse()
        try:
            address = self.core.coordinator_address(caller, request.group_id)
        except (AuthenticationError, PermissionDeniedError) as exc:
            abort(context, exc)
        except SeglogError as exc:
            set_error(response, exc)
            return response
        coordination = self.core.coordination
        if not address and isinstance(coordination, EtcdCoordination):
            address = coordination.address
        response.address = address
        return response

    # -- membership ---------------------------------------------------------------------------

    def JoinGroup(
        self, request: groups_pb2.JoinGroupRequest, context: grpc.ServicerContext
    ) -> groups_pb2.JoinGroupResponse:
        caller = self._caller(context)
        response = groups_pb2.JoinGroupResponse()
        peer = context.peer()
        slot = self.waiting_joins_by_peer.try_acquire(peer)
        if slot and not self.waiting_joins.try_acquire():
            self.waiting_joins_by_peer.release(peer)
            slot = False
        join = ManagedJoin(
            request.group_id,
            request.member_id,
            client_id=request.client_id,
            client_host=peer,
            topics=tuple(request.topics),
            strategies=tuple(request.assignment_strategies),
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            wait=slot,
        )
        try:
            result = self.membership.join_managed(caller, join)
        except _CALL_ERRORS as exc:
            abort(context, exc)
        except SeglogError as exc:
            set_error(response, exc)
            if isinstance(exc, JoinAgainLater):
                response.member_id = exc.member_id
            return response
        finally:
            if slot:
                self.waiting_joins.release()
                self.waiting_joins_by_peer.release(peer)
        response.generation_id = result.generation
        response.member_id = result.member_id
        response.assignment_strategy = result.strategy
        response.member_count = result.member_count
        for topic, partitions in sorted(result.assignment.items()):
            response.assignment.add(topic=topic, partitions=partitions)
        return response

    def Heartbeat(
        self, request: groups_pb2.GroupHeartbeatRequest, context: grpc.ServicerContext
    ) -> groups_pb2.GroupHeartbeatResponse:
        caller = self._caller(context)
        response = groups_pb2.GroupHeartbeatResponse()
        beat = GroupHeartbeat(request.group_id, request.member_id, request.generation_id)
        self._answered(context, response, lambda: self.membership.heartbeat(caller, beat))
        return response

    def ConsumerGroupHeartbeat(
        self, request: groups_pb2.ConsumerGroupHeartbeatRequest, context: grpc.ServicerContext
    ) -> groups_pb2.ConsumerGroupHeartbeatResponse:
        """KIP-848's heartbeat, topics by name (the core keys partitions by topic id)."""
        caller = self._caller(context)
        response = groups_pb2.ConsumerGroupHeartbeatResponse()
        registry = self.core.registry
        owned: dict[str, frozenset[int]] = {}
        for entry in request.owned:
            topic = registry.topics.get(entry.topic)
            if topic is not None:  # a topic deleted since: nothing of it is owned any more
                owned[topic.topic_id] = frozenset(entry.partitions)
        # Every heartbeat is a full one (subscription, owned partitions, rebalance timeout):
        # its answer always carries the whole assignment, as the response message has no
        # "unchanged" of its own. Kafka's default max.poll.interval.ms stands in for none.
        rebalance_timeout_ms = request.rebalance_timeout_ms or DEFAULT_REBALANCE_TIMEOUT_MS
        hb = ConsumerHeartbeat(
            group_id=request.group_id,
            member_id=request.member_id,
            member_epoch=request.member_epoch,
            rebalance_timeout_ms=rebalance_timeout_ms,
            topics=tuple(request.topics),
            server_assignor=request.server_assignor or None,
            owned=owned,
            client_id=request.client_id,
            client_host=context.peer(),
        )
        answer = self._answered(
            context, response, lambda: self.membership.consumer_heartbeat(caller, hb)
        )
        if answer is None:
            return response
        response.member_id = answer.member_id
        response.member_epoch = answer.member_epoch
        response.heartbeat_interval_ms = answer.heartbeat_interval_ms
        for topic_id, partitions in sorted((answer.assignment or {}).items()):
            try:
                name = registry.topic_name_of(topic_id)
            except SeglogError:
                continue  # deleted since
            response.assignment.add(topic=name, partitions=sorted(partitions))
        return response

    def LeaveGroup(
        self, request: groups_pb2.LeaveGroupRequest, context: grpc.ServicerContext
    ) -> groups_pb2.LeaveGroupResponse:
        caller = self._caller(context)
        response = groups_pb2.LeaveGroupResponse()
        leave = GroupLeave(request.group_id, [(request.member_id, None)])
        outcomes = self._answered(context, response, lambda: self.membership.leave(caller, leave))
        if outcomes and outcomes[0] is not None:
            set_error(response, outcomes[0])
        return response

    # -- offsets ------------------------------------------------------------------------------

    def CommitOffsets(
        self, request: groups_pb2.CommitOffsetsRequest, context: grpc.ServicerContext
    ) -> groups_pb2.CommitOffsetsResponse:
        caller = self._caller(context)
        response = groups_pb2.CommitOffsetsResponse()
        commit = OffsetCommit(
            request.group_id,
            request.member_id,
            request.generation_id,
            [
                OffsetToCommit(c.topic, c.partition, c.offset, c.leader_epoch, c.metadata)
                for c in request.offsets
            ],
        )
        problems = self._answered(context, response, lambda: self.calls.commit(caller, commit))
        if problems is None:
            return response
        for entry, problem in zip(request.offsets, problems, strict=True):
            result = response.partitions.add(topic=entry.topic, partition=entry.partition)
            if problem is not None:
                set_error(result, problem)
        return response

    def FetchOffsets(
        self, request: groups_pb2.FetchOffsetsRequest, context: grpc.ServicerContext
    ) -> groups_pb2.FetchOffsetsResponse:
        try:
            check_entries(
                sum(max(1, len(tp.partitions)) for tp in request.partitions),
                "FetchOffsets partitions",
            )
        except SeglogError as exc:
            abort(context, exc)
        caller = self._caller(context)
        response = groups_pb2.FetchOffsetsResponse()
        answer = self._answered(
            context, response, lambda: self.calls.fetch_offsets(caller, request.group_id)
        )
        if answer is None:
            return response
        committed, unstable = answer
        if not request.require_stable:
            unstable = set()
        if request.partitions:
            wanted = [(tp.topic, p) for tp in request.partitions for p in tp.partitions]
        else:
            wanted = sorted(committed)
        for topic, partition in wanted:
            entry = committed.get((topic, partition))
            out = response.offsets.add(topic=topic, partition=partition, offset=-1, leader_epoch=-1)
            if (topic, partition) in unstable:
                out.unstable = True
            elif entry is not None:
                out.offset = entry.offset
                out.leader_epoch = entry.leader_epoch
                out.metadata = entry.metadata
                out.commit_timestamp_ms = entry.commit_timestamp_ms
        return response

    # -- group admin --------------------------------------------------------------------------

    def ListGroups(
        self, request: groups_pb2.ListGroupsRequest, context: grpc.ServicerContext
    ) -> groups_pb2.ListGroupsResponse:
        caller = self._caller(context)
        response = groups_pb2.ListGroupsResponse()
        for group_id, group in self.core.listing(caller):
            response.groups.add(
                group_id=group_id,
                state=group.state if group is not None else EMPTY,
                member_count=len(group.members) if group is not None else 0,
            )
        return response

    def DescribeGroups(
        self, request: groups_pb2.DescribeGroupsRequest, context: grpc.ServicerContext
    ) -> groups_pb2.DescribeGroupsResponse:
        caller = self._caller(context)
        response = groups_pb2.DescribeGroupsResponse()
        one = len(request.group_ids) == 1  # one group: a call sent to the wrong place
        for group_id in request.group_ids:
            description = response.groups.add(group_id=group_id)
            try:
                found = self.calls.look_up(caller, group_id)
            except (AuthenticationError, PermissionDeniedError) as exc:
                abort(context, exc)
            except _NOT_HERE as exc:
                if one:
                    abort(context, exc)
                set_error(description, exc)
                continue
            except SeglogError as exc:
                set_error(description, exc)
                continue
            group = found.group
            if group is None:
                if not found.has_offsets:
                    set_error(description, GroupIdNotFoundError(f"group {group_id!r} not found"))
                else:
                    description.state = EMPTY
                continue
            description.state = group.state
            description.generation_id = group.generation
            description.assignment_strategy = group.strategy
            for member in sorted(group.members.values(), key=lambda m: m.member_id):
                out = description.members.add(
                    member_id=member.member_id,
                    client_id=member.client_id,
                    client_host=member.client_host,
                )
                for topic, partitions in sorted(assigned_partitions(group, member).items()):
                    out.assignment.add(topic=topic, partitions=partitions)
        return response

    def DeleteGroups(
        self, request: groups_pb2.DeleteGroupsRequest, context: grpc.ServicerContext
    ) -> groups_pb2.DeleteGroupsResponse:
        caller = self._caller(context)
        response = groups_pb2.DeleteGroupsResponse()
        try:
            outcomes = self.calls.delete_groups(caller, list(request.group_ids))
        except SeglogError as exc:
            abort(context, exc)
        if len(outcomes) == 1 and isinstance(outcomes[0], _NOT_HERE):
            abort(context, outcomes[0])  # one group: a call sent to the wrong place
        for group_id, outcome in zip(request.group_ids, outcomes, strict=True):
            result = response.groups.add(group_id=group_id)
            if outcome is not None:
                set_error(result, outcome)
        return response

    def DeleteOffsets(
        self, request: groups_pb2.DeleteOffsetsRequest, context: grpc.ServicerContext
    ) -> groups_pb2.DeleteOffsetsResponse:
        caller = self._caller(context)
        response = groups_pb2.DeleteOffsetsResponse()
        partitions = [(p.topic, n) for p in request.partitions for n in p.partitions]
        deleted = self._answered(
            context,
            response,
            lambda: self.calls.delete_offsets(caller, request.group_id, partitions),
        )
        if deleted is not None:
            response.deleted = deleted
        return response


def assigned_partitions(group: Group, member: Member) -> dict[str, list[int]]:
    """A member's partitions: computed by the coordinator for seglog's consumers, decoded
    from the leader's assignment bytes for Kafka consumers (other protocol types' bytes
    are not partitions)."""
    if group.kind != CLASSIC:
        return member.assignment
    if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
        return {}
    return assignment_partitions(member.assignment_bytes)
