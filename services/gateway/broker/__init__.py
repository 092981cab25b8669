"""The broker core: what the gateway does for a client, typed, whichever protocol asked.

The gRPC services and the Kafka listener are two adapters over it: each decodes its own wire
format into the core's typed requests, names the caller (`Caller`), and encodes the core's
typed answers and errors back. The core never sees a grpc.ServicerContext, a gRPC status or a
Kafka request object.
"""
