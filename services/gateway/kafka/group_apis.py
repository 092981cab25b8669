"""Kafka's classic consumer group membership: FindCoordinator 0–3 (groups, and
transactional ids' coordinators, transactions/placement.py), JoinGroup 0–7, SyncGroup
0–5, Heartbeat 0–4, LeaveGroup 0–4, on the gateway's group coordinator (groups/
classic_protocol.py).

Each call is the core's (groups/membership.py: Read on the group, as its gRPC namesake), and
answers NOT_COORDINATOR for a group another gateway coordinates; FindCoordinator names that
gateway's Kafka listener (published with its gateway session). JoinGroup and SyncGroup answer
when the rebalance does (later.py): the coordinator completes their futures, no thread waits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from kafka import errors as kafka_errors
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata.find_coordinator import (
    FindCoordinatorResponse,
)

from seglog.errors import (
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    InvalidRequestError,
    MemberIdRequiredError,
    SeglogError,
)
from seglog.semconv import GROUP

from ..groups.group_state import ClassicJoinResult
from ..groups.membership import ClassicJoin, GroupHeartbeat, GroupLeave, GroupSync, SyncAnswer
from .api_table import ApiTable
from .brokers import Broker, broker_on_gateway
from .error_codes import NONE, kafka_error_code
from .kafka_call import KafkaCall
from .later import answer_later

if TYPE_CHECKING:
    from .core import KafkaCore

T = TypeVar("T")
GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE = 0, 1  # FindCoordinator's key_type


def group_error_code(error: BaseException) -> int:
    """Kafka's code for an error about a group (authorization failures: the group's). The
    classic protocol's own two reasons are the groups package's, not seglog's ErrorCode."""
    if isinstance(error, MemberIdRequiredError):
        return int(kafka_errors.MemberIdRequiredError.errno)
    if isinstance(error, FencedInstanceIdError):
        return int(kafka_errors.FencedInstanceIdError.errno)
    return kafka_error_code(error, "group")


def on_coordinator(call: KafkaCall, api: str, group_id: str, work: Callable[[], T]) -> T:
    """`work` run once the core has authorized the call's caller for `api` on the group and
    this gateway is known to coordinate it (groups/groups_core.py)."""
    return call.core.groups.on_coordinator(call.caller, api, group_id, work)


def client_host(call: KafkaCall) -> str:
    return f"/{call.identity.peer_host}"  # Kafka's InetAddress.toString


# -- FindCoordinator ---------------------------------------------------------------------------


def find_coordinator(call: KafkaCall, request: Any) -> Any:
    """Versions 0–3 (one key); 4+ (batched keys, share keys) are find_coordinator_apis.py's."""
    response_class = FindCoordinatorResponse[call.version]
    key_type = request.key_type if call.version >= 1 else GROUP_KEY_TYPE
    try:
        broker = coordinator_of_key(call, key_type, request.key)
    except SeglogError as exc:
        return response_class(
            throttle_time_ms=0,
            error_code=key_error_code(key_type, exc),
            error_message=str(exc),
            node_id=-1,
            host="",
            port=-1,
        )
    return response_class(
        throttle_time_ms=0,
        error_code=NONE,
        error_message=None,
        node_id=broker.node_id,
        host=broker.host,
        port=broker.port,
    )


def key_error_code(key_type: int, error: SeglogError) -> int:
    if key_type == TRANSACTION_KEY_TYPE:
        return kafka_error_code(error, "transactional_id")
    return group_error_code(error)


def coordinator_of_key(call: KafkaCall, key_type: int, key: str) -> Broker:
    """The broker coordinating a group's or a transactional id's key; raises why not."""
    if key_type == TRANSACTION_KEY_TYPE:
        # Describe on the transactional id, as Kafka checks; its coordinator is placed as
        # a group's (transactions/placement.py), by its __transaction_state partition.
        transactions = call.core.transactions
        call.core.authorization.check(
            call.caller, [("Describe", "transactional_id", key)], "FindCoordinator"
        )
        if not key:
            raise InvalidRequestError("FindCoordinator: the transactional id is empty")
        transactions.log.ensure_topic()
        address = transactions.placement.coordinator_address(key)
        return broker_at(call, address, f"transactional id {key!r}")
    if key_type == GROUP_KEY_TYPE:
        # authorized (Describe on the group)
        broker = broker_at(call, _coordinator_address(call, key), f"group {key!r}")
        # Kafka's broker makes __consumer_offsets on the first FindCoordinator for a
        # group; clients (franz-go's regex consumer among them) wait to see it in Metadata.
        call.core.groups.offsets.ensure_topic()
        return broker
    raise InvalidRequestError(f"key type {key_type} is not a group's or a transaction's")


def broker_at(call: KafkaCall, address: str, what: str) -> Broker:
    """The Kafka listener of the coordinating gateway at gRPC `address`: this one's ("" or
    its own: the address the client came through), or the one another gateway publishes
    with its session."""
    core = call.core
    if not address or address == _own_grpc_address(core):
        return broker_on_gateway(core, core.peers.kafka_advertised_address, call.listener)
    session = core.peers.gateway_session
    kafka_address = session.live_kafka_addresses().get(address) if session is not None else None
    if kafka_address is None:
        raise CoordinatorNotAvailableError(
            f"{what} is coordinated by the gateway at {address}, which publishes no Kafka listener"
        )
    return broker_on_gateway(core, kafka_address, call.listener)


