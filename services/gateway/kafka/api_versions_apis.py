"""ApiVersions 0–4: the table itself, advertised exactly (a client never sends a version the
listener has no handler for), and from v3 the cluster's features (broker/features.py):
supported, finalized and their epoch, as `kafka-features describe` (the Admin client's
describeFeatures) reads them. v4 is v3's layout; only v4 lists features whose minimum is 0
(Kafka's ApiVersionsResponse leaves them out below v4), so tools asking v4 see them all.

UpdateFeatures 0–2: Alter on the cluster, then each change accepted only where it leaves the
feature at this release's level (INVALID_UPDATE_VERSION otherwise): seglog's features are
fixed by what it implements."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafka.protocol.admin import UpdateFeaturesRequest, UpdateFeaturesResponse
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from seglog.errors import PermissionDeniedError, SeglogError

from ..broker.features import FEATURES, check_update, finalized
from .api_table import ApiTable
from .error_codes import NONE, UNSUPPORTED_VERSION, kafka_error_code
from .kafka_call import KafkaCall

if TYPE_CHECKING:
    from ..server import Gateway

CLUSTER = ("cluster", "kafka-cluster")


def versions_response(
    table: ApiTable, version: int, error_code: int = NONE, features_epoch: int = -1
) -> Any:
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
    response = response_class(error_code=error_code, api_keys=api_keys, throttle_time_ms=0)
    if version >= 3:
        response.supported_features = [
            response_class.SupportedFeatureKey(
                name=f.name, min_version=f.min_version, max_version=f.max_version
            )
            for f in FEATURES
            if version >= 4 or f.min_version > 0
        ]
        response.finalized_features_epoch = features_epoch
        response.finalized_features = [
            response_class.FinalizedFeatureKey(
                name=f.name, max_version_level=f.finalized, min_version_level=f.finalized
            )
            for f in finalized()
        ]
    return response


def register(table: ApiTable, gateway: Gateway) -> None:
    def api_versions(call: KafkaCall, request: Any) -> Any:
        return versions_response(table, call.version, features_epoch=gateway.registry.image.offset)

    def update_features(call: KafkaCall, request: Any) -> Any:
        return _update_features(gateway, call, request)

    table.register(ApiVersionsRequest, 0, 4, api_versions)
    table.register(UpdateFeaturesRequest, 0, 2, update_features)


def _update_features(gateway: Gateway, call: KafkaCall, request: Any) -> Any:
    response_class = UpdateFeaturesResponse[call.version]
    try:
        gateway.authorization.check(call.caller, [("Alter", *CLUSTER)], "UpdateFeatures")
    except PermissionDeniedError as exc:
        return response_class(
            throttle_time_ms=0,
            error_code=kafka_error_code(exc, "cluster"),
            error_message=str(exc),
            results=[],
        )
    results = []
    for update in request.feature_updates:
        code, message = NONE, None
        try:
            check_update(update.feature, update.max_version_level)
        except SeglogError as exc:
            code, message = kafka_error_code(exc), str(exc)
        results.append(
            response_class.UpdatableFeatureResult(
                feature=update.feature, error_code=code, error_message=message
            )
        )
    # v2 answers one top-level code (Kafka's 4.x: the results list is gone).
    failed = next((r for r in results if r.error_code != NONE), None)
    return response_class(
        throttle_time_ms=0,
        error_code=NONE if failed is None or call.version < 2 else failed.error_code,
        error_message=None if failed is None or call.version < 2 else failed.error_message,
        results=results,
    )


__all__ = ["UNSUPPORTED_VERSION", "register", "versions_response"]
