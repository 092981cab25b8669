"""DescribeUserScramCredentials 0 and AlterUserScramCredentials 0 (KIP-554) over the broker
core's users' credentials (cluster/user_scram.py): what `kafka-configs --entity-type users`
describes and alters.

A caller who may not Describe (Alter) the cluster gets CLUSTER_AUTHORIZATION_FAILED: for
Describe as the top-level code, for Alter as each named user's, as Kafka's broker answers.
Mechanisms travel as Kafka's ScramMechanism type byte (1 SCRAM-SHA-256, 2 SCRAM-SHA-512).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafka import errors as kafka_errors
from kafka.protocol.admin import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)

from seglog.errors import PermissionDeniedError

from ..cluster.scram_credentials import MECHANISM_NAMES, MECHANISM_TYPES
from ..cluster.user_scram import ScramDeletion, ScramUpsertion, UserOutcome, UserScram
from .error_codes import CLUSTER_AUTHORIZATION_FAILED, NONE

if TYPE_CHECKING:
    from ..server import Gateway
    from .api_table import ApiTable
    from .kafka_call import KafkaCall

_USER_ERRORS: dict[str, int] = {
    "RESOURCE_NOT_FOUND": kafka_errors.ResourceNotFoundError.errno,
    "DUPLICATE_RESOURCE": kafka_errors.DuplicateResourceError.errno,
    "UNACCEPTABLE_CREDENTIAL": kafka_errors.UnacceptableCredentialError.errno,
    "UNSUPPORTED_SASL_MECHANISM": kafka_errors.UnsupportedSaslMechanismError.errno,
}


def register(table: ApiTable, gateway: Gateway) -> None:
    core = UserScram(gateway.registry, gateway.authorization)

    def describe(call: KafkaCall, request: Any) -> Any:
        return describe_user_scram_credentials(core, call, request)

    def alter(call: KafkaCall, request: Any) -> Any:
        return alter_user_scram_credentials(core, call, request)

    table.register(DescribeUserScramCredentialsRequest, 0, 0, describe)
    table.register(AlterUserScramCredentialsRequest, 0, 0, alter)


def _code(outcome: UserOutcome) -> int:
    return NONE if outcome.error is None else _USER_ERRORS[outcome.error]


def describe_user_scram_credentials(core: UserScram, call: KafkaCall, request: Any) -> Any:
    response_class = DescribeUserScramCredentialsResponse[call.version]
    result_class = response_class.DescribeUserScramCredentialsResult
    users = None if request.users is None else [u.name for u in request.users]
    try:
        outcomes = core.describe(call.caller, users)
    except PermissionDeniedError as exc:
        return response_class(
            throttle_time_ms=call.throttle_time_ms,
            error_code=CLUSTER_AUTHORIZATION_FAILED,
            error_message=str(exc),
            results=[],
        )
    results = [
        result_class(
            user=o.user,
            error_code=_code(o),
            error_message=o.message,
            credential_infos=[
                result_class.CredentialInfo(
                    mechanism=MECHANISM_TYPES[info.mechanism], iterations=info.iterations
                )
                for info in o.credentials
            ],
        )
        for o in outcomes
    ]
    return response_class(
        throttle_time_ms=call.throttle_time_ms,
        error_code=NONE,
        error_message=None,
        results=results,
    )


def alter_user_scram_credentials(core: UserScram, call: KafkaCall, request: Any) -> Any:
    response_class = AlterUserScramCredentialsResponse[call.version]
    result_class = response_class.AlterUserScramCredentialsResult
    deletions = [
        ScramDeletion(d.name, MECHANISM_NAMES.get(d.mechanism, "UNKNOWN"))
        for d in request.deletions
    ]
    upsertions = [
        ScramUpsertion(
            u.name,
            MECHANISM_NAMES.get(u.mechanism, "UNKNOWN"),
            u.iterations,
            bytes(u.salt),
            bytes(u.salted_password),
        )
        for u in request.upsertions
    ]
    try:
        outcomes = core.alter(call.caller, deletions, upsertions)
    except PermissionDeniedError as exc:
        named = dict.fromkeys([d.user for d in deletions] + [u.user for u in upsertions])
        outcomes = [UserOutcome(user) for user in named]
        return response_class(
            throttle_time_ms=call.throttle_time_ms,
            results=[
                result_class(
                    user=o.user, error_code=CLUSTER_AUTHORIZATION_FAILED, error_message=str(exc)
                )
                for o in outcomes
            ],
        )
    return response_class(
        throttle_time_ms=call.throttle_time_ms,
        results=[
            result_class(user=o.user, error_code=_code(o), error_message=o.message)
            for o in outcomes
        ],
    )
