"""The share consumer's settings: Kafka's KafkaShareConsumer names in snake_case, Kafka's
defaults (dotted names work too: `share.acknowledgement.mode`). A share group's record lock
duration, delivery count limit and session timeout are the gateway's (group settings), not
the consumer's."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidConfigError
from ..rpc.client_id import check_client_id
from ..security.tls import ClientSecurity

# Kafka's share.acknowledgement.mode: "implicit" accepts every record of a poll when the
# next poll (or commit, or close) comes; "explicit" has the application acknowledge each one.
ACKNOWLEDGEMENT_MODES = ("implicit", "explicit")


@dataclass(frozen=True, kw_only=True)
class ShareConsumerConfig:
    group_id: str
    client_id: str = "seglog-share-consumer"
    share_acknowledgement_mode: str = "implicit"
    max_poll_records: int = 500
    fetch_min_bytes: int = 1
    fetch_max_wait_ms: int = 500
    fetch_max_bytes: int = 52_428_800
    request_timeout_ms: int = 30_000
    retry_backoff_ms: int = 100
    key_deserializer: Callable[[bytes | None], Any] | None = None
    value_deserializer: Callable[[bytes | None], Any] | None = None
    security_protocol: str = ""
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    bearer_token: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.group_id, str) or not self.group_id:
            raise InvalidConfigError("a share consumer needs a group_id")
        if self.share_acknowledgement_mode not in ACKNOWLEDGEMENT_MODES:
            raise InvalidConfigError(
                f"share_acknowledgement_mode must be one of {list(ACKNOWLEDGEMENT_MODES)}, "
                f"got {self.share_acknowledgement_mode!r}"
            )
        for name, minimum in (
            ("max_poll_records", 1),
            ("fetch_min_bytes", 1),
            ("fetch_max_wait_ms", 0),
            ("fetch_max_bytes", 1),
            ("request_timeout_ms", 1),
            ("retry_backoff_ms", 0),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise InvalidConfigError(f"{name} must be an int of at least {minimum}")
        for name in ("key_deserializer", "value_deserializer"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise InvalidConfigError(f"{name} must be a callable, got {value!r}")
        try:
            check_client_id(self.client_id)
        except ValueError as exc:
            raise InvalidConfigError(str(exc)) from None

    @property
    def explicit(self) -> bool:
        return self.share_acknowledgement_mode == "explicit"

    def security(self) -> ClientSecurity | None:
        try:
            return ClientSecurity.resolve(
                self.security_protocol,
                self.ssl_cafile,
                self.ssl_certfile,
                self.ssl_keyfile,
                self.bearer_token,
            )
        except ValueError as exc:
            raise InvalidConfigError(str(exc)) from None


_INT_FIELDS = frozenset(
    f.name for f in dataclasses.fields(ShareConsumerConfig) if f.type in ("int", int)
)


def share_config(config: Mapping[str, Any]) -> ShareConsumerConfig:
    """The config from user keyword arguments, unknown names refused with a suggestion."""
    fields = {f.name for f in dataclasses.fields(ShareConsumerConfig)}
    values: dict[str, Any] = {}
    for raw_name, value in config.items():
        name = raw_name.replace(".", "_").replace("-", "_")
        if name not in fields:
            close = difflib.get_close_matches(name, fields, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise InvalidConfigError(f"unknown share consumer setting {raw_name!r}{hint}")
        if name in values:
            raise InvalidConfigError(f"setting {raw_name!r} given twice")
        if isinstance(value, str) and name in _INT_FIELDS and value.lstrip("-").isdigit():
            value = int(value)  # from a properties file or the command line
        values[name] = value
    if "group_id" not in values:
        raise InvalidConfigError("a share consumer needs a group_id")
    return ShareConsumerConfig(**values)
