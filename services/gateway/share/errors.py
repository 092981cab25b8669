"""The errors particular to share groups, each one Kafka error code (the Kafka adapter maps
them: kafka/share_fetch_apis.py). Kafka's codes: INVALID_RECORD_STATE 121,
SHARE_SESSION_NOT_FOUND 122, INVALID_SHARE_SESSION_EPOCH 123, FENCED_MEMBER_EPOCH 110,
SHARE_SESSION_LIMIT_REACHED 133."""

from __future__ import annotations

from seglog.errors import SeglogError


class InvalidRecordStateError(SeglogError):
    """An acknowledgement of a record this member does not hold (not acquired, acquired by
    another member, or its lock lapsed)."""

    reason = "INVALID_RECORD_STATE"


class ShareSessionNotFoundError(SeglogError):
    """An incremental ShareFetch/ShareAcknowledge with no share session open."""

    reason = "SHARE_SESSION_NOT_FOUND"
    retriable = True


class InvalidShareSessionEpochError(SeglogError):
    reason = "INVALID_SHARE_SESSION_EPOCH"
    retriable = True


class FencedMemberEpochError(SeglogError):
    """A heartbeat at an epoch the group no longer has for the member: it rejoins at 0."""

    reason = "FENCED_MEMBER_EPOCH"


class ShareSessionLimitReachedError(SeglogError):
    """A new share session on a gateway holding as many as it may."""

    reason = "SHARE_SESSION_LIMIT_REACHED"
    retriable = True
