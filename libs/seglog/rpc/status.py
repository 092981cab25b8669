"""The one place where seglog errors become gRPC statuses and back.

A call that fails as a whole ends with the status code below and a `google.rpc.Status` in the
trailing metadata (`grpc-status-details-bin`) holding one `google.rpc.ErrorInfo`:
domain "seglog", reason = the error's reason (the proto's `ErrorCode` names), metadata
{"retriable": "true"|"false"}. Per-partition results carry the same reasons as `ErrorCode`
values instead, so one bad partition does not fail its neighbours.
"""

from __future__ import annotations

from typing import NoReturn

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from .. import errors
from ..errors import SeglogError
from ..v1 import common_pb2

DOMAIN = "seglog"

_STATUS_BY_REASON: dict[str, grpc.StatusCode] = {
    "UNKNOWN": grpc.StatusCode.INTERNAL,
    "CORRUPT_MESSAGE": grpc.StatusCode.INVALID_ARGUMENT,
    "INVALID_RECORD": grpc.StatusCode.INVALID_ARGUMENT,
    "INVALID_TIMESTAMP": grpc.StatusCode.INVALID_ARGUMENT,
    "UNSUPPORTED_COMPRESSION_TYPE": grpc.StatusCode.INVALID_ARGUMENT,
    "MESSAGE_TOO_LARGE": grpc.StatusCode.INVALID_ARGUMENT,
    "RECORD_LIST_TOO_LARGE": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "MEMORY_BUDGET_EXHAUSTED": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "GROUP_MAX_SIZE_REACHED": grpc.StatusCode.FAILED_PRECONDITION,
    "SERVER_BUSY": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "OFFSET_OUT_OF_RANGE": grpc.StatusCode.OUT_OF_RANGE,
    "INVALID_OFFSET": grpc.StatusCode.INVALID_ARGUMENT,
    "UNKNOWN_TOPIC_OR_PARTITION": grpc.StatusCode.NOT_FOUND,
    "TOPIC_ALREADY_EXISTS": grpc.StatusCode.ALREADY_EXISTS,
    "INVALID_CONFIG": grpc.StatusCode.INVALID_ARGUMENT,
    "INVALID_PARTITIONS": grpc.StatusCode.INVALID_ARGUMENT,
    "INVALID_REPLICATION_FACTOR": grpc.StatusCode.INVALID_ARGUMENT,
    "INVALID_REQUIRED_ACKS": grpc.StatusCode.INVALID_ARGUMENT,
    "INVALID_REQUEST": grpc.StatusCode.INVALID_ARGUMENT,
    "NOT_LEADER_OR_FOLLOWER": grpc.StatusCode.FAILED_PRECONDITION,
    "LEADER_NOT_AVAILABLE": grpc.StatusCode.UNAVAILABLE,
    "NODE_UNAVAILABLE": grpc.StatusCode.UNAVAILABLE,
    "REQUEST_TIMED_OUT": grpc.StatusCode.DEADLINE_EXCEEDED,
    "KAFKA_STORAGE_ERROR": grpc.StatusCode.UNAVAILABLE,
    "LOG_CLOSED": grpc.StatusCode.UNAVAILABLE,
    "CORRUPT_INDEX": grpc.StatusCode.INTERNAL,
    "COORDINATOR_NOT_AVAILABLE": grpc.StatusCode.UNAVAILABLE,
    "COORDINATOR_LOAD_IN_PROGRESS": grpc.StatusCode.UNAVAILABLE,
    "REBALANCE_IN_PROGRESS": grpc.StatusCode.ABORTED,
    "UNKNOWN_MEMBER_ID": grpc.StatusCode.FAILED_PRECONDITION,
    "ILLEGAL_GENERATION": grpc.StatusCode.FAILED_PRECONDITION,
    "INVALID_GROUP_ID": grpc.StatusCode.INVALID_ARGUMENT,
    "INVALID_SESSION_TIMEOUT": grpc.StatusCode.INVALID_ARGUMENT,
    "GROUP_ID_NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "INCONSISTENT_GROUP_PROTOCOL": grpc.StatusCode.INVALID_ARGUMENT,
    "INVALID_TOPIC": grpc.StatusCode.INVALID_ARGUMENT,
    "OFFSET_METADATA_TOO_LARGE": grpc.StatusCode.INVALID_ARGUMENT,
    "NON_EMPTY_GROUP": grpc.StatusCode.FAILED_PRECONDITION,
    "GROUP_SUBSCRIBED_TO_TOPIC": grpc.StatusCode.FAILED_PRECONDITION,
    "FENCED_LEADER_EPOCH": grpc.StatusCode.FAILED_PRECONDITION,
    "UNKNOWN_LEADER_EPOCH": grpc.StatusCode.FAILED_PRECONDITION,
    "NOT_ENOUGH_REPLICAS": grpc.StatusCode.UNAVAILABLE,
    "NOT_ENOUGH_REPLICAS_AFTER_APPEND": grpc.StatusCode.UNAVAILABLE,
    "INVALID_UPDATE_VERSION": grpc.StatusCode.FAILED_PRECONDITION,
    "INELIGIBLE_REPLICA": grpc.StatusCode.FAILED_PRECONDITION,
    "OUT_OF_ORDER_SEQUENCE_NUMBER": grpc.StatusCode.FAILED_PRECONDITION,
    "INVALID_PRODUCER_EPOCH": grpc.StatusCode.FAILED_PRECONDITION,
    "PERMISSION_DENIED": grpc.StatusCode.PERMISSION_DENIED,
    "SASL_AUTHENTICATION_FAILED": grpc.StatusCode.UNAUTHENTICATED,
    "NOT_COORDINATOR": grpc.StatusCode.FAILED_PRECONDITION,
    "POLICY_VIOLATION": grpc.StatusCode.FAILED_PRECONDITION,
    "MEMBER_ID_REQUIRED": grpc.StatusCode.FAILED_PRECONDITION,
    "FENCED_INSTANCE_ID": grpc.StatusCode.FAILED_PRECONDITION,
    "FENCED_MEMBER_EPOCH": grpc.StatusCode.FAILED_PRECONDITION,
    "UNRELEASED_INSTANCE_ID": grpc.StatusCode.FAILED_PRECONDITION,
    "UNSUPPORTED_ASSIGNOR": grpc.StatusCode.INVALID_ARGUMENT,
    "STALE_MEMBER_EPOCH": grpc.StatusCode.FAILED_PRECONDITION,
    "INVALID_REGULAR_EXPRESSION": grpc.StatusCode.INVALID_ARGUMENT,
    "UNSUPPORTED_VERSION": grpc.StatusCode.UNIMPLEMENTED,
    "INVALID_REPLICA_ASSIGNMENT": grpc.StatusCode.INVALID_ARGUMENT,
    "NO_REASSIGNMENT_IN_PROGRESS": grpc.StatusCode.FAILED_PRECONDITION,
    "ELECTION_NOT_NEEDED": grpc.StatusCode.FAILED_PRECONDITION,
    "PREFERRED_LEADER_NOT_AVAILABLE": grpc.StatusCode.UNAVAILABLE,
    "ELIGIBLE_LEADERS_NOT_AVAILABLE": grpc.StatusCode.UNAVAILABLE,
    "INCONSISTENT_CLUSTER_ID": grpc.StatusCode.FAILED_PRECONDITION,
    "UNKNOWN_TOPIC_ID": grpc.StatusCode.NOT_FOUND,
    "PRODUCER_FENCED": grpc.StatusCode.FAILED_PRECONDITION,
    "CONCURRENT_TRANSACTIONS": grpc.StatusCode.ABORTED,
    "INVALID_TXN_STATE": grpc.StatusCode.FAILED_PRECONDITION,
    "INVALID_PRODUCER_ID_MAPPING": grpc.StatusCode.FAILED_PRECONDITION,
    "INVALID_TRANSACTION_TIMEOUT": grpc.StatusCode.INVALID_ARGUMENT,
    "TRANSACTIONAL_ID_NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "INVALID_RECORD_STATE": grpc.StatusCode.FAILED_PRECONDITION,
    "SHARE_SESSION_NOT_FOUND": grpc.StatusCode.FAILED_PRECONDITION,
    "INVALID_SHARE_SESSION_EPOCH": grpc.StatusCode.FAILED_PRECONDITION,
    "SHARE_SESSION_LIMIT_REACHED": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "FENCED_STATE_EPOCH": grpc.StatusCode.FAILED_PRECONDITION,
}

