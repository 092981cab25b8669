"""The bare gRPC baseline: a server with raw-bytes handlers and nothing else.

    /bench.Echo/Put     unary: takes any payload, answers 8 bytes
    /bench.Echo/Stream  server stream: request = chunk count (8 bytes) and chunk size
                        (8 bytes); yields that many prebuilt FetchResponse wire messages

With `--relay-to HOST:PORT` it serves both by forwarding to that echo server instead: the
payload passed on unchanged, the stream's messages yielded unchanged. Two bare hops doing no
work: the ceiling of any design in which a gateway relays calls to a storage node.

With `--tls CERT KEY CA` (first) it serves mutual TLS and a relay dials upstream with the
same certificate: the ceiling of the same design with TLS on both hops.

With `--write-to FILE`, Put also appends each payload to FILE (one os.write, emptied past
WRITE_WRAP_BYTES so the file stays bounded): behind a relay, the ceiling of a relay to a
storage node that must at least put the bytes in the page cache.

Prints `echo listening on HOST:PORT` and serves until SIGTERM."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path

import grpc

from seglog.rpc import wire
from seglog.rpc.channels import open_channel
from seglog.security.tls import TlsFiles, channel_credentials, server_credentials
from services import serving

Put = Callable[[bytes, grpc.ServicerContext], bytes]
Stream = Callable[[bytes, grpc.ServicerContext], Iterator[bytes]]


WRITE_WRAP_BYTES = 1024 * 1024 * 1024


def _echo(write_to: Path | None = None) -> tuple[Put, Stream]:
    fd = -1 if write_to is None else os.open(write_to, os.O_CREAT | os.O_WRONLY | os.O_TRUNC)
    written = [0]
    lock = threading.Lock()

    def put(payload: bytes, context: grpc.ServicerContext) -> bytes:
        if fd >= 0:
            with lock:
                if written[0] >= WRITE_WRAP_BYTES:
                    os.ftruncate(fd, 0)
                    written[0] = 0
                written[0] += os.pwrite(fd, payload, written[0])
        return len(payload).to_bytes(8, "big")

    def stream(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        count = int.from_bytes(request[:8], "big")
        size = int.from_bytes(request[8:16], "big")
        chunk = wire.encode_fetch_response("bench", 0, 1, 0, b"\x00" * size)
        for _ in range(count):
            yield chunk

    return put, stream


def _relay(
    upstream_address: str, credentials: grpc.ChannelCredentials | None
) -> tuple[Put, Stream]:
    channel = open_channel(upstream_address, credentials=credentials)
    upstream_put = channel.unary_unary("/bench.Echo/Put", wire.identity, wire.identity)
    upstream_stream = channel.unary_stream("/bench.Echo/Stream", wire.identity, wire.identity)

    def put(payload: bytes, context: grpc.ServicerContext) -> bytes:
        return upstream_put(payload, timeout=60)  # type: ignore[no-any-return]

    def stream(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        yield from upstream_stream(request, timeout=120)

    return put, stream


def main(argv: list[str]) -> int:
    serving.keep_freed_buffers_for_reuse()  # as the seglog servers do: the same allocator
    tls = None
    if argv[:1] == ["--tls"]:
        tls = TlsFiles(Path(argv[1]), Path(argv[2]), Path(argv[3]))
        argv = argv[4:]
    credentials = None if tls is None else channel_credentials(tls)
    if argv[:1] == ["--relay-to"]:
        put, stream = _relay(argv[1], credentials)
    else:
        put, stream = _echo(Path(argv[1]) if argv[:1] == ["--write-to"] else None)
    handler = grpc.method_handlers_generic_handler(
        "bench.Echo",
        {
            "Put": grpc.unary_unary_rpc_method_handler(
                put, request_deserializer=wire.identity, response_serializer=wire.identity
            ),
            "Stream": grpc.unary_stream_rpc_method_handler(
                stream, request_deserializer=wire.identity, response_serializer=wire.identity
            ),
        },
    )
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=8),
        handlers=[handler],
        options=[("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)],
    )
    if tls is None:
        port = server.add_insecure_port("127.0.0.1:0")
    else:
        port = server.add_secure_port("127.0.0.1:0", server_credentials(tls, "required"))
    server.start()
    print(f"echo listening on 127.0.0.1:{port}", flush=True)
    serving.wait_for_signal()
    server.stop(2).wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
