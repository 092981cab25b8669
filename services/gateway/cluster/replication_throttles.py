"""Kafka's replication throttles, as kafka-reassign-partitions sets them: broker configs
`leader.replication.throttled.rate` and `follower.replication.throttled.rate` (bytes/s, on the
broker ids of a move: storage node ids here, kafka/brokers.py) and topic configs
`leader.replication.throttled.replicas` and `follower.replication.throttled.replicas`
(`partition:broker,...` or `*`), all through IncrementalAlterConfigs, and deleted again by
`--verify` once the moves are done.

How they apply: seglog throttles a move per partition (the registry's `throttle_bytes_per_s`:
each adding replica's catch-up fetches are held to it, reassignments.py), where Kafka's rate is
a broker's whole replication traffic shared by its throttled replicas. So when a Kafka
AlterPartitionReassignments starts a move, the partition's throttle is the lowest rate set on
a broker it throttles: the follower rate of each adding replica listed in the topic's
follower.replication.throttled.replicas, and the leader rate of its leader when the leader is
listed in leader.replication.throttled.replicas (`*` lists every replica). k partitions moving
onto one node at once may so receive up to k times the rate; a rate changed while a move runs
applies to the next move, not that one.

Where they live: the topic lists are topic configs like any other (the registry's, durable;
the admin validates them). The broker rates are kept in this gateway's memory, not the
metadata log: they exist for the length of a move (the tool sets them just before it and
clears them with --verify), a gateway restart forgets them (a move running then keeps the
throttle it started with, which the registry holds), and with several gateways each knows the
rates it was sent: the tool sends a broker's configs to that broker's gateway and the move to
the controller's, the same gateway when it runs alone.
`replica.alter.log.dirs.io.max.bytes.per.second` is accepted and kept (a node has one log
dir: nothing moves between dirs).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from seglog.errors import InvalidConfigError, InvalidRequestError
from seglog.security.acls import CLUSTER_NAME

from ..authorization import Authorization
from ..broker.caller import Caller

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LOG_DIRS_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
BROKER_CONFIGS = frozenset({LEADER_RATE, FOLLOWER_RATE, LOG_DIRS_RATE})
EVERY_REPLICA = "*"
# A list longer than this is refused unread: Kafka's would be one entry per replica moved;
# 100,000 replicas is beyond any cluster here, and bounds what a request can make us hold.
MAX_LIST_CHARS = 1 << 20
MAX_RATE = (1 << 63) - 1  # Kafka's LONG


@dataclass(frozen=True)
class ConfigChange:
    """One config of a resource set to `value`, or deleted (value None)."""

    name: str
    value: str | None


def _rate(name: str, value: str) -> int:
    try:
        rate = int(value.strip())
    except ValueError:
        raise InvalidConfigError(f"{name}={value!r}: not a whole number of bytes/s") from None
    if not 0 <= rate <= MAX_RATE:
        raise InvalidConfigError(f"{name}={value!r}: must be 0 to {MAX_RATE} bytes/s")
    return rate


def parse_replicas(name: str, value: str) -> frozenset[tuple[int, int]] | None:
    """`partition:broker,...` as Kafka's ThrottledReplicaListValidator takes it (an empty
    string: none); None for `*` (every replica)."""
    if len(value) > MAX_LIST_CHARS:
        raise InvalidConfigError(f"{name}: longer than {MAX_LIST_CHARS} characters")
    text = value.strip()
    if text == EVERY_REPLICA:
        return None
    pairs = set()
    for entry in filter(None, (e.strip() for e in text.split(","))):
        partition, sep, broker = entry.partition(":")
        if not (sep and partition.strip().isdigit() and broker.strip().isdigit()):
            raise InvalidConfigError(
                f"{name}={value!r}: must be '*' or a list of partition:broker (as 0:1,1:2)"
            )
        pairs.add((int(partition), int(broker)))
    return frozenset(pairs)


def _listed(replicas: frozenset[tuple[int, int]] | None, partition: int, node: int) -> bool:
    return replicas is None or (partition, node) in replicas


class ReplicationThrottles:
    def __init__(
        self, authorization: Authorization, topic_configs: Callable[[str], Mapping[str, str]]
    ) -> None:
        """`topic_configs`: a topic's configs by Kafka's names ({} when it does not exist)."""
        self.authorization = authorization
        self.topic_configs = topic_configs
        self._lock = threading.Lock()
        self._brokers: dict[int, dict[str, str]] = {}

    def check_broker(self, caller: Caller, changes: Sequence[ConfigChange]) -> None:
        """Kafka's check of a broker resource's changes: AlterConfigs on the cluster, each
        config a throttle one, each value valid. Changes nothing."""
        self.authorization.check(
            caller, [("AlterConfigs", "cluster", CLUSTER_NAME)], "IncrementalAlterConfigs"
        )
        for change in changes:
            if change.name not in BROKER_CONFIGS:
                raise InvalidRequestError(
                    f"{change.name}: seglog's broker settings are static; of a broker's "
                    f"configs only {', '.join(sorted(BROKER_CONFIGS))} can be altered"
                )
            if change.value is not None:
                _rate(change.name, change.value)

    def alter_broker(self, caller: Caller, node_id: int, changes: Sequence[ConfigChange]) -> None:
        self.check_broker(caller, changes)
        with self._lock:
            configs = self._brokers.setdefault(node_id, {})
            _apply(configs, changes)
            if not configs:
                del self._brokers[node_id]

    def broker_configs(self, node_id: int) -> dict[str, str]:
        with self._lock:
            return dict(self._brokers.get(node_id, {}))

    def rate_for(self, topic: str, partition: int, leader: int, adding: Iterable[int]) -> int:
        """The bytes/s a move of `topic`-`partition` adding `adding` is held to (the module
        says how it is chosen); 0: unthrottled."""
        configs = self.topic_configs(topic)
        with self._lock:
            rates = []
            if configs.get(LEADER_REPLICAS):
                listed = parse_replicas(LEADER_REPLICAS, configs[LEADER_REPLICAS])
                rate = self._brokers.get(leader, {}).get(LEADER_RATE)
                if rate is not None and _listed(listed, partition, leader):
                    rates.append(int(rate))
            if configs.get(FOLLOWER_REPLICAS):
                listed = parse_replicas(FOLLOWER_REPLICAS, configs[FOLLOWER_REPLICAS])
                for node in adding:
                    rate = self._brokers.get(node, {}).get(FOLLOWER_RATE)
                    if rate is not None and _listed(listed, partition, node):
                        rates.append(int(rate))
        # A rate of 0 is Kafka's "nothing moves"; seglog's 0 means unthrottled, so the
        # slowest it can hold a catch-up to, 1 byte/s, stands for it.
        return max(1, min(rates)) if rates else 0


def _apply(configs: dict[str, str], changes: Sequence[ConfigChange]) -> None:
    for change in changes:
        if change.value is None:
            configs.pop(change.name, None)
        else:
            configs[change.name] = change.value.strip()
