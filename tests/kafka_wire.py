"""A Kafka protocol connection at the byte level, for tests that need what no client sends
(garbage, oversize frames, versions out of range) or must see the wire answer itself: requests
are encoded and answers decoded by kafka-python's generated message classes."""

from __future__ import annotations

import socket
import ssl
import struct
from typing import Any

from kafka.protocol.api_header import ResponseHeader
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

SIZE = struct.Struct(">i")


class KafkaWire:
    def __init__(
        self,
        address: str,
        client_id: str = "wire-test",
        timeout_s: float = 15.0,
        ssl_context: ssl.SSLContext | None = None,
    ):
        """`ssl_context`: an SSL listener's (tests/secured.py), else plaintext."""
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        if ssl_context is not None:
            self.sock = ssl_context.wrap_socket(self.sock, server_hostname=host)
        self.client_id = client_id
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> KafkaWire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def encode(self, request: Any, version: int) -> bytes:
        self.correlation_id += 1
        request.API_VERSION = version
        request.with_header(correlation_id=self.correlation_id, client_id=self.client_id)
        return bytes(request.encode(header=True, framed=True))

    def request(self, request: Any, version: int, response_class: Any) -> Any:
        """Send `request` at `version`; the decoded answer (its correlation id checked)."""
        self.send_raw(self.encode(request, version))
        frame = self.read_frame()
        if frame is None:
            raise ConnectionError("the listener closed the connection instead of answering")
        return self.decode(frame, version, response_class)

    def decode(self, frame: bytes, version: int, response_class: Any) -> Any:
        (correlation_id,) = SIZE.unpack_from(frame)
        assert correlation_id == self.correlation_id, (correlation_id, self.correlation_id)
        response = response_class.decode(frame, version=version, header=True)
        assert isinstance(response.header, ResponseHeader)
        return response

    def read_frame(self) -> bytes | None:
        """The next response frame without its size; None when the listener closed."""
        prefix = self._read(SIZE.size)
        if prefix is None:
            return None
        (size,) = SIZE.unpack(prefix)
        return self._read(size)

    def closed_by_listener(self) -> bool:
        """True when the listener closes the connection (rather than answering)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def _read(self, size: int) -> bytes | None:
        out = bytearray()
        while len(out) < size:
            try:
                chunk = self.sock.recv(size - len(out))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            out += chunk
        return bytes(out)


def fetch_request(
    version: int,
    partitions: dict[str, list[int]],
    *,
    fetch_offset: int = 0,
    max_wait_ms: int = 0,
    min_bytes: int = 0,
    max_bytes: int = 1 << 20,
) -> Any:
    """A consumer's sessionless Fetch of `partitions` (topic -> partition numbers), each
    from `fetch_offset`, at `version`."""
    fetch_topic = FetchRequest.FetchTopic
    return FetchRequest[version](
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            fetch_topic(
                topic=topic,
                partitions=[
                    fetch_topic.FetchPartition(
                        partition=partition,
                        current_leader_epoch=-1,
                        fetch_offset=fetch_offset,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=max_bytes,
                    )
                    for partition in numbers
                ],
            )
            for topic, numbers in partitions.items()
        ],
        forgotten_topics_data=[],
        rack_id="",
    )


def metadata(address: str, topic: str) -> Any:
    """Metadata v9 for `topic` as the listener at `address` answers it."""
    with KafkaWire(address) as wire:
        request = MetadataRequest[9](
            topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        return wire.request(request, 9, MetadataResponse)
