"""Kafka's replication throttles, as kafka-reassign-partitions sets them, applied to seglog's
moves: broker configs `leader.replication.throttled.rate` and
`follower.replication.throttled.rate` (bytes/s, on the broker ids of a move: storage node ids
here, kafka/brokers.py; kept by broker_configs.py) and topic configs
`leader.replication.throttled.replicas` and `follower.replication.throttled.replicas`
(`partition:broker,...` or `*`; kept as topic configs), all set through
IncrementalAlterConfigs and deleted again by `--verify` once the moves are done.

How they apply: seglog throttles a move per partition (the registry's `throttle_bytes_per_s`:
each adding replica's catch-up fetches are held to it, reassignments.py), where Kafka's rate is
a broker's whole replication traffic shared by its throttled replicas. So when a Kafka
AlterPartitionReassignments starts a move, the partition's throttle is the lowest rate set on
a broker it throttles: the follower rate of each adding replica listed in the topic's
follower.replication.throttled.replicas, and the leader rate of its leader when the leader is
listed in leader.replication.throttled.replicas (`*` lists every replica). k partitions moving
onto one node at once may so receive up to k times the rate; a rate changed while a move runs
applies to the next move, not that one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from seglog.errors import InvalidConfigError

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
EVERY_REPLICA = "*"
# A list longer than this is refused unread: Kafka's would be one entry per replica moved;
# 100,000 replicas is beyond any cluster here, and bounds what a request can make us hold.
MAX_LIST_CHARS = 1 << 20


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
        self,
        topic_configs: Callable[[str], Mapping[str, str]],
        broker_config: Callable[[int, str], str | None],
    ) -> None:
        """`topic_configs`: a topic's configs by Kafka's names ({} when it does not exist);
        `broker_config`: a broker's dynamic config in force (None when unset)."""
        self.topic_configs = topic_configs
        self.broker_config = broker_config

    def rate_for(self, topic: str, partition: int, leader: int, adding: Iterable[int]) -> int:
        """The bytes/s a move of `topic`-`partition` adding `adding` is held to (the module
        says how it is chosen); 0: unthrottled."""
        configs = self.topic_configs(topic)
        rates = []
        if configs.get(LEADER_REPLICAS):
            listed = parse_replicas(LEADER_REPLICAS, configs[LEADER_REPLICAS])
            rate = self.broker_config(leader, LEADER_RATE)
            if rate is not None and _listed(listed, partition, leader):
                rates.append(int(rate))
        if configs.get(FOLLOWER_REPLICAS):
            listed = parse_replicas(FOLLOWER_REPLICAS, configs[FOLLOWER_REPLICAS])
            for node in adding:
                rate = self.broker_config(node, FOLLOWER_RATE)
                if rate is not None and _listed(listed, partition, node):
                    rates.append(int(rate))
        # A rate of 0 is Kafka's "nothing moves"; seglog's 0 means unthrottled, so the
        # slowest it can hold a catch-up to, 1 byte/s, stands for it.
        return max(1, min(rates)) if rates else 0