# For statuses that arrive without details (the transport's own failures).
_ERROR_BY_STATUS: dict[grpc.StatusCode, type[SeglogError]] = {
    grpc.StatusCode.UNAVAILABLE: errors.NodeUnavailableError,
    # A call torn down before its answer (its channel closed, the server stopping): the
    # outcome is unknown, as after a dropped connection, which Kafka clients retry.
    grpc.StatusCode.CANCELLED: errors.NodeUnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: errors.RequestTimedOutError,
    grpc.StatusCode.NOT_FOUND: errors.UnknownTopicOrPartitionError,
    grpc.StatusCode.OUT_OF_RANGE: errors.OffsetOutOfRangeError,
    grpc.StatusCode.INVALID_ARGUMENT: errors.InvalidRequestError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: errors.RecordListTooLargeError,
}

# What gRPC's server answers a call past its maximum_concurrent_rpcs (grpc/_server.py), before
# any handler ran: the server is busy, not the request too large, so the call is retried.
_CONCURRENCY_LIMIT_DETAILS = "Concurrent RPC limit exceeded"

_ERROR_CLASSES = errors.error_classes()


def status_code_for(error: SeglogError) -> grpc.StatusCode:
    return _STATUS_BY_REASON.get(error.reason, grpc.StatusCode.INTERNAL)


