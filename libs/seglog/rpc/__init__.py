"""What the gRPC services and clients share: the error ↔ status mapping, the raw fetch
framing, channel and server options."""


def client_leader_epoch(message: object) -> int:
    """The `current_leader_epoch` a request part carries, or -1 when it is unset (an
    `optional` field: proto3's default of 0 must not read as "epoch 0")."""
    if message.HasField("current_leader_epoch"):  # type: ignore[attr-defined]
        return int(message.current_leader_epoch)  # type: ignore[attr-defined]
    return -1
