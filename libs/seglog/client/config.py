"""Client configs: Kafka's producer and consumer settings, with Kafka's names in snake_case
and Kafka's defaults. Built from keyword arguments; an unknown key or an inconsistent value
raises InvalidConfigError naming the setting, before any connection is opened.

Dotted names are accepted too (`linger.ms` for `linger_ms`), so configs copied from a Kafka
client's properties work unchanged, and so are the names kafka-python and confluent-kafka
(librdkafka) use for the same settings (`ALIASES`). kafka-python's serializers and
deserializers (`key_serializer`, `value_deserializer`, ...) are callables applied to keys and
values, and its `consumer_timeout_ms` ends iteration over a consumer that long after the last
record. The gateway's address may be given as `bootstrap_servers` / `bootstrap.servers`.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from ..errors import InvalidConfigError
from ..records.compression import CompressionType
from ..rpc.client_id import check_client_id
from ..security.tls import ClientSecurity

INT_MAX = (1 << 31) - 1

COMPRESSION_TYPES = {c.name.lower(): c for c in CompressionType}
ASSIGNMENT_STRATEGIES = ("range", "roundrobin")
AUTO_OFFSET_RESETS = ("earliest", "latest", "none")
FETCH_TRANSPORTS = ("auto", "bulk", "grpc")
GROUP_PROTOCOLS = ("classic", "consumer")
# Kafka's isolation levels, as FetchRequest.isolation_level numbers them.
ISOLATION_LEVELS = {"read_uncommitted": 0, "read_committed": 1}
PRODUCE_TRANSPORTS = ("auto", "grpc")


@dataclass(frozen=True, kw_only=True)
class ProducerConfig:
    client_id: str = "seglog-producer"
    acks: int = -1  # "all", Kafka's default since 3.0
    linger_ms: int = 5
    batch_size: int = 16384
    buffer_memory: int = 32 * 1024 * 1024
    max_block_ms: int = 60_000
    compression_type: str = "none"
    retries: int = INT_MAX
    retry_backoff_ms: int = 100
    # Kafka's (KIP-580): retries after repeated failures wait twice as long each time, up to this.
    retry_backoff_max_ms: int = 1000
    delivery_timeout_ms: int = 120_000
    request_timeout_ms: int = 30_000
    max_in_flight_requests_per_connection: int = 5
    max_request_size: int = 1024 * 1024
    metadata_max_age_ms: int = 300_000
    # None: Kafka's default (on, unless acks, retries or in-flight settings rule it out,
    # KIP-679); True with such settings fails at construction.
    enable_idempotence: bool | None = None
    key_serializer: Callable[[Any], bytes | None] | None = None
    value_serializer: Callable[[Any], bytes | None] | None = None
    # seglog's own: "auto" sends each request straight to its leader's bulk listener under
    # a produce grant from the gateway, as a Kafka producer talks to its leaders, and through
    # the gateway's Produce what has no grant (produce_transport.py); "grpc": all through
    # the gateway.
    produce_transport: str = "auto"
    # TLS, kafka-python's names: "SSL" or "PLAINTEXT" ("" : SSL when SEGLOG_TLS_CA /
    # SEGLOG_TLS_CERT / SEGLOG_TLS_KEY are set); the CA and the client's own certificate.
    security_protocol: str = ""
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    bearer_token: str | None = None  # OAUTHBEARER's role; or SEGLOG_BEARER_TOKEN
    # Kafka's transactional.id (transactions: init_transactions, begin_transaction, ...; needs
    # idempotence) and transaction.timeout.ms (the coordinator aborts a transaction open
    # longer; at most the gateway's transaction.max.timeout.ms).
    transactional_id: str | None = None
    transaction_timeout_ms: int = 60_000

    def __post_init__(self) -> None:
        _check_callables(self, "key_serializer", "value_serializer")
        _check_client_id(self)
        acks: object = self.acks
        if acks == "all":
            object.__setattr__(self, "acks", -1)
        if self.acks not in (0, 1, -1, "0", "1", "-1"):
            raise InvalidConfigError(f"acks must be 0, 1, -1 or all, got {self.acks!r}")
        object.__setattr__(self, "acks", int(self.acks))
        idempotence: object = self.enable_idempotence
        if isinstance(idempotence, str):
            if idempotence.lower() not in ("true", "false"):
                raise InvalidConfigError(
                    f"enable_idempotence must be true or false, got {idempotence!r}"
                )
            idempotence = idempotence.lower() == "true"
        _check_ints(self)
        _at_least(self, "linger_ms", 0)
        _at_least(self, "batch_size", 0)
        _at_least(self, "buffer_memory", 1)
        _at_least(self, "max_block_ms", 0)
        _at_least(self, "retries", 0)
        _at_least(self, "retry_backoff_ms", 0)
        _at_least(self, "retry_backoff_max_ms", 0)
        _at_least(self, "request_timeout_ms", 1)
        _at_least(self, "delivery_timeout_ms", 1)
        _at_least(self, "max_in_flight_requests_per_connection", 1)
        _at_least(self, "max_request_size", 1)
        _at_least(self, "metadata_max_age_ms", 0)
        if self.produce_transport not in PRODUCE_TRANSPORTS:
            raise InvalidConfigError(
                f"produce_transport must be one of {list(PRODUCE_TRANSPORTS)}, "
                f"got {self.produce_transport!r}"
            )
        if self.compression_type not in COMPRESSION_TYPES:
            raise InvalidConfigError(
                f"compression_type must be one of {sorted(COMPRESSION_TYPES)}, "
                f"got {self.compression_type!r}"
            )
        conflicts = [
            reason
            for reason, bad in (
                (f"acks={self.acks} (needs all)", self.acks != -1),
                ("retries=0", self.retries == 0),
                (
                    f"max_in_flight_requests_per_connection="
                    f"{self.max_in_flight_requests_per_connection} (at most 5)",
                    self.max_in_flight_requests_per_connection > 5,
                ),
            )
            if bad
        ]
        if idempotence is True and conflicts:
            raise InvalidConfigError(
                f"enable_idempotence=true conflicts with {', '.join(conflicts)}"
            )
        if self.transactional_id is not None:
            # Kafka's producer: a transactional id needs idempotence (its default then).
            if idempotence is False or conflicts:
                raise InvalidConfigError(
                    "transactional_id needs idempotence: "
                    + (", ".join(conflicts) if conflicts else "enable_idempotence=false")
                )
            if not isinstance(self.transactional_id, str) or not self.transactional_id:
                raise InvalidConfigError("transactional_id must be a non-empty string")
            _at_least(self, "transaction_timeout_ms", 1)
        object.__setattr__(
            self,
            "enable_idempotence",
            bool(idempotence) if idempotence is not None else not conflicts,
        )
        # Kafka's own check: a batch must get at least one full request attempt after lingering.
        if self.delivery_timeout_ms < self.linger_ms + self.request_timeout_ms:
            raise InvalidConfigError(
                f"delivery_timeout_ms ({self.delivery_timeout_ms}) must be at least "
                f"linger_ms + request_timeout_ms ({self.linger_ms + self.request_timeout_ms})"
            )
        if self.batch_size > self.buffer_memory:
            raise InvalidConfigError(
                f"batch_size ({self.batch_size}) cannot exceed buffer_memory ({self.buffer_memory})"
            )

    @property
    def compression(self) -> CompressionType:
        return COMPRESSION_TYPES[self.compression_type]


@dataclass(frozen=True, kw_only=True)
class ConsumerConfig:
    client_id: str = "seglog-consumer"
    group_id: str | None = None
    fetch_min_bytes: int = 1
    fetch_max_wait_ms: int = 500
    fetch_max_bytes: int = 50 * 1024 * 1024
    max_partition_fetch_bytes: int = 1024 * 1024
    max_poll_records: int = 500
    auto_offset_reset: str = "latest"
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5000
    check_crcs: bool = True
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 3000
    max_poll_interval_ms: int = 300_000
    partition_assignment_strategy: tuple[str, ...] = ("range", "roundrobin")
    # Kafka's group.protocol: "classic" (seglog-managed groups: JoinGroup waits for the
    # rebalance, the coordinator assigns) or "consumer" (KIP-848: heartbeats carry the
    # assignment, partitions move one at a time without stopping the group; the group's
    # session is the gateway's group.consumer.session.timeout.ms).
    group_protocol: str = "classic"
    request_timeout_ms: int = 30_000
    retry_backoff_ms: int = 100
    # Kafka's (KIP-580): retries after repeated failures wait twice as long each time, up to this.
    retry_backoff_max_ms: int = 1000
    metadata_max_age_ms: int = 300_000
    key_deserializer: Callable[[bytes | None], Any] | None = None
    value_deserializer: Callable[[bytes | None], Any] | None = None
    # kafka-python's: iterating the consumer ends this long after the last record (-1: never).
    consumer_timeout_ms: int = -1
    # seglog's own: "auto" reads from the leaders' bulk listeners (sendfile, no copy on the
    # node) when the cluster has them and falls back to the gateway's gRPC Fetch; "bulk" and
    # "grpc" force one (bulk: a partition without a grant waits and retries).
    fetch_transport: str = "auto"
    # Kafka's isolation.level: "read_committed" reads only committed transactions' records
    # (up to the last stable offset, aborted ones skipped); "read_uncommitted" reads every
    # record. Control records (transaction markers) are never returned in either.
    isolation_level: str = "read_uncommitted"
    # TLS, kafka-python's names: "SSL" or "PLAINTEXT" ("" : SSL when SEGLOG_TLS_CA /
    # SEGLOG_TLS_CERT / SEGLOG_TLS_KEY are set); the CA and the client's own certificate.
    security_protocol: str = ""
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    bearer_token: str | None = None  # OAUTHBEARER's role; or SEGLOG_BEARER_TOKEN

    def __post_init__(self) -> None:
        _check_ints(self)
        _check_callables(self, "key_deserializer", "value_deserializer")
        _check_client_id(self)
        if self.fetch_transport not in FETCH_TRANSPORTS:
            raise InvalidConfigError(
                f"fetch_transport must be one of {list(FETCH_TRANSPORTS)}, "
                f"got {self.fetch_transport!r}"
            )
        _at_least(self, "fetch_min_bytes", 1)
        _at_least(self, "fetch_max_wait_ms", 0)
        _at_least(self, "fetch_max_bytes", 1)
        _at_least(self, "max_partition_fetch_bytes", 1)
        _at_least(self, "max_poll_records", 1)
        _at_least(self, "auto_commit_interval_ms", 0)
        _at_least(self, "session_timeout_ms", 1)
        _at_least(self, "heartbeat_interval_ms", 1)
        _at_least(self, "max_poll_interval_ms", 1)
        _at_least(self, "request_timeout_ms", 1)
        _at_least(self, "retry_backoff_ms", 0)
        _at_least(self, "retry_backoff_max_ms", 0)
        _at_least(self, "metadata_max_age_ms", 0)
        if self.isolation_level not in ISOLATION_LEVELS:
            raise InvalidConfigError(
                f"isolation_level must be one of {list(ISOLATION_LEVELS)}, "
                f"got {self.isolation_level!r}"
            )
        if self.group_protocol not in GROUP_PROTOCOLS:
            raise InvalidConfigError(
                f"group_protocol must be one of {list(GROUP_PROTOCOLS)}, "
                f"got {self.group_protocol!r}"
            )
        if self.auto_offset_reset not in AUTO_OFFSET_RESETS:
            raise InvalidConfigError(
                f"auto_offset_reset must be one of {list(AUTO_OFFSET_RESETS)}, "
                f"got {self.auto_offset_reset!r}"
            )
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise InvalidConfigError(
                f"heartbeat_interval_ms ({self.heartbeat_interval_ms}) must be lower than "
                f"session_timeout_ms ({self.session_timeout_ms})"
            )
        strategies = self.partition_assignment_strategy
        if isinstance(strategies, str):
            strategies = tuple(s.strip() for s in strategies.split(","))
            object.__setattr__(self, "partition_assignment_strategy", strategies)
        if not strategies or any(s not in ASSIGNMENT_STRATEGIES for s in strategies):
            raise InvalidConfigError(
                f"partition_assignment_strategy must list some of {list(ASSIGNMENT_STRATEGIES)}, "
                f"got {strategies!r}"
            )
        if self.group_id == "":
            raise InvalidConfigError("group_id must not be empty; leave it unset for no group")
        if self.group_id is None and self.enable_auto_commit and self._explicit_auto_commit:
            raise InvalidConfigError("enable_auto_commit needs a group_id")

    # Set by from_kwargs: whether the caller asked for auto commit explicitly. Kafka's
    # consumer turns the default off without a group but refuses an explicit request.
    _explicit_auto_commit: bool = dataclasses.field(default=False, repr=False)

    @property
    def auto_commit(self) -> bool:
        return self.enable_auto_commit and self.group_id is not None


C = TypeVar("C", ProducerConfig, ConsumerConfig)

# Other clients' names for the same settings (after dots become underscores).
ALIASES = {
    # librdkafka (confluent-kafka)
    "queue_buffering_max_ms": "linger_ms",
    "compression_codec": "compression_type",
    "message_timeout_ms": "delivery_timeout_ms",
    "max_in_flight": "max_in_flight_requests_per_connection",
    "topic_metadata_refresh_interval_ms": "metadata_max_age_ms",
    # kafka-python
    "max_in_flight_requests": "max_in_flight_requests_per_connection",
}


def from_kwargs(cls: type[C], config: Mapping[str, Any]) -> C:
    """Build `cls` from user keyword arguments, rejecting unknown names with a suggestion."""
    fields = {f.name for f in dataclasses.fields(cls) if not f.name.startswith("_")}
    values: dict[str, Any] = {}
    for raw_name, value in config.items():
        name = raw_name.replace(".", "_").replace("-", "_")
        name = ALIASES.get(name, name)
        if name not in fields:
            close = difflib.get_close_matches(name, fields, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise InvalidConfigError(f"unknown {cls.__name__} setting {raw_name!r}{hint}")
        if name in values:
            raise InvalidConfigError(f"setting {raw_name!r} given twice")
        values[name] = value
    if cls is ConsumerConfig and "enable_auto_commit" in values:
        values["_explicit_auto_commit"] = bool(values["enable_auto_commit"])
    return cls(**values)


def _check_ints(config: object) -> None:
    for field in dataclasses.fields(config):  # type: ignore[arg-type]
        value = getattr(config, field.name)
        if field.type in ("int", int) and (isinstance(value, bool) or not isinstance(value, int)):
            if isinstance(value, str) and value.lstrip("-").isdigit():
                object.__setattr__(config, field.name, int(value))
                continue
            raise InvalidConfigError(f"{field.name} must be an integer, got {value!r}")
        if field.type in ("bool", bool) and not isinstance(value, bool):
            if isinstance(value, str) and value.lower() in ("true", "false"):
                object.__setattr__(config, field.name, value.lower() == "true")
                continue
            raise InvalidConfigError(f"{field.name} must be true or false, got {value!r}")


def _check_client_id(config: ProducerConfig | ConsumerConfig) -> None:
    try:
        check_client_id(config.client_id)
    except ValueError as exc:
        raise InvalidConfigError(str(exc)) from None


def _check_callables(config: object, *names: str) -> None:
    for name in names:
        value = getattr(config, name)
        if value is not None and not callable(value):
            raise InvalidConfigError(f"{name} must be a callable, got {value!r}")


def pop_bootstrap(bootstrap: str | None, config: dict[str, Any]) -> str | None:
    """The gateway's address from the positional argument or kafka-python's and
    confluent-kafka's names for it, given once."""
    given = [config.pop(k) for k in ("bootstrap_servers", "bootstrap.servers") if k in config]
    if bootstrap is not None:
        given.insert(0, bootstrap)
    if len(given) > 1:
        raise InvalidConfigError("the gateway's address is given twice (bootstrap_servers)")
    if not given:
        return None
    value = given[0]
    if isinstance(value, list | tuple):
        if len(value) != 1:
            raise InvalidConfigError(
                f"bootstrap_servers: one gateway address is needed, got {list(value)}"
            )
        value = value[0]
    return str(value)


def _at_least(config: object, name: str, minimum: int) -> None:
    value = getattr(config, name)
    if value < minimum:
        raise InvalidConfigError(f"{name} must be at least {minimum}, got {value}")


def client_security(config: ProducerConfig | ConsumerConfig) -> ClientSecurity | None:
    try:
        return ClientSecurity.resolve(
            config.security_protocol,
            config.ssl_cafile,
            config.ssl_certfile,
            config.ssl_keyfile,
            config.bearer_token,
        )
    except ValueError as exc:
        raise InvalidConfigError(str(exc)) from None
