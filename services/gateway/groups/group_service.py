"""The GroupCoordinator gRPC service, an adapter over the groups core (groups_core.py: which
gateway coordinates, listing, offset commits): membership calls go to the coordinator
(coordinator.py), offset fetches to the offsets store (offsets_store.py). Errors are answered in
the response's `error` field, so a consumer reads REBALANCE_IN_PROGRESS and the like as data,
not as failed calls — except NOT_COORDINATOR (coordination/group_coordinators.py): a call
about a group another gateway coordinates fails whole, naming that gateway, as a call sent to
the wrong place."""

from __future__ import annotations

import grpc

from seglog.errors import (
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    NotCoordinatorError,
    SeglogError,
)
from seglog.rpc import check_entries
from seglog.rpc.status import abort, set_error
from seglog.v1 import groups_pb2
from services.wait_slots import SERVER_MAX_WORKERS, PeerWaitSlots, WaitSlots

from ..coordination.group_coordinators import EtcdCoordination
from .consumer_protocol import assignment_partitions
from .coordinator import EMPTY, JoinResult, check_group_id
from .group_state import CLASSIC, Group, Member, OffsetToCommit
from .groups_core import GroupsCore
from .managed_protocol import JoinAgainLater
from .offsets_formats import CONSUMER_PROTOCOL_TYPE

# Joins one connection may have waiting for their rebalances at once (a consumer waits in
# one; a client running several consumers on one channel gets the rest answered at once).
JOINS_WAITING_PER_CONNECTION = 2


