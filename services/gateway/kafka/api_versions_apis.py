"""ApiVersions 0–3: the table itself, advertised exactly (a client never sends a version the
listener has no handler for)."""

from __future__ import annotations

from typing import Any

from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from .api_table import ApiTable
from .error_codes import NONE, UNSUPPORTED_VERSION
from .kafka_call import KafkaCall


def versions_response(table: ApiTable, version: int, error_code: int = NONE) -> Any:
    """The response listing every entry's versions; with UNSUPPORTED_VERSION it is v0, which
    any client reads, as Kafka's broker answers an ApiVersions version it does not know."""
    if error_code != NONE:
        version = 0
    response_class = ApiVersionsResponse[version]
    api_keys = [
        response_class.ApiVersion(
            api_key=entry.api_key, min_version=entry.min_version, max_version=entry.max_version
        )
        for entry in table.entries()
    ]
    return response_class(error_code=error_code, api_keys=api_keys, throttle_time_ms=0)


def register(table: ApiTable) -> None:
    def api_versions(call: KafkaCall, request: Any) -> Any:
        return versions_response(table, call.version)

    table.register(ApiVersionsRequest, 0, 3, api_versions)


__all__ = ["UNSUPPORTED_VERSION", "register", "versions_response"]
