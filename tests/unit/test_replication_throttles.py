"""Kafka's replication throttles as the gateway applies them (replication_throttles.py): Kafka's
replica-list syntax, which rate a move gets from the brokers' rates and the topic's lists, and
checks that refuse bad input whole (changing nothing) and refuse a principal without
AlterConfigs on the cluster."""

from __future__ import annotations

import pytest

from seglog.errors import (
    InvalidConfigError,
    InvalidRequestError,
    PermissionDeniedError,
)
from seglog.security.acls import AclBinding
from services.gateway.authorization import Authorization
from services.gateway.broker.caller import Caller
from services.gateway.cluster.replication_throttles import (
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
    ConfigChange,
    ReplicationThrottles,
    parse_replicas,
)

ADMIN = Caller("User:admin", "127.0.0.1")


def throttles(
    authorization: Authorization | None = None,
) -> tuple[ReplicationThrottles, dict[str, dict[str, str]]]:
    """The throttles and the topics' configs they read (as the registry holds them)."""
    topics: dict[str, dict[str, str]] = {"moving": {}, "resting": {}}
    authorization = authorization or Authorization([], enabled=False)
    return ReplicationThrottles(authorization, lambda name: topics.get(name, {})), topics


def test_replica_lists_are_read_as_kafkas_validator_reads_them():
    assert parse_replicas(FOLLOWER_REPLICAS, "0:1, 1:2 ,2:3") == {(0, 1), (1, 2), (2, 3)}
    assert parse_replicas(FOLLOWER_REPLICAS, "") == frozenset()
    assert parse_replicas(FOLLOWER_REPLICAS, " * ") is None  # every replica
    for bad in ("0", "0:", ":1", "a:1", "0:1;1:2", "*,0:1", "-1:2"):
        with pytest.raises(InvalidConfigError, match="partition:broker"):
            parse_replicas(FOLLOWER_REPLICAS, bad)


def test_a_move_gets_the_lowest_rate_of_the_brokers_it_throttles():
    t, topics = throttles()
    t.alter_broker(ADMIN, 1, [ConfigChange(LEADER_RATE, "5000")])
    t.alter_broker(ADMIN, 2, [ConfigChange(FOLLOWER_RATE, "3000")])
    t.alter_broker(ADMIN, 3, [ConfigChange(FOLLOWER_RATE, "7000")])
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
    t.alter_broker(ADMIN, 3, [ConfigChange(FOLLOWER_RATE, "0")])
    assert t.rate_for("resting", 9, leader=1, adding=[3]) == 1
    # DELETE clears; an empty list (what a topic config DELETE leaves) throttles nothing.
    t.alter_broker(ADMIN, 2, [ConfigChange(FOLLOWER_RATE, None)])
    assert t.broker_configs(2) == {}
    topics["resting"][FOLLOWER_REPLICAS] = ""
    assert t.rate_for("resting", 9, leader=1, adding=[3]) == 0
    assert t.rate_for("absent", 0, leader=1, adding=[3]) == 0


def test_bad_changes_are_refused_whole_and_change_nothing():
    t, _ = throttles()
    t.alter_broker(ADMIN, 1, [ConfigChange(FOLLOWER_RATE, "100")])
    for changes, error in (
        ([ConfigChange(FOLLOWER_RATE, "200"), ConfigChange(LEADER_RATE, "-1")], InvalidConfigError),
        (
            [ConfigChange(FOLLOWER_RATE, "200"), ConfigChange(LEADER_RATE, "1e3")],
            InvalidConfigError,
        ),
        (
            [ConfigChange(FOLLOWER_RATE, "200"), ConfigChange("num.io.threads", "4")],
            InvalidRequestError,
        ),
    ):
        with pytest.raises(error):
            t.alter_broker(ADMIN, 1, changes)
        assert t.broker_configs(1) == {FOLLOWER_RATE: "100"}


def test_a_principal_needs_alter_configs_on_the_cluster():
    grants = [
        AclBinding("User:ops", "*", "cluster", "literal", "kafka-cluster", "AlterConfigs", "allow")
    ]
    t, _ = throttles(Authorization(grants, enabled=True))
    with pytest.raises(PermissionDeniedError):
        t.alter_broker(Caller("User:dev", "127.0.0.1"), 1, [ConfigChange(FOLLOWER_RATE, "100")])
    assert t.broker_configs(1) == {}
    t.alter_broker(Caller("User:ops", "127.0.0.1"), 1, [ConfigChange(FOLLOWER_RATE, "100")])
    assert t.broker_configs(1) == {FOLLOWER_RATE: "100"}
