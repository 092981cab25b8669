"""What the gRPC services and clients share: the error ↔ status mapping, the raw fetch
framing, channel and server options."""