def _coordinator_address(call: KafkaCall, group_id: str) -> str:
    """The coordinating gateway's gRPC address ("" for this one); raises why not known."""
    return call.core.groups.coordinator_address(call.caller, group_id)


def _own_grpc_address(core: KafkaCore) -> str:
    coordination = core.groups.coordination
    return str(getattr(coordination, "address", ""))


# -- JoinGroup, SyncGroup, Heartbeat, LeaveGroup -----------------------------------------------


def join_group(call: KafkaCall, request: Any) -> Any:
    call.attributes[GROUP] = request.group_id  # the span names the group
    version = call.version
    response_class = JoinGroupResponse[version]
    join = ClassicJoin(
        request.group_id,
        request.member_id,
        group_instance_id=request.group_instance_id if version >= 5 else None,
        client_id=call.client_id or "",
        client_host=client_host(call),
        protocol_type=request.protocol_type,
        protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
        session_timeout_ms=request.session_timeout_ms,
        # v0 has none: Kafka's broker then waits the session timeout.
        rebalance_timeout_ms=(
            request.rebalance_timeout_ms if version >= 1 else request.session_timeout_ms
        ),
        require_known_member_id=version >= 4,
    )

    def refuse(exc: SeglogError) -> Any:
        given = exc.member_id if isinstance(exc, MemberIdRequiredError) else request.member_id
        return response_class(
            throttle_time_ms=0,
            error_code=group_error_code(exc),
            generation_id=-1,
            protocol_type=None,
            protocol_name=None if version >= 7 else "",
            leader="",
            member_id=given,
            members=[],
        )

    def respond(result: ClassicJoinResult) -> Any:
        return response_class(
            throttle_time_ms=0,
            error_code=NONE,
            generation_id=result.generation,
            protocol_type=result.protocol_type,
            protocol_name=result.protocol,
            leader=result.leader,
            member_id=result.member_id,
            members=[
                response_class.JoinGroupResponseMember(
                    member_id=member_id, group_instance_id=instance_id, metadata=metadata
                )
                for member_id, instance_id, metadata in result.members
            ],
        )

    try:
        joined = call.core.membership.start_join_classic(call.caller, join)
    except SeglogError as exc:
        return refuse(exc)
    return answer_later(joined, respond, refuse)


def sync_group(call: KafkaCall, request: Any) -> Any:
    call.attributes[GROUP] = request.group_id  # the span names the group
    version = call.version
    response_class = SyncGroupResponse[version]
    sync = GroupSync(
        request.group_id,
        request.member_id,
        request.generation_id,
        group_instance_id=request.group_instance_id if version >= 3 else None,
        protocol_type=request.protocol_type if version >= 5 else None,
        protocol=request.protocol_name if version >= 5 else None,
        assignments={a.member_id: bytes(a.assignment) for a in request.assignments},
    )

    def refuse(exc: SeglogError) -> Any:
        return response_class(
            throttle_time_ms=0,
            error_code=group_error_code(exc),
            protocol_type=None,
            protocol_name=None,
            assignment=b"",
        )

    def respond(answer: SyncAnswer) -> Any:
        return response_class(
            throttle_time_ms=0,
            error_code=NONE,
            protocol_type=answer.protocol_type,
            protocol_name=answer.protocol,
            assignment=answer.assignment,
        )

    try:
        syncing = call.core.membership.start_sync(call.caller, sync)
    except SeglogError as exc:
        return refuse(exc)
    return answer_later(syncing, respond, refuse)


def heartbeat(call: KafkaCall, request: Any) -> Any:
    call.attributes[GROUP] = request.group_id  # the span names the group
    version = call.version
    beat = GroupHeartbeat(
        request.group_id,
        request.member_id,
        request.generation_id,
        request.group_instance_id if version >= 3 else None,
    )
    try:
        call.core.membership.heartbeat(call.caller, beat)
        error = NONE
    except SeglogError as exc:
        error = group_error_code(exc)
    return HeartbeatResponse[version](throttle_time_ms=0, error_code=error)


def leave_group(call: KafkaCall, request: Any) -> Any:
    call.attributes[GROUP] = request.group_id  # the span names the group
    version = call.version
    response_class = LeaveGroupResponse[version]
    if version >= 3:
        leaving = [(m.member_id, m.group_instance_id) for m in request.members]
    else:
        leaving = [(request.member_id, None)]
    try:
        outcomes = call.core.membership.leave(call.caller, GroupLeave(request.group_id, leaving))
    except SeglogError as exc:
        return response_class(throttle_time_ms=0, error_code=group_error_code(exc), members=[])
    codes = [NONE if outcome is None else group_error_code(outcome) for outcome in outcomes]
    if version < 3:
        return response_class(throttle_time_ms=0, error_code=codes[0])
    return response_class(
        throttle_time_ms=0,
        error_code=NONE,
        members=[
            response_class.MemberResponse(
                member_id=member_id, group_instance_id=instance_id, error_code=code
            )
            for (member_id, instance_id), code in zip(leaving, codes, strict=True)
        ],
    )


def register(table: ApiTable) -> None:
    table.register(JoinGroupRequest, 0, 7, join_group)
    table.register(SyncGroupRequest, 0, 5, sync_group)
    table.register(HeartbeatRequest, 0, 4, heartbeat)
    table.register(LeaveGroupRequest, 0, 4, leave_group)
