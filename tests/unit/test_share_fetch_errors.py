"""A ShareFetch partition's error codes are ones Kafka's share consumer handles: a leader that is
down or moving is NOT_LEADER_OR_FOLLOWER (it refreshes metadata and fetches again), never
LEADER_NOT_AVAILABLE, on which it throws IllegalStateException ("Unexpected error code 5 while
fetching", seen when a leader's node was SIGKILLed under a share group of Kafka's consumers)."""

from __future__ import annotations

from seglog.errors import (
    CoordinatorNotAvailableError,
    LeaderNotAvailableError,
    LogClosedError,
    NodeUnavailableError,
    PermissionDeniedError,
)
from services.gateway.kafka.error_codes import NOT_LEADER_OR_FOLLOWER
from services.gateway.kafka.share_fetch_apis import _fetch_error_code


def test_a_leader_down_or_moving_is_not_leader_or_follower():
    for error in (
        LeaderNotAvailableError("no leader"),
        NodeUnavailableError("node 2 is down"),
        LogClosedError("closed"),
        CoordinatorNotAvailableError("the holder died"),
    ):
        assert _fetch_error_code(error) == NOT_LEADER_OR_FOLLOWER, error


def test_other_errors_keep_their_own_codes():
    assert _fetch_error_code(PermissionDeniedError("no")) == 29  # TOPIC_AUTHORIZATION_FAILED
