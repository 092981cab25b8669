"""The APIs the Kafka listener answers: for each api key, the request class (kafka-python's,
generated from Kafka's JSON schemas), the versions served and the handler.

ApiVersions advertises exactly this table, so a client never sends a version the listener
has no handler for; one that does anyway is answered as Kafka's broker answers it
(connection.py). A handler gets the call (kafka_call.py) and the decoded request, and returns
the response object of the request's version (`Response[call.version](...)`), or None when
no response is due (Produce with acks=0); an exception it did not mean to raise is one log
line and a closed connection (handler_guard.py).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .handler_guard import guarded, guarded_batch

if TYPE_CHECKING:
    from .kafka_call import KafkaCall

Handler = Callable[["KafkaCall", Any], Any]
# Several requests of one api that a connection had queued, answered together (each its own
# response, in order): Produce coalesces them into fewer appends (produce_coalescing.py).
BatchHandler = Callable[[list["KafkaCall"], list[Any]], list[Any]]


@dataclass(frozen=True)
class ApiEntry:
    request_class: Any
    response_class: Any
    min_version: int
    max_version: int
    handler: Handler
    batch_handler: BatchHandler | None = None

    @property
    def api_key(self) -> int:
        return int(self.request_class.API_KEY)

    @property
    def name(self) -> str:
        return str(self.request_class.name).removesuffix("Request")

    def serves(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


def response_class_of(request_class: Any) -> Any:
    """The response class beside a request class (`FetchRequest` -> `FetchResponse`)."""
    module = sys.modules[request_class.__module__]
    return getattr(module, request_class.__name__.removesuffix("Request") + "Response")


class ApiTable:
    def __init__(self) -> None:
        self._entries: dict[int, ApiEntry] = {}

    def register(
        self,
        request_class: Any,
        min_version: int,
        max_version: int,
        handler: Handler,
        *,
        batch_handler: BatchHandler | None = None,
    ) -> None:
        """Serve `request_class` at versions min_version..max_version with `handler` (and
        `batch_handler` for several queued requests at once, when given). An api key is
        registered once; the versions must be ones the codec knows."""
        if not 0 <= min_version <= max_version <= request_class.max_version:
            raise ValueError(
                f"{request_class.name}: versions {min_version}..{max_version} are not within "
                f"the codec's 0..{request_class.max_version}"
            )
        api_key = int(request_class.API_KEY)
        if api_key in self._entries:
            raise ValueError(f"{request_class.name} (api key {api_key}) is registered twice")
        # A handler's unexpected exception is one log line and a closed connection
        # (handler_guard.py), the same for every api.
        name = str(request_class.name).removesuffix("Request")
        self._entries[api_key] = ApiEntry(
            request_class,
            response_class_of(request_class),
            min_version,
            max_version,
            guarded(name, handler),
            None if batch_handler is None else guarded_batch(name, batch_handler),
        )

    def entry(self, api_key: int) -> ApiEntry | None:
        return self._entries.get(api_key)

    def entries(self) -> list[ApiEntry]:
        """Every entry, by api key (ApiVersions' order)."""
        return [self._entries[key] for key in sorted(self._entries)]
