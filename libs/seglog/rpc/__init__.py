"""What the gRPC services and clients share: the error ↔ status mapping, the raw fetch
framing, channel and server options, and checks on a request's shape."""

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
    if acks not in (0, 1):
        raise InvalidRequiredAcksError(
            f"acks={acks}: only 0 and 1 are supported until replication exists "
            f"(acks=all needs in-sync replicas)"
        )
    partitions = [data.partition for data in request.partitions]  # type: ignore[attr-defined]
    if not partitions:
        raise InvalidRequestError(f"produce to {topic!r} names no partition")
    if len(set(partitions)) != len(partitions):
        twice = next(p for p in partitions if partitions.count(p) > 1)
        raise InvalidRequestError(f"{topic}-{twice} appears twice in one request")