class GroupCoordinatorService:
    def __init__(self, core: GroupsCore) -> None:
        self.core = core
        self.registry = core.registry
        self.coordinator = core.coordinator
        self.offsets = core.offsets
        self.coordination = core.coordination
        self.not_coordinated_here = core.not_coordinated_here
        self.commit_offsets = core.commit_offsets
        self.group_listing = core.group_listing
        # A join waits for its rebalance on a gateway thread: a quarter of the pool at most,
        # so node heartbeats, produce and fetch always find one, and at most
        # JOINS_WAITING_PER_CONNECTION from one connection, so a looping client cannot take
        # them all. A join finding no slot is recorded without waiting (JoinAgainLater).
        self.waiting_joins = WaitSlots(SERVER_MAX_WORKERS // 4)
        self.waiting_joins_by_peer = PeerWaitSlots(JOINS_WAITING_PER_CONNECTION)

    # -- which gateway coordinates ------------------------------------------------------------

    def _coordinated(self, group_id: str, context: grpc.ServicerContext) -> None:
        problem = self.not_coordinated_here(group_id)
        if problem is not None:
            abort(context, problem)

    def FindCoordinator(
        self, request: groups_pb2.FindCoordinatorRequest, context: grpc.ServicerContext
    ) -> groups_pb2.FindCoordinatorResponse:
        response = groups_pb2.FindCoordinatorResponse()
        problem = self.not_coordinated_here(request.group_id)
        if isinstance(problem, NotCoordinatorError):
            response.address = problem.coordinator
        elif problem is not None:
            set_error(response, problem)
        elif isinstance(self.coordination, EtcdCoordination):
            response.address = self.coordination.address
        return response

    # -- membership ---------------------------------------------------------------------------

    def JoinGroup(
        self, request: groups_pb2.JoinGroupRequest, context: grpc.ServicerContext
    ) -> groups_pb2.JoinGroupResponse:
        self._coordinated(request.group_id, context)
        response = groups_pb2.JoinGroupResponse()
        peer = context.peer()
        slot = self.waiting_joins_by_peer.try_acquire(peer)
        if slot and not self.waiting_joins.try_acquire():
            self.waiting_joins_by_peer.release(peer)
            slot = False
        try:
            result = self._join(request, context, wait=slot)
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

    def _join(
        self, request: groups_pb2.JoinGroupRequest, context: grpc.ServicerContext, *, wait: bool
    ) -> JoinResult:
        return self.coordinator.join(
            request.group_id,
            request.member_id,
            client_id=request.client_id,
            client_host=context.peer(),
            topics=tuple(request.topics),
            strategies=tuple(request.assignment_strategies),
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            wait=wait,
        )

    def Heartbeat(
        self, request: groups_pb2.GroupHeartbeatRequest, context: grpc.ServicerContext
    ) -> groups_pb2.GroupHeartbeatResponse:
        self._coordinated(request.group_id, context)
        response = groups_pb2.GroupHeartbeatResponse()
        try:
            self.coordinator.heartbeat(request.group_id, request.member_id, request.generation_id)
        except SeglogError as exc:
            set_error(response, exc)
        return response

    def LeaveGroup(
        self, request: groups_pb2.LeaveGroupRequest, context: grpc.ServicerContext
    ) -> groups_pb2.LeaveGroupResponse:
        self._coordinated(request.group_id, context)
        response = groups_pb2.LeaveGroupResponse()
        try:
            self.coordinator.leave(request.group_id, request.member_id)
        except SeglogError as exc:
            set_error(response, exc)
        return response

    def CommitOffsets(
        self, request: groups_pb2.CommitOffsetsRequest, context: grpc.ServicerContext
    ) -> groups_pb2.CommitOffsetsResponse:
        self._coordinated(request.group_id, context)
        response = groups_pb2.CommitOffsetsResponse()
        try:
            self.coordinator.check_commit(
                request.group_id, request.member_id, request.generation_id
            )
        except SeglogError as exc:
            set_error(response, exc)
            return response
        problems = self.commit_offsets(
            request.group_id,
            [
                OffsetToCommit(c.topic, c.partition, c.offset, c.leader_epoch, c.metadata)
                for c in request.offsets
            ],
        )
        for commit, problem in zip(request.offsets, problems, strict=True):
            result = response.partitions.add(topic=commit.topic, partition=commit.partition)
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
        self._coordinated(request.group_id, context)
        response = groups_pb2.FetchOffsetsResponse()
        try:
            committed = self.offsets.committed(request.group_id)
        except SeglogError as exc:
            set_error(response, exc)
            return response
        if request.partitions:
            wanted = [(tp.topic, p) for tp in request.partitions for p in tp.partitions]
        else:
            wanted = sorted(committed)
        for topic, partition in wanted:
            entry = committed.get((topic, partition))
            out = response.offsets.add(topic=topic, partition=partition, offset=-1, leader_epoch=-1)
            if entry is not None:
                out.offset = entry.offset
                out.leader_epoch = entry.leader_epoch
                out.metadata = entry.metadata
                out.commit_timestamp_ms = entry.commit_timestamp_ms
        return response

    def ListGroups(
        self, request: groups_pb2.ListGroupsRequest, context: grpc.ServicerContext
    ) -> groups_pb2.ListGroupsResponse:
        response = groups_pb2.ListGroupsResponse()
        for group_id, group in self.group_listing():
            response.groups.add(
                group_id=group_id,
                state=group.state if group is not None else EMPTY,
                member_count=len(group.members) if group is not None else 0,
            )
        return response

    def DescribeGroups(
        self, request: groups_pb2.DescribeGroupsRequest, context: grpc.ServicerContext
    ) -> groups_pb2.DescribeGroupsResponse:
        if len(request.group_ids) == 1:  # one group: a call sent to the wrong place
            self._coordinated(request.group_ids[0], context)
        response = groups_pb2.DescribeGroupsResponse()
        for group_id in request.group_ids:
            description = response.groups.add(group_id=group_id)
            problem = self.not_coordinated_here(group_id)
            if problem is not None:
                set_error(description, problem)
                continue
            group = self.coordinator.snapshot(group_id)
            if group is None:
                try:
                    known = bool(self.offsets.committed(group_id))
                except SeglogError as exc:
                    set_error(description, exc)
                    continue
                if not known:
                    set_error(description, GroupIdNotFoundError(f"group {group_id!r} not found"))
                    continue
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
        if len(request.group_ids) == 1:
            self._coordinated(request.group_ids[0], context)
        response = groups_pb2.DeleteGroupsResponse()
        for group_id in request.group_ids:
            result = response.groups.add(group_id=group_id)
            problem = self.not_coordinated_here(group_id)
            if problem is not None:
                set_error(result, problem)
                continue
            try:
                check_group_id(group_id)
                self.coordinator.delete_group(group_id)
                self.offsets.delete_group(group_id)
            except SeglogError as exc:
                set_error(result, exc)
        return response

    def DeleteOffsets(
        self, request: groups_pb2.DeleteOffsetsRequest, context: grpc.ServicerContext
    ) -> groups_pb2.DeleteOffsetsResponse:
        self._coordinated(request.group_id, context)
        response = groups_pb2.DeleteOffsetsResponse()
        try:
            check_group_id(request.group_id)
            read = self.coordinator.subscribed_topics(request.group_id)
            busy = sorted({p.topic for p in request.partitions} & read)
            if busy:
                raise GroupSubscribedToTopicError(
                    f"members of group {request.group_id} read {', '.join(busy)}: their "
                    f"offsets cannot be deleted while they do"
                )
            response.deleted = self.offsets.delete_offsets(
                request.group_id,
                [(p.topic, n) for p in request.partitions for n in p.partitions],
            )
        except SeglogError as exc:
            set_error(response, exc)
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
