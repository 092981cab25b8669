"""Kafka's replication throttles as seglog applies them to a move (replication_throttles.py):
Kafka's replica-list syntax, and which rate a move gets from the brokers' rates and the
topic's lists."""

from __future__ import annotations

import pytest

from seglog.errors import InvalidConfigError
from services.gateway.cluster.replication_throttles import (
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
    ReplicationThrottles,
    parse_replicas,
)


def test_replica_lists_are_read_as_kafkas_validator_reads_them():
    assert parse_replicas(FOLLOWER_REPLICAS, "0:1, 1:2 ,2:3") == {(0, 1), (1, 2), (2, 3)}
    assert parse_replicas(FOLLOWER_REPLICAS, "") == frozenset()
    assert parse_replicas(FOLLOWER_REPLICAS, " * ") is None  # every replica
    for bad in ("0", "0:", ":1", "a:1", "0:1;1:2", "*,0:1", "-1:2"):
        with pytest.raises(InvalidConfigError, match="partition:broker"):
            parse_replicas(FOLLOWER_REPLICAS, bad)
    with pytest.raises(InvalidConfigError, match="longer than"):
        parse_replicas(FOLLOWER_REPLICAS, "0:1," * (1 << 19))


def test_a_move_gets_the_lowest_rate_of_the_brokers_it_throttles():
    topics: dict[str, dict[str, str]] = {"moving": {}, "resting": {}}
    brokers = {1: {LEADER_RATE: "5000"}, 2: {FOLLOWER_RATE: "3000"}, 3: {FOLLOWER_RATE: "7000"}}
    t = ReplicationThrottles(
        lambda name: topics.get(name, {}), lambda node, name: brokers.get(node, {}).get(name)
    )
    # Nothing listed on the topic: nothing throttled, whatever the brokers' rates.
    assert t.rate_for("moving", 0, leader=1, adding=[2]) == 0
    topics["moving"][LEADER_REPLICAS] = "0:1"
    assert t.rate_for("moving", 0, leader=1, adding=[2]) == 5000  # the leader's side only
    assert t.rate_for("moving", 1, leader=1, adding=[2]) == 0  # partition 1 not listed
    topics["moving"][FOLLOWER_REPLICAS] = "0:2,0:3"
    assert t.rate_for("moving", 0, leader=1, adding=[2, 3]) == 3000  # the lowest of three
    assert t.rate_for("moving", 0, leader=2, adding=[3]) == 7000  # 2 has no leader rate
    topics["resting"][FOLLOWER_REPLICAS] = "*"
    assert t.rate_for("resting", 9, leader=1, adding=[3]) == 7000
    # Kafka's 0 is "nothing moves"; seglog's 0 is "unthrottled": the slowest it can, 1 B/s.
    brokers[3][FOLLOWER_RATE] = "0"
    assert t.rate_for("resting", 9, leader=1, adding=[3]) == 1
    # An empty list (what a topic config DELETE leaves) throttles nothing; nor does a topic
    # that is gone.
    topics["resting"][FOLLOWER_REPLICAS] = ""
    assert t.rate_for("resting", 9, leader=1, adding=[3]) == 0
    assert t.rate_for("absent", 0, leader=1, adding=[3]) == 0
