"""Dynamic group configs (Kafka 4's GroupConfig, KIP-848 and KIP-932): `kafka-configs
--entity-type groups --entity-name G --alter --add-config share.auto.offset.reset=earliest`,
i.e. IncrementalAlterConfigs / AlterConfigs / DescribeConfigs on a GROUP resource (type 32),
kept in the registry (group_config records: file and etcd stores alike, so every gateway
sees them and they survive restarts), and read by the coordinators per group: the KIP-848
coordinator's session and heartbeat, the share coordinator's session, heartbeat, record lock
duration, delivery count limit, record locks per partition, auto offset reset and isolation
level, and the dead-letter writer's topic and copy mode (KIP-1191, Kafka 4.4:
errors.deadletterqueue.topic.name, which must start with the cluster's
errors.deadletterqueue.topic.name.prefix and be a legal topic name, and
errors.deadletterqueue.copy.record.enable).

Kept: the group configs seglog applies (CONFIGS below); Kafka's others (the assignment
intervals, assignor offload, share.renew.acknowledge.enable, streams.*) are INVALID_CONFIG,
as a stored value nothing reads would mislead. Values are checked as Kafka's GroupConfig
checks them, with its messages: the type and the config's own lower bound first, then the
broker's min/max bounds (Kafka's group.consumer.min.session.timeout.ms and the like; seglog
takes Kafka's default bounds, widened to hold the gateway's own default, which Kafka
requires to lie within them), then a session longer than its heartbeat, on the group's whole
resulting set merged over the broker's defaults. Nothing is stored unless all of it passes.

Who may: DescribeConfigs on the group to read, AlterConfigs on the group to change, as
Kafka's broker asks for a GROUP resource.

Reading a group's configs in force (`of`) is a dict look-up by group id on the registry's
image (swapped whole on each change) and a cache of the parsed set: a heartbeat's cost does
not grow with the number of groups.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from seglog.errors import InvalidConfigError, InvalidRequestError

if TYPE_CHECKING:
    from ..authorization import Authorization
    from ..broker.caller import Caller
    from .registry import Registry

CONSUMER_SESSION_TIMEOUT_MS = "consumer.session.timeout.ms"
CONSUMER_HEARTBEAT_INTERVAL_MS = "consumer.heartbeat.interval.ms"
SHARE_SESSION_TIMEOUT_MS = "share.session.timeout.ms"
SHARE_HEARTBEAT_INTERVAL_MS = "share.heartbeat.interval.ms"
SHARE_RECORD_LOCK_DURATION_MS = "share.record.lock.duration.ms"
SHARE_DELIVERY_COUNT_LIMIT = "share.delivery.count.limit"
SHARE_PARTITION_MAX_RECORD_LOCKS = "share.partition.max.record.locks"
SHARE_AUTO_OFFSET_RESET = "share.auto.offset.reset"
SHARE_ISOLATION_LEVEL = "share.isolation.level"
DLQ_TOPIC_NAME = "errors.deadletterqueue.topic.name"
DLQ_COPY_RECORD_ENABLE = "errors.deadletterqueue.copy.record.enable"
# Kafka's other group configs (4.3): known, not kept.
NOT_KEPT = (
    "consumer.assignment.interval.ms",
    "consumer.assignor.offload.enable",
    "share.assignment.interval.ms",
    "share.assignor.offload.enable",
    "share.renew.acknowledge.enable",
    "streams.session.timeout.ms",
    "streams.heartbeat.interval.ms",
    "streams.num.standby.replicas",
    "streams.initial.rebalance.delay.ms",
    "streams.assignment.interval.ms",
    "streams.assignor.offload.enable",
)
READ_COMMITTED, READ_UNCOMMITTED = "read_committed", "read_uncommitted"
EARLIEST, LATEST, BY_DURATION = "earliest", "latest", "by_duration:"
_INT_MAX = 2**31 - 1
_INTEGER = re.compile(r"^[+-]?[0-9]+$")
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")  # Kafka's Topic.validate
_TOPIC_NAME_MAX = 249
# Java's Duration.parse form, as Kafka's by_duration takes it (PnDTnHnMn.nS, not negative).
_DURATION = re.compile(
    r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d{1,9})?)S)?)?$", re.IGNORECASE
)

Source = Literal["group", "default"]


@dataclass(frozen=True)
class ConfigDef:
    """One group config: Kafka's type and lower bound, and the broker configs naming its
    default (Kafka's synonym, which DescribeConfigs shows) and its bounds
    (group.consumer.min.session.timeout.ms ...)."""

    name: str
    broker_name: str
    kind: Literal["int", "string", "boolean"]
    at_least: int = 0
    bounds: tuple[int, int] | None = None  # Kafka's default broker min/max
    bound_prefix: str = ""  # group.consumer.min. / group.consumer.max. + what it bounds


def _int(name: str, broker: str, at_least: int, bounds: tuple[int, int], prefix: str) -> ConfigDef:
    return ConfigDef(name, broker, "int", at_least, bounds, prefix)


# In Kafka's GroupConfig order (its checks run in this order).
CONFIGS = (
    _int(
        CONSUMER_SESSION_TIMEOUT_MS,
        "group.consumer.session.timeout.ms",
        1,
        (45_000, 60_000),
        "group.consumer.%s.session.timeout.ms",
    ),
    _int(
        CONSUMER_HEARTBEAT_INTERVAL_MS,
        "group.consumer.heartbeat.interval.ms",
        1,
        (5000, 15_000),
        "group.consumer.%s.heartbeat.interval.ms",
    ),
    _int(
        SHARE_SESSION_TIMEOUT_MS,
        "group.share.session.timeout.ms",
        1,
        (45_000, 60_000),
        "group.share.%s.session.timeout.ms",
    ),
    _int(
        SHARE_HEARTBEAT_INTERVAL_MS,
        "group.share.heartbeat.interval.ms",
        1,
        (5000, 15_000),
        "group.share.%s.heartbeat.interval.ms",
    ),
    _int(
        SHARE_RECORD_LOCK_DURATION_MS,
        "group.share.record.lock.duration.ms",
        1000,
        (15_000, 60_000),
        "group.share.%s.record.lock.duration.ms",
    ),
    _int(
        SHARE_DELIVERY_COUNT_LIMIT,
        "group.share.delivery.count.limit",
        2,
        (2, 10),
        "group.share.%s.delivery.count.limit",
    ),
    _int(
        SHARE_PARTITION_MAX_RECORD_LOCKS,
        "group.share.partition.max.record.locks",
        100,
        (100, 4000),
        "group.share.%s.partition.max.record.locks",
    ),
    ConfigDef(SHARE_AUTO_OFFSET_RESET, "share.auto.offset.reset", "string"),
    ConfigDef(SHARE_ISOLATION_LEVEL, "share.isolation.level", "string"),
    # KIP-1191's: no broker config names their default; seglog's gateway settings of the same
    # names give it (empty: no dead-letter topic).
    ConfigDef(DLQ_TOPIC_NAME, DLQ_TOPIC_NAME, "string"),
    ConfigDef(DLQ_COPY_RECORD_ENABLE, DLQ_COPY_RECORD_ENABLE, "boolean"),
)
BY_NAME = {c.name: c for c in CONFIGS}
# A session must be longer than its heartbeat (Kafka's checkSessionExceedsHeartbeat).
_SESSIONS = (
    (CONSUMER_SESSION_TIMEOUT_MS, CONSUMER_HEARTBEAT_INTERVAL_MS),
    (SHARE_SESSION_TIMEOUT_MS, SHARE_HEARTBEAT_INTERVAL_MS),
)


@dataclass(frozen=True)
class GroupConfig:
    """A group's configs in force: its own, else the gateway's defaults."""

    consumer_session_timeout_ms: int
    consumer_heartbeat_interval_ms: int
    share_session_timeout_ms: int
    share_heartbeat_interval_ms: int
    share_record_lock_duration_ms: int
    share_delivery_count_limit: int
    share_partition_max_record_locks: int
    share_auto_offset_reset: str  # earliest, latest or by_duration:<ISO 8601 duration>
    share_isolation_level: str
    errors_deadletterqueue_topic_name: str  # "": the group has no dead-letter topic
    errors_deadletterqueue_copy_record_enable: bool

    @classmethod
    def parse(cls, values: Mapping[str, str]) -> GroupConfig:
        fields: dict[str, int | str | bool] = {
            c.name.replace(".", "_"): _typed(c, values[c.name]) for c in CONFIGS
        }
        return cls(**fields)  # type: ignore[arg-type]


def _typed(c: ConfigDef, value: str) -> int | str | bool:
    if c.kind == "int":
        return int(value)
    if c.kind == "boolean":
        return value.strip().lower() == "true"
    return value


@dataclass(frozen=True)
class DescribedGroupConfig:
    name: str
    value: str
    source: Source  # the group's own (Kafka's DYNAMIC_GROUP_CONFIG) or the default
    broker_name: str  # the broker config giving its default (Kafka's synonym)
    default: str


def duration_ms(reset: str) -> int | None:
    """A by_duration:<PnDTnHnMn.nS> reset's duration in ms (None: not one)."""
    if not reset.startswith(BY_DURATION):
        return None
    found = _DURATION.match(reset[len(BY_DURATION) :])
    if found is None or found.group(0).upper() in ("P", "PT"):
        return None
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in found.groups())
    return int((((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000)


def _check_value(c: ConfigDef, value: str, dlq_prefix: str) -> None:
    """Kafka's ConfigDef.parse: the type and the config's own validator."""
    if c.kind == "boolean":
        if value.strip().lower() not in ("true", "false"):
            raise InvalidConfigError(
                f"Invalid value {value} for configuration {c.name}: Expected value to be either "
                "true or false"
            )
    elif c.name == DLQ_TOPIC_NAME:
        _check_dlq_topic(value, dlq_prefix)
    elif c.kind == "int":
        text = value.strip()
        if not _INTEGER.match(text) or not -(2**31) <= int(text) <= _INT_MAX:
            raise InvalidConfigError(
                f"Invalid value {value} for configuration {c.name}: Not a number of type INT"
            )
        if int(text) < c.at_least:
            raise InvalidConfigError(
                f"Invalid value {text} for configuration {c.name}: "
                f"Value must be at least {c.at_least}"
            )
    elif c.name == SHARE_AUTO_OFFSET_RESET:
        if value.strip().lower() not in (EARLIEST, LATEST) and duration_ms(value.strip()) is None:
            raise InvalidConfigError(
                f"Invalid value {value} for configuration {c.name}: Invalid value `{value}` for "
                f"configuration {c.name}. The value must be either 'earliest', 'latest' or of "
                "the format 'by_duration:<PnDTnHnMn.nS>'."
            )
    elif value not in (READ_COMMITTED, READ_UNCOMMITTED):
        raise InvalidConfigError(
            f"Invalid value {value} for configuration {c.name}: "
            f"String must be one of: {READ_COMMITTED}, {READ_UNCOMMITTED}"
        )


def _check_dlq_topic(name: str, prefix: str) -> None:
    """KIP-1191's rule: a dead-letter topic's name starts with the cluster's prefix, so a
    group cannot be pointed at a business topic; and it is a topic name Kafka accepts."""
    if not name:
        return
    if not name.startswith(prefix):
        raise InvalidConfigError(
            f"Invalid value {name} for configuration {DLQ_TOPIC_NAME}: the topic name must "
            f"start with the prefix {prefix!r} (errors.deadletterqueue.topic.name.prefix)"
        )
    if name in (".", "..") or len(name) > _TOPIC_NAME_MAX or not _LEGAL_TOPIC.match(name):
        raise InvalidConfigError(
            f"Invalid value {name} for configuration {DLQ_TOPIC_NAME}: not a legal topic name "
            f"(at most {_TOPIC_NAME_MAX} of ASCII alphanumerics, '.', '_' and '-')"
        )
    if name.startswith("__"):
        raise InvalidConfigError(
            f"Invalid value {name} for configuration {DLQ_TOPIC_NAME}: an internal topic"
        )


class GroupConfigs:
    def __init__(
        self,
        registry: Registry,
        authorization: Authorization,
        defaults: Mapping[str, str],
        dlq_topic_prefix: str = "dlq.",
    ) -> None:
        """`defaults`: each kept config's broker default (the gateway's settings), by the
        group config's name; `dlq_topic_prefix`: the cluster's
        errors.deadletterqueue.topic.name.prefix, which a group's dead-letter topic starts
        with."""
        # KIP-1191's have no broker default in Kafka: none and false unless given.
        defaults = {DLQ_TOPIC_NAME: "", DLQ_COPY_RECORD_ENABLE: "false", **defaults}
        missing = [c.name for c in CONFIGS if c.name not in defaults]
        if missing:
            raise ValueError(f"group config defaults missing: {missing}")
        self.registry = registry
        self.authorization = authorization
        self.defaults = {c.name: str(defaults[c.name]) for c in CONFIGS}
        self.dlq_topic_prefix = dlq_topic_prefix
        for c in CONFIGS:
            _check_value(c, self.defaults[c.name], dlq_topic_prefix)
        # The broker's bounds: Kafka's defaults, widened to hold the gateway's default.
        self.bounds = {
            c.name: (
                min(c.bounds[0], int(self.defaults[c.name])),
                max(c.bounds[1], int(self.defaults[c.name])),
            )
            for c in CONFIGS
            if c.bounds is not None
        }
        self.default = GroupConfig.parse(self.defaults)
        self._lock = threading.Lock()
        # (the registry's group_configs dict this cache was made from, group -> parsed)
        self._cache: tuple[object, dict[str, GroupConfig]] = (None, {})

    def of(self, group_id: str) -> GroupConfig:
        """The group's configs in force (for the coordinators: no caller, no check)."""
        stored = self.registry.group_configs
        own = stored.get(group_id)
        if not own:
            return self.default
        seen, parsed = self._cache
        if seen is not stored:
            with self._lock:
                seen, parsed = self._cache
                if seen is not stored:
                    parsed = {}
                    self._cache = (stored, parsed)
        found = parsed.get(group_id)
        if found is None:
            found = parsed[group_id] = GroupConfig.parse({**self.defaults, **own})
        return found

    def describe(self, caller: Caller, group_id: str) -> list[DescribedGroupConfig]:
        self.authorization.check(
            caller, [("DescribeConfigs", "group", group_id)], "DescribeConfigs"
        )
        _check_group(group_id)
        own = self.registry.group_configs.get(group_id, {})
        return [
            DescribedGroupConfig(
                c.name,
                own.get(c.name, self.defaults[c.name]),
                "group" if c.name in own else "default",
                c.broker_name,
                self.defaults[c.name],
            )
            for c in sorted(CONFIGS, key=lambda c: c.name)
        ]

    def alter(
        self,
        caller: Caller,
        group_id: str,
        set_configs: Mapping[str, str],
        delete: Iterable[str] = (),
        *,
        replace: bool = False,
        validate_only: bool = False,
    ) -> None:
        """Set and delete a group's configs, the whole resulting set checked before any is
        stored; `replace`: the given set becomes the whole set (AlterConfigs)."""
        self.authorization.check(caller, [("AlterConfigs", "group", group_id)], "AlterConfigs")
        _check_group(group_id)
        current = {} if replace else dict(self.registry.group_configs.get(group_id, {}))
        for name in delete:
            current.pop(name, None)
        current.update(set_configs)
        checked = self.checked(current)
        if not validate_only:
            self.registry.alter_group_configs(group_id, checked)

    def checked(self, configs: Mapping[str, str]) -> dict[str, str]:
        """A group's whole set as Kafka's GroupConfig.validate checks it (InvalidConfigError
        with Kafka's message), each value as it will be stored."""
        for name in configs:
            if name in NOT_KEPT:
                raise InvalidConfigError(
                    f"{name}: a Kafka group config seglog does not apply (it keeps "
                    f"{', '.join(BY_NAME)})"
                )
            if name not in BY_NAME:
                raise InvalidConfigError(f"Unknown group config name: {name}")
        merged = {**self.defaults, **configs}
        for c in CONFIGS:
            _check_value(c, merged[c.name], self.dlq_topic_prefix)
        for c in CONFIGS:
            if c.name not in self.bounds:
                continue
            low, high = self.bounds[c.name]
            short = c.name
            if int(merged[c.name]) < low:
                raise InvalidConfigError(
                    f"{short} must be greater than or equal to {c.bound_prefix % 'min'}"
                )
            if int(merged[c.name]) > high:
                raise InvalidConfigError(
                    f"{short} must be less than or equal to {c.bound_prefix % 'max'}"
                )
        for session, heartbeat in _SESSIONS:
            if int(merged[session]) <= int(merged[heartbeat]):
                raise InvalidConfigError(f"{session} must be greater than {heartbeat}")
        out = {}
        for name, value in configs.items():
            if BY_NAME[name].kind == "int":
                value = str(int(value.strip()))
            elif BY_NAME[name].kind == "boolean":
                value = value.strip().lower()
            elif name == SHARE_AUTO_OFFSET_RESET:
                value = value.strip()
                value = value.lower() if value.lower() in (EARLIEST, LATEST) else value
            out[name] = value
        return out


def _check_group(group_id: str) -> None:
    if not group_id:
        raise InvalidRequestError("Group name must not be empty")
