"""SCRAM credentials and dynamic broker configs in the registry's metadata log: checked before
they are written, applied, removed, kept across a restart and in a snapshot (the file store
here; the etcd store stores the same records)."""

from __future__ import annotations

import pytest

from seglog.errors import InvalidConfigError, InvalidRequestError
from services.gateway.authorization import Authorization
from services.gateway.broker.caller import Caller
from services.gateway.cluster.broker_configs import (
    FOLLOWER_THROTTLE_RATE,
    LEADER_THROTTLE_RATE,
    BrokerConfigs,
)
from services.gateway.cluster.metadata_image import MetadataImage
from services.gateway.cluster.metadata_records import (
    MetadataRecordError,
    broker_config_record,
    check_records,
    scram_credential_record,
)
from services.gateway.cluster.registry import Registry
from services.gateway.cluster.scram_credentials import credential_of, salted_password


def test_credentials_and_broker_configs_are_kept_across_restarts_and_snapshots(tmp_path):
    registry = Registry(tmp_path)
    salted = salted_password("SCRAM-SHA-256", "pw", b"salt", 4096)
    credential = credential_of("SCRAM-SHA-256", b"salt", salted, 4096)
    registry.alter_scram_credentials(
        [("alice", "SCRAM-SHA-256", credential), ("bob", "SCRAM-SHA-512", credential)]
    )
    registry.alter_scram_credentials([("bob", "SCRAM-SHA-512", None)])
    registry.alter_broker_configs("", {"leader.replication.throttled.rate": "10"})
    registry.alter_broker_configs("3", {"follower.replication.throttled.rate": "20"})
    registry.alter_broker_configs("3", {})
    again = Registry(tmp_path)
    assert again.scram_credentials == {"alice": {"SCRAM-SHA-256": credential}}
    assert again.broker_configs == {"": {"leader.replication.throttled.rate": "10"}}
    snapshot = MetadataImage.from_batches([(1, again.image.records())])
    assert snapshot.scram_credentials == again.scram_credentials
    assert snapshot.broker_configs == again.broker_configs
    # RFC 5802's keys: the salted password itself is not kept.
    assert salted not in (credential.stored_key, credential.server_key)


def test_a_brokers_own_throttle_comes_before_the_clusters_default(tmp_path):
    registry = Registry(tmp_path)
    configs = BrokerConfigs(registry, Authorization([], enabled=False))
    anyone = Caller("User:ANONYMOUS", "127.0.0.1")
    configs.alter(anyone, "", {FOLLOWER_THROTTLE_RATE: "500"})
    configs.alter(anyone, "7", {FOLLOWER_THROTTLE_RATE: " 2097152 "})
    assert configs.value("7", FOLLOWER_THROTTLE_RATE) == "2097152"
    assert configs.value("8", FOLLOWER_THROTTLE_RATE) == "500"
    assert configs.value("7", LEADER_THROTTLE_RATE) is None
    described = configs.describe(anyone, "7")
    assert [(c.name, c.value, c.source) for c in described] == [
        (FOLLOWER_THROTTLE_RATE, "2097152", "dynamic_broker")
    ]
    configs.alter(anyone, "7", {}, [FOLLOWER_THROTTLE_RATE])
    assert configs.value("7", FOLLOWER_THROTTLE_RATE) == "500"
    for name, value in ((LEADER_THROTTLE_RATE, "-1"), ("num.io.threads", "3")):
        with pytest.raises(InvalidConfigError):
            configs.alter(anyone, "7", {name: value})
    with pytest.raises(InvalidRequestError):
        configs.alter(anyone, "gateway-1", {LEADER_THROTTLE_RATE: "1"})
    assert "7" not in registry.broker_configs


@pytest.mark.parametrize(
    "record",
    [
        scram_credential_record("alice", "SCRAM-SHA-256", {"salt": "c2FsdA=="}),
        {"type": "scram_credential", "user": "alice", "mechanism": 1},
        broker_config_record("1", {"leader.replication.throttled.rate": 10}),  # type: ignore[dict-item]
        {"type": "broker_config", "broker": 1, "configs": {}},
    ],
)
def test_malformed_records_are_refused(record):
    with pytest.raises(MetadataRecordError):
        check_records([record])
