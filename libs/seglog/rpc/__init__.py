"""What the gRPC services and clients share: the error ↔ status mapping, the raw fetch
framing, channel and server options, and checks on a request's shape; and the bulk path's
(bulk_wire: framing and version, grants, bulk_client: the one client of the bulk
listeners)."""

from ..errors import InvalidRequestError, InvalidRequiredAcksError


def client_leader_epoch(message: object) -> int:
    """The `current_leader_epoch` a request part carries, or -1 when it is unset (an
    `optional` field: proto3's default of 0 must not read as "epoch 0")."""
    if message.HasField("current_leader_epoch"):  # type: ignore[attr-defined]
        return int(message.current_leader_epoch)  # type: ignore[attr-defined]
    return -1


def check_produce_request(request: object) -> None:
    """What the gateway and the storage node both refuse before anything else: acks other
    than 0 and 1, no partitions, a partition named twice."""
    acks = request.acks  # type: ignore[attr-defined]
    topic = request.topic  # type: ignore[attr-defined]
    if acks not in (0, 1, -1):
        raise InvalidRequiredAcksError(f"acks={acks}: must be 0, 1 or -1 (all)")
    partitions = [data.partition for data in request.partitions]  # type: ignore[attr-defined]
    if not partitions:
        raise InvalidRequestError(f"produce to {topic!r} names no partition")
    timeout_ms = request.timeout_ms  # type: ignore[attr-defined]
    if timeout_ms < 0:
        raise InvalidRequestError(f"produce to {topic!r}: timeout_ms {timeout_ms} is negative")
    if len(set(partitions)) != len(partitions):
        twice = next(p for p in partitions if partitions.count(p) > 1)
        raise InvalidRequestError(f"{topic}-{twice} appears twice in one request")


# A long poll longer than this is refused: every waiting fetch holds a wait slot on the node.
MAX_FETCH_WAIT_MS = 5 * 60 * 1000


# Entries one request may name (partitions of a Fetch, ListOffsets or FetchOffsets, topics of
# a DescribeTopics): each costs the gateway work and answer bytes, and a million of them once
# took a gateway to 617 MB (ListOffsets) and 831 MB (FetchOffsets). Ten times the 10,000
# partitions the control plane is measured with.
MAX_REQUEST_ENTRIES = 100_000


def check_entries(count: int, what: str) -> None:
    """INVALID_REQUEST when one request names more than MAX_REQUEST_ENTRIES `what`."""
    if count > MAX_REQUEST_ENTRIES:
        raise InvalidRequestError(
            f"{count} {what} in one request; at most {MAX_REQUEST_ENTRIES} (split it)"
        )


def check_fetch_request(request: object) -> None:
    """A fetch's whole-request fields, checked by the gateway and the node alike; a bad one
    fails the call with INVALID_ARGUMENT instead of passing for a retriable timeout."""
    max_wait_ms = request.max_wait_ms  # type: ignore[attr-defined]
    min_bytes = request.min_bytes  # type: ignore[attr-defined]
    max_bytes = request.max_bytes  # type: ignore[attr-defined]
    check_entries(len(request.partitions), "fetch partitions")  # type: ignore[attr-defined]
    if not 0 <= max_wait_ms <= MAX_FETCH_WAIT_MS:
        raise InvalidRequestError(
            f"fetch max_wait_ms {max_wait_ms} is outside [0, {MAX_FETCH_WAIT_MS}]"
        )
    if min_bytes < 0:
        raise InvalidRequestError(f"fetch min_bytes {min_bytes} is negative")
    isolation_level = request.isolation_level  # type: ignore[attr-defined]
    if isolation_level not in (0, 1):
        raise InvalidRequestError(
            f"fetch isolation_level {isolation_level} is neither 0 (READ_UNCOMMITTED) nor 1 "
            f"(READ_COMMITTED)"
        )
    if max_bytes < 0:
        raise InvalidRequestError(f"fetch max_bytes {max_bytes} is negative")
