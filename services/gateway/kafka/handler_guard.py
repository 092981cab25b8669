"""What becomes of a handler's unexpected exception: one log line naming the api, its version,
the peer, the exception and where it was raised, then the connection closed (the listener's
answer to a request it cannot read, as Kafka's broker closes it on an InvalidRequestException).

Every request is checked against its schema before a handler sees it (request_schema.py), and
each case that got past that to a handler's exception was given Kafka's answer in its handler
(the fuzz test over every advertised API looks for them: test_kafka_fuzz.py). What still
reaches here is a request that decoded but that a handler was not written for; a stranger can
send as many as they like, so each costs one line at ERROR, not a traceback of 20 (the
traceback goes to DEBUG for whoever needs it). What a handler raises on purpose passes
through: a FrameError (the connection is closed), a SASL failure (answered, then closed); the
memory budget exhausted closes the connection as a FrameError does.

The table wraps every handler it registers (api_table.py), so no handler needs its own.
"""

from __future__ import annotations

import logging
import os
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from seglog.errors import MemoryBudgetExhaustedError

from .framing import FrameError
from .sasl import SaslFailed

if TYPE_CHECKING:
    from .kafka_call import KafkaCall

logger = logging.getLogger(__name__)

_Answer = TypeVar("_Answer")


class HandlerFailed(FrameError):
    """A handler's unexpected exception, logged: the connection is closed."""


def _passes(exc: BaseException) -> bool:
    """Raised on purpose: FrameError, and the SASL failure that carries its own answer."""

    return isinstance(exc, FrameError | SaslFailed)


def _refused(api: str, call: KafkaCall, exc: Exception) -> FrameError | None:
    """The gateway's memory budget running out under a handler: the connection is closed as
    for a request there was no room to read (one line at INFO, by the listener), not as a
    handler's failure."""
    if isinstance(exc, MemoryBudgetExhaustedError):
        return FrameError(f"{api} v{call.version}: {exc}")
    return None


def _where(exc: BaseException) -> str:
    """`file:line in function` of the innermost frame, the place the exception was raised."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "?"
    last = frames[-1]
    return f"{os.path.basename(last.filename)}:{last.lineno} in {last.name}"


def _peer(call: KafkaCall) -> str:
    identity = call.session.identity
    return f"{identity.peer_host}:{identity.peer_port}"


def failed(api: str, call: KafkaCall, exc: Exception) -> HandlerFailed:
    """Log `exc` as one line and return the FrameError that closes the connection."""
    cause = f"{type(exc).__name__}: {exc}"[:500]
    logger.error(
        "Kafka %s v%d from %s failed: %s (at %s); closing the connection",
        api,
        call.version,
        _peer(call),
        cause,
        _where(exc),
    )
    logger.debug("Kafka %s v%d failed", api, call.version, exc_info=exc)
    return HandlerFailed(f"{api} v{call.version} failed: {cause}")


def guarded(
    api: str, handler: Callable[[KafkaCall, Any], _Answer]
) -> Callable[[KafkaCall, Any], _Answer]:
    def run(call: KafkaCall, request: Any) -> _Answer:
        try:
            return handler(call, request)
        except Exception as exc:
            if _passes(exc):
                raise
            raise _refused(api, call, exc) or failed(api, call, exc) from None

    return run


def guarded_batch(
    api: str, handler: Callable[[list[KafkaCall], list[Any]], list[Any]]
) -> Callable[[list[KafkaCall], list[Any]], list[Any]]:
    def run(calls: list[KafkaCall], requests: list[Any]) -> list[Any]:
        try:
            return handler(calls, requests)
        except Exception as exc:
            if _passes(exc):
                raise
            raise _refused(api, calls[0], exc) or failed(api, calls[0], exc) from None

    return run