def error_code_for(error: BaseException) -> common_pb2.ErrorCode:
    """The proto `ErrorCode` of an error (UNKNOWN for anything not a SeglogError)."""
    reason = error.reason if isinstance(error, SeglogError) else "UNKNOWN"
    code: common_pb2.ErrorCode = common_pb2.ErrorCode.Value(reason)
    return code


def set_error(result: object, error: BaseException) -> None:
    """Fill a per-item result's `error` and `error_message` fields."""
    result.error = error_code_for(error)  # type: ignore[attr-defined]
    result.error_message = str(error)  # type: ignore[attr-defined]


def to_rpc_status(error: SeglogError) -> grpc.Status:
    info = error_details_pb2.ErrorInfo(
        reason=error.reason,
        domain=DOMAIN,
        metadata={**error.details, "retriable": "true" if error.retriable else "false"},
    )
    detail = any_pb2.Any()
    detail.Pack(info)
    code = status_code_for(error)
    status = status_pb2.Status(
        code=getattr(code_pb2, code.name), message=str(error) or error.reason, details=[detail]
    )
    return rpc_status.to_status(status)


def abort(context: grpc.ServicerContext, error: SeglogError) -> NoReturn:
    context.abort_with_status(to_rpc_status(error))
    raise AssertionError("abort_with_status returned")  # it always raises


def error_from_code(code: int, message: str = "") -> SeglogError:
    """The error for a per-partition `ErrorCode` (code must not be NONE)."""
    reason = common_pb2.ErrorCode.Name(code)
    return _ERROR_CLASSES.get(reason, SeglogError)(message or reason)


def error_from_rpc(error: grpc.RpcError) -> SeglogError:
    """The seglog error behind a failed call: from its ErrorInfo when it carries one, else
    from the bare status code (a transport failure, a deadline)."""
    call = error if isinstance(error, grpc.Call) else None
    code = call.code() if call is not None else grpc.StatusCode.UNKNOWN
    message = (call.details() if call is not None else None) or str(error)
    status = rpc_status.from_call(call) if call is not None else None
    if status is not None:
        for detail in status.details:
            info = error_details_pb2.ErrorInfo()
            if detail.Unpack(info) and info.domain == DOMAIN:
                found: SeglogError = _ERROR_CLASSES.get(str(info.reason), SeglogError)(message)
                found.details = {k: v for k, v in info.metadata.items() if k != "retriable"}
                return found
    if code == grpc.StatusCode.UNIMPLEMENTED:
        # The address serves gRPC but not this API: most often a storage node's address
        # given where the gateway's belongs (or the reverse).
        message += (
            " (the address answers but does not serve this seglog API: is it a storage "
            "node's address where the gateway's is needed?)"
        )
    if code == grpc.StatusCode.UNAVAILABLE:
        message += _tls_hint(message)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and _CONCURRENCY_LIMIT_DETAILS in message:
        return errors.ServerBusyError(f"{code.name}: {message}")
    return _ERROR_BY_STATUS.get(code, SeglogError)(f"{code.name}: {message}")


def _tls_hint(message: str) -> str:
    """What a connection closed during setup most likely means: gRPC itself only says
    "Socket closed" both for a plaintext client at a TLS listener and for a TLS client
    without the client certificate a mutual-TLS listener requires."""
    if "WRONG_VERSION_NUMBER" in message:
        return (
            " (a TLS client against a plaintext listener: connect without TLS, i.e. unset "
            "SEGLOG_TLS_CA/_CERT/_KEY or use security_protocol=PLAINTEXT)"
        )
    if "CERTIFICATE_VERIFY_FAILED" in message:
        return (
            " (the server's certificate is not signed by the CA given: check SEGLOG_TLS_CA "
            "or ssl_cafile)"
        )
    if "Socket closed" in message:
        return (
            " (the server closed the connection during setup: most likely a TLS mismatch, a "
            "plaintext client against a TLS listener, or a mutual-TLS listener that requires a "
            "client certificate: set SEGLOG_TLS_CA, SEGLOG_TLS_CERT and SEGLOG_TLS_KEY, or "
            "ssl_cafile, ssl_certfile and ssl_keyfile)"
        )
    return ""
