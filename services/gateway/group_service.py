"""The GroupCoordinator gRPC service: membership calls go to the coordinator (groups.py),
offset commits and fetches to the offsets store (offsets_store.py). Errors are answered in
the response's `error` field, so a consumer reads REBALANCE_IN_PROGRESS and the like as data,
not as failed calls."""

from __future__ import annotations

import grpc

from seglog.errors import (
    CoordinatorNotAvailableError,
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    InvalidOffsetError,
    OffsetMetadataTooLargeError,
    SeglogError,
    UnknownTopicOrPartitionError,
)
from seglog.rpc.status import set_error
from seglog.v1 import groups_pb2
from services.wait_slots import SERVER_MAX_WORKERS, WaitSlots

from .groups import EMPTY, GroupCoordinator, JoinResult, check_group_id
from .offsets_store import OffsetsStore
from .registry import Registry

# Kafka's offset.metadata.max.bytes.
OFFSET_METADATA_MAX_BYTES = 4096


class GroupCoordinatorService:
    def __init__(
        self,
        registry: Registry,
        coordinator: GroupCoordinator,
        offsets: OffsetsStore,
        *,
        offset_metadata_max_bytes: int = OFFSET_METADATA_MAX_BYTES,
    ) -> None:
        self.registry = registry
        self.coordinator = coordinator
        self.offsets = offsets
        self.offset_metadata_max_bytes = offset_metadata_max_bytes
        # A join waits for its rebalance on a gateway thread: a quarter of the pool at most,
        # so node heartbeats, produce and fetch always find one.
        self.waiting_joins = WaitSlots(SERVER_MAX_WORKERS // 4)

    def JoinGroup(
        self, request: groups_pb2.JoinGroupRequest, context: grpc.ServicerContext
    ) -> groups_pb2.JoinGroupResponse:
        response = groups_pb2.JoinGroupResponse()
        if not self.waiting_joins.try_acquire():
            busy = CoordinatorNotAvailableError(
                f"{self.waiting_joins.limit} group joins are already waiting on this "
                f"coordinator; retry"
            )
            set_error(response, busy)
            return response
        try:
            result = self._join(request, context)
        except SeglogError as exc:
            set_error(response, exc)
            return response
        finally:
            self.waiting_joins.release()
        response.generation_id = result.generation
        response.member_id = result.member_id
        response.assignment_strategy = result.strategy
        response.member_count = result.member_count
        for topic, partitions in sorted(result.assignment.items()):
            response.assignment.add(topic=topic, partitions=partitions)
        return response

    def _join(
        self, request: groups_pb2.JoinGroupRequest, context: grpc.ServicerContext
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
        )

    def Heartbeat(
        self, request: groups_pb2.GroupHeartbeatRequest, context: grpc.ServicerContext
    ) -> groups_pb2.GroupHeartbeatResponse:
        response = groups_pb2.GroupHeartbeatResponse()
        try:
            self.coordinator.heartbeat(request.group_id, request.member_id, request.generation_id)
        except SeglogError as exc:
            set_error(response, exc)
        return response

    def LeaveGroup(
        self, request: groups_pb2.LeaveGroupRequest, context: grpc.ServicerContext
    ) -> groups_pb2.LeaveGroupResponse:
        response = groups_pb2.LeaveGroupResponse()
        try:
            self.coordinator.leave(request.group_id, request.member_id)
        except SeglogError as exc:
            set_error(response, exc)
        return response

    def CommitOffsets(
        self, request: groups_pb2.CommitOffsetsRequest, context: grpc.ServicerContext
    ) -> groups_pb2.CommitOffsetsResponse:
        response = groups_pb2.CommitOffsetsResponse()
        try:
            self.coordinator.check_commit(
                request.group_id, request.member_id, request.generation_id
            )
        except SeglogError as exc:
            set_error(response, exc)
            return response
        valid = []
        for commit in request.offsets:
            result = response.partitions.add(topic=commit.topic, partition=commit.partition)
            problem = self._check_commit_entry(commit)
            if problem is not None:
                set_error(result, problem)
                continue
            valid.append(
                (
                    commit.topic,
                    commit.partition,
                    commit.offset,
                    commit.leader_epoch,
                    commit.metadata,
                )
            )
        try:
            self.offsets.commit(request.group_id, valid)
        except SeglogError as exc:
            for result in response.partitions:
                if not result.error:
                    set_error(result, exc)
        return response

    def _check_commit_entry(self, commit: groups_pb2.OffsetCommit) -> SeglogError | None:
        topic = self.registry.topics.get(commit.topic)
        if topic is None or not 0 <= commit.partition < len(topic.partitions):
            return UnknownTopicOrPartitionError(f"{commit.topic}-{commit.partition} does not exist")
        if commit.offset < 0:
            return InvalidOffsetError(
                f"{commit.topic}-{commit.partition}: committed offset {commit.offset} is negative"
            )
        size = len(commit.metadata.encode())
        if size > self.offset_metadata_max_bytes:
            return OffsetMetadataTooLargeError(
                f"{commit.topic}-{commit.partition}: metadata is {size} bytes, over "
                f"offset.metadata.max.bytes {self.offset_metadata_max_bytes}"
            )
        return None

    def FetchOffsets(
        self, request: groups_pb2.FetchOffsetsRequest, context: grpc.ServicerContext
    ) -> groups_pb2.FetchOffsetsResponse:
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
        group_ids = set(self.coordinator.group_ids())
        try:
            group_ids |= self.offsets.group_ids()
        except SeglogError:
            pass  # groups known only by their offsets show up once those can be read
        for group_id in sorted(group_ids):
            group = self.coordinator.snapshot(group_id)
            response.groups.add(
                group_id=group_id,
                state=group.state if group is not None else EMPTY,
                member_count=len(group.members) if group is not None else 0,
            )
        return response

    def DescribeGroups(
        self, request: groups_pb2.DescribeGroupsRequest, context: grpc.ServicerContext
    ) -> groups_pb2.DescribeGroupsResponse:
        response = groups_pb2.DescribeGroupsResponse()
        for group_id in request.group_ids:
            description = response.groups.add(group_id=group_id)
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
                for topic, partitions in sorted(member.assignment.items()):
                    out.assignment.add(topic=topic, partitions=partitions)
        return response

    def DeleteGroups(
        self, request: groups_pb2.DeleteGroupsRequest, context: grpc.ServicerContext
    ) -> groups_pb2.DeleteGroupsResponse:
        response = groups_pb2.DeleteGroupsResponse()
        for group_id in request.group_ids:
            result = response.groups.add(group_id=group_id)
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
