"""The Kafka fuzz test's side of the wire (tests/integration/test_kafka_fuzz.py): a request
framed with its header, sent on a new connection with an ApiVersions behind it, and what came
back (the answer, or the listener's close); and the log records that say a request met an
exception nobody expected."""

from __future__ import annotations

import logging
import socket
import struct
from dataclasses import dataclass
from typing import Any

import pytest
from kafka.protocol.metadata import ApiVersionsRequest

# Every wait a request can ask for is drawn short (kafka_strategies.WAIT_FIELDS); an answer
# later than this is a handler stuck, not a wait.
ANSWER_TIMEOUT_S = 10.0
FOLLOW_UP_CORRELATION_ID = 2**31 - 1
SIZE = struct.Struct(">i")


# The listener's line for a handler's unexpected exception (one line, no traceback).
HANDLER_GUARD_LOGGER = "services.gateway.kafka.handler_guard"


class Tracebacks(logging.Handler):
    """Every log record of the cluster's processes (all in this one) that carries a
    traceback, and every line of the listener's guard for a handler's unexpected exception:
    a request that reaches one has met an exception nobody expected."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        unexpected = record.name == HANDLER_GUARD_LOGGER and record.levelno >= logging.ERROR
        if record.exc_info or record.stack_info or unexpected:
            self.records.append(record)

    def take(self) -> list[str]:
        taken, self.records = self.records, []
        return [f"{r.name}: {r.getMessage()}\n{self.format(r)}" for r in taken]


def frame_of(request: Any, version: int, correlation_id: int) -> bytes:
    request.API_VERSION = version
    request.with_header(correlation_id=correlation_id, client_id="fuzz")
    return bytes(request.encode(header=True, framed=True))


FOLLOW_UP = frame_of(ApiVersionsRequest[0](), 0, FOLLOW_UP_CORRELATION_ID)


@dataclass
class Outcome:
    answer: bytes | None  # the request's answer frame (without its size), if any
    closed: bool  # the listener closed the connection (before the follow-up's answer)


def exchange(address: str, frame: bytes) -> Outcome:
    """Send `frame` and an ApiVersions behind it on a new connection; what came back."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=ANSWER_TIMEOUT_S) as sock:
        try:
            sock.sendall(frame + FOLLOW_UP)
        except OSError:
            return Outcome(None, closed=True)  # refused before all of it was read
        first = read_frame(sock)
        if first is None:
            return Outcome(None, closed=True)
        if SIZE.unpack_from(first)[0] == FOLLOW_UP_CORRELATION_ID:
            return Outcome(None, closed=False)  # the request was answered with nothing
        follow_up = read_frame(sock)
        if follow_up is not None:
            assert SIZE.unpack_from(follow_up)[0] == FOLLOW_UP_CORRELATION_ID, "two answers"
        return Outcome(first, closed=follow_up is None)


def read_frame(sock: socket.socket) -> bytes | None:
    """The next frame without its size; None when the listener closed (or reset) first. A
    listener that neither answers nor closes within ANSWER_TIMEOUT_S fails the example."""
    out = bytearray()
    size = None
    while size is None or len(out) < size:
        want = (SIZE.size if size is None else size) - len(out)
        try:
            chunk = sock.recv(want)
        except ConnectionResetError:
            return None
        except TimeoutError:
            pytest.fail(f"no answer and no close within {ANSWER_TIMEOUT_S} s")
        if not chunk:
            return None
        out += chunk
        if size is None and len(out) == SIZE.size:
            (size,) = SIZE.unpack(out)
            out.clear()
    return bytes(out)


def error_codes(value: Any, depth: int = 0) -> set[int]:
    """Every error_code in an answer, however deep (its structs and arrays)."""
    codes: set[int] = set()
    if depth > 4 or value is None:
        return codes
    if isinstance(value, list):
        for element in value[:50]:
            codes |= error_codes(element, depth + 1)
        return codes
    struct = getattr(value, "_struct", None)
    if struct is None:
        return codes
    for name in struct.fields:
        field_value = getattr(value, name, None)
        if name == "error_code" and isinstance(field_value, int):
            codes.add(field_value)
        elif isinstance(field_value, list) or hasattr(field_value, "_struct"):
            codes |= error_codes(field_value, depth + 1)
    return codes


def exchange_queued(address: str, frames: list[bytes], correlation_ids: list[int]) -> list[bytes]:
    """Send `frames` and an ApiVersions behind them in one write, so that the listener finds
    them queued together (Produce's are answered together: produce_coalescing.py); the
    answers, in order, up to the follow-up's or the close."""
    host, port = address.rsplit(":", 1)
    answers: list[bytes] = []
    with socket.create_connection((host, int(port)), timeout=ANSWER_TIMEOUT_S) as sock:
        try:
            sock.sendall(b"".join(frames) + FOLLOW_UP)
        except OSError:
            return answers
        while (received := read_frame(sock)) is not None:
            (correlation_id,) = SIZE.unpack_from(received)
            if correlation_id == FOLLOW_UP_CORRELATION_ID:
                # Open to the end: every request was answered (none has acks=0), in order.
                assert len(answers) == len(frames), "a request went unanswered"
                break
            assert correlation_id == correlation_ids[len(answers)], "answered out of order"
            answers.append(received)
    return answers
