"""Dynamic broker configs in the broker core: Kafka's `kafka-configs --entity-type brokers
--alter` (IncrementalAlterConfigs / AlterConfigs on a BROKER resource) and what
DescribeConfigs shows as DYNAMIC_BROKER_CONFIG / DYNAMIC_DEFAULT_BROKER_CONFIG, kept in the
registry (broker_config records: file and etcd stores alike), per broker id or for the
cluster's default (broker "").

Kept: the replication throttles Kafka's reassignment tool sets on brokers (bytes/s, a long at
least 0, as Kafka validates them), read where a throttle is applied through `value`, a
broker's own value first, then the cluster's default (Kafka's precedence). Any other broker
config is INVALID_CONFIG: seglog's gateway settings are static (--config / flags), and a
stored value nothing reads would mislead.

Who may: DescribeConfigs on the cluster to read, AlterConfigs on the cluster to change, as
Kafka's broker asks for a BROKER resource.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from seglog.errors import InvalidConfigError, InvalidRequestError

if TYPE_CHECKING:
    from ..authorization import Authorization
    from ..broker.caller import Caller
    from .registry import Registry

DEFAULT_BROKER = ""
LEADER_THROTTLE_RATE = "leader.replication.throttled.rate"
FOLLOWER_THROTTLE_RATE = "follower.replication.throttled.rate"
ALTER_LOG_DIRS_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
DYNAMIC_CONFIGS = (FOLLOWER_THROTTLE_RATE, LEADER_THROTTLE_RATE, ALTER_LOG_DIRS_RATE)
_LONG_MAX = 2**63 - 1
CLUSTER = ("cluster", "kafka-cluster")

Source = Literal["dynamic_broker", "dynamic_default_broker"]


@dataclass(frozen=True)
class BrokerConfig:
    name: str
    value: str
    source: Source  # the broker's own, or the cluster's default


def check_broker(broker: str) -> str:
    """A broker resource's name: a broker id, or "" for the cluster's default."""
    if broker != DEFAULT_BROKER and not (broker.isascii() and broker.isdigit()):
        raise InvalidRequestError(f"broker {broker!r}: a broker id, or '' for the default")
    return broker


def checked_value(name: str, value: str) -> str:
    if name not in DYNAMIC_CONFIGS:
        raise InvalidConfigError(
            f"{name!r} is not a dynamic broker config seglog keeps (it keeps "
            f"{', '.join(DYNAMIC_CONFIGS)}; the gateway's other settings are static)"
        )
    try:
        number = int(value.strip())
    except ValueError:
        raise InvalidConfigError(f"{name}={value!r}: a whole number of bytes/s") from None
    if not 0 <= number <= _LONG_MAX:
        raise InvalidConfigError(f"{name}={value}: must be at least 0")
    return str(number)


class BrokerConfigs:
    def __init__(self, registry: Registry, authorization: Authorization) -> None:
        self.registry = registry
        self.authorization = authorization

    def describe(self, caller: Caller, broker: str) -> list[BrokerConfig]:
        """The dynamic configs in force on a broker, one per name, by name: its own where it
        has one, else the cluster's default (the default's alone for broker "")."""
        self.authorization.check(caller, [("DescribeConfigs", *CLUSTER)], "DescribeConfigs")
        configs = self.registry.broker_configs
        own = configs.get(check_broker(broker), {}) if broker != DEFAULT_BROKER else {}
        described = {
            n: BrokerConfig(n, v, "dynamic_default_broker")
            for n, v in configs.get(DEFAULT_BROKER, {}).items()
        }
        described.update({n: BrokerConfig(n, v, "dynamic_broker") for n, v in own.items()})
        return [described[name] for name in sorted(described)]

    def alter(
        self,
        caller: Caller,
        broker: str,
        set_configs: Mapping[str, str],
        delete: Iterable[str] = (),
        *,
        replace: bool = False,
        validate_only: bool = False,
    ) -> None:
        """Set and delete a broker's (or the default's) dynamic configs, all checked before
        any is stored; `replace`: the given set becomes the whole set (AlterConfigs)."""
        self.authorization.check(caller, [("AlterConfigs", *CLUSTER)], "AlterConfigs")
        check_broker(broker)
        current = {} if replace else dict(self.registry.broker_configs.get(broker, {}))
        for name in delete:
            if name not in DYNAMIC_CONFIGS:
                checked_value(name, "0")  # names the configs kept
            current.pop(name, None)
        current.update({name: checked_value(name, value) for name, value in set_configs.items()})
        if not validate_only:
            self.registry.alter_broker_configs(broker, current)

    def value(self, broker: str, name: str) -> str | None:
        """The config in force on a broker: its own, else the cluster's default, else None
        (for the data plane: no caller, no lock)."""
        configs = self.registry.broker_configs
        own = configs.get(broker, {}).get(name)
        return own if own is not None else configs.get(DEFAULT_BROKER, {}).get(name)
