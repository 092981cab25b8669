"""FindCoordinator 0–6: versions 0–3 ask for one key (group_apis.py's find_coordinator),
4+ for several at once (KIP-699: CoordinatorKeys in, one Coordinator entry per key out, each
with its own error), and 6 adds key type SHARE (KIP-932), whose key is
"groupId:topicId:partition" and whose answer is the gateway holding that share partition's
state (share/placement.py), as Kafka answers the leader of the partition of
__share_group_state its share coordinator keeps the key in.

As Kafka's KafkaApis.getCoordinator: a SHARE key below version 6 is INVALID_REQUEST; SHARE
keys need ClusterAction on the cluster (brokers ask for them, not clients:
CLUSTER_AUTHORIZATION_FAILED, here per key); a key that is not three parts, a topic id and
a partition number is INVALID_REQUEST.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.metadata.find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)

from seglog.errors import InvalidRequestError, SeglogError

from ..authorization import CLUSTER
from .api_table import ApiTable
from .brokers import Broker
from .error_codes import CLUSTER_AUTHORIZATION_FAILED, NONE
from .group_apis import broker_at, coordinator_of_key, find_coordinator, key_error_code
from .kafka_call import KafkaCall
from .topic_ids import from_wire, to_wire

SHARE_KEY_TYPE = 2
SHARE_MIN_VERSION = 6
MAX_KEYS = 10_000  # a request's CoordinatorKeys past this are refused whole


def find_coordinators(call: KafkaCall, request: Any) -> Any:
    if call.version < 4:
        return find_coordinator(call, request)
    response_class = FindCoordinatorResponse[call.version]
    keys = list(request.coordinator_keys or [])
    if len(keys) > MAX_KEYS:
        error = InvalidRequestError(f"FindCoordinator: more than {MAX_KEYS} keys")
        return response_class(
            throttle_time_ms=0,
            coordinators=[_failed(response_class, k, request.key_type, error) for k in keys],
        )
    return response_class(
        throttle_time_ms=0,
        coordinators=[_one(call, response_class, request.key_type, key) for key in keys],
    )


def _one(call: KafkaCall, response_class: Any, key_type: int, key: str) -> Any:
    try:
        if key_type == SHARE_KEY_TYPE:
            broker = _share_coordinator(call, key)
        else:
            broker = coordinator_of_key(call, key_type, key)
    except SeglogError as exc:
        return _failed(response_class, key, key_type, exc)
    return response_class.Coordinator(
        key=key,
        node_id=broker.node_id,
        host=broker.host,
        port=broker.port,
        error_code=NONE,
        error_message=None,
    )


def _failed(response_class: Any, key: str, key_type: int, error: SeglogError) -> Any:
    if key_type == SHARE_KEY_TYPE and error.reason == "PERMISSION_DENIED":
        code = CLUSTER_AUTHORIZATION_FAILED
    else:
        code = key_error_code(key_type, error)
    return response_class.Coordinator(
        key=key, node_id=-1, host="", port=-1, error_code=code, error_message=str(error)
    )


def parse_share_key(key: str) -> tuple[str, str, int]:
    """(group, topic id in the registry's form, partition) of "groupId:topicId:partition"
    (Kafka's SharePartitionKey.validate: three non-empty parts, a topic id, a partition)."""
    parts = key.split(":")
    if len(parts) != 3 or not all(parts):
        raise InvalidRequestError(f"share key {key!r} is not groupId:topicId:partition")
    group_id, topic_id, partition = parts
    try:
        number = int(partition)
        canonical = from_wire(to_wire(topic_id))
    except (ValueError, TypeError):
        raise InvalidRequestError(f"share key {key!r}: not a topic id and partition") from None
    if number < 0 or canonical != topic_id:
        raise InvalidRequestError(f"share key {key!r}: not a topic id and partition")
    return group_id, topic_id, number


def _share_coordinator(call: KafkaCall, key: str) -> Broker:
    if call.version < SHARE_MIN_VERSION:
        raise InvalidRequestError(f"share keys need FindCoordinator v6, not v{call.version}")
    call.core.authorization.check(call.caller, [("ClusterAction", *CLUSTER)], "FindCoordinator")
    group_id, topic_id, partition = parse_share_key(key)
    address = call.core.share.share_coordinator(group_id, topic_id, partition)
    return broker_at(call, address, f"share partition {key!r}")


def register(table: ApiTable) -> None:
    table.register(FindCoordinatorRequest, 0, 6, find_coordinators)
