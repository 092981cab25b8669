"""Dynamic group configs (cluster/group_configs.py) on a real registry (the file store; the
etcd store keeps the same records, tests/integration/test_group_configs_kafka.py): checked as
Kafka 4.3.1's GroupConfig checks them, with its messages, nothing stored when any value is
refused; kept across a restart and in a snapshot; read per group by id; and the share
partition limits and read_committed batches they drive."""

from __future__ import annotations

import pytest

from seglog.errors import InvalidConfigError, InvalidRequestError
from seglog.records.batch import CONTROL_MASK, TRANSACTIONAL_MASK, BatchHeader
from services.gateway.authorization import Authorization
from services.gateway.broker.caller import Caller
from services.gateway.cluster.group_configs import GroupConfigs, duration_ms
from services.gateway.cluster.metadata_image import MetadataImage
from services.gateway.cluster.metadata_records import (
    MetadataRecordError,
    check_records,
    group_config_record,
)
from services.gateway.cluster.registry import Registry
from services.gateway.share.committed_reads import committed_batches
from services.gateway.share.share_partition import FetchedBatch

ANYONE = Caller("User:ANONYMOUS", "127.0.0.1")
# The gateway's defaults (Kafka's), as coordinators.group_config_defaults gives them.
DEFAULTS = {
    "consumer.session.timeout.ms": "45000",
    "consumer.heartbeat.interval.ms": "5000",
    "share.session.timeout.ms": "45000",
    "share.heartbeat.interval.ms": "5000",
    "share.record.lock.duration.ms": "30000",
    "share.delivery.count.limit": "5",
    "share.partition.max.record.locks": "2000",
    "share.auto.offset.reset": "latest",
    "share.isolation.level": "read_uncommitted",
}


def group_configs(path, **defaults) -> GroupConfigs:
    return GroupConfigs(Registry(path), Authorization([], enabled=False), {**DEFAULTS, **defaults})


def test_group_configs_are_kept_across_restarts_and_snapshots_and_read_per_group(tmp_path):
    configs = group_configs(tmp_path)
    configs.alter(ANYONE, "g1", {"share.auto.offset.reset": "earliest"})
    configs.alter(ANYONE, "g1", {"consumer.session.timeout.ms": " 50000 "})
    configs.alter(ANYONE, "g2", {"share.record.lock.duration.ms": "15000"})
    configs.alter(ANYONE, "g2", {}, ["share.record.lock.duration.ms"])  # none left: removed
    assert configs.of("g1").share_auto_offset_reset == "earliest"
    assert configs.of("g1").consumer_session_timeout_ms == 50_000  # stored as Kafka's int
    assert configs.of("g1").share_record_lock_duration_ms == 30_000  # the default
    assert configs.of("g2") is configs.default
    again = group_configs(tmp_path)
    assert again.registry.group_configs == {
        "g1": {"share.auto.offset.reset": "earliest", "consumer.session.timeout.ms": "50000"}
    }
    snapshot = MetadataImage.from_batches([(1, again.registry.image.records())])
    assert snapshot.group_configs == again.registry.group_configs
    described = {c.name: (c.value, c.source) for c in again.describe(ANYONE, "g1")}
    assert described["share.auto.offset.reset"] == ("earliest", "group")
    assert described["share.delivery.count.limit"] == ("5", "default")
    # The legacy whole-set form: what is not given goes.
    again.alter(ANYONE, "g1", {"share.isolation.level": "read_committed"}, replace=True)
    assert again.registry.group_configs == {"g1": {"share.isolation.level": "read_committed"}}
    assert again.of("g1").share_auto_offset_reset == "latest"
    assert again.of("g1").share_isolation_level == "read_committed"


@pytest.mark.parametrize(
    "configs, message",
    [
        ({"nope": "1"}, "Unknown group config name: nope"),
        (
            {"share.record.lock.duration.ms": "100"},
            "Invalid value 100 for configuration share.record.lock.duration.ms: "
            "Value must be at least 1000",
        ),
        (
            {"share.record.lock.duration.ms": "5000"},
            "share.record.lock.duration.ms must be greater than or equal to "
            "group.share.min.record.lock.duration.ms",
        ),
        (
            {"consumer.session.timeout.ms": "70000"},
            "consumer.session.timeout.ms must be less than or equal to "
            "group.consumer.max.session.timeout.ms",
        ),
        (
            {"consumer.heartbeat.interval.ms": "abc"},
            "Invalid value abc for configuration consumer.heartbeat.interval.ms: "
            "Not a number of type INT",
        ),
        (
            {"share.auto.offset.reset": "foo"},
            "Invalid value foo for configuration share.auto.offset.reset: Invalid value `foo` "
            "for configuration share.auto.offset.reset. The value must be either 'earliest', "
            "'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.",
        ),
        (
            {"share.isolation.level": "x"},
            "Invalid value x for configuration share.isolation.level: "
            "String must be one of: read_committed, read_uncommitted",
        ),
        (
            {"share.session.timeout.ms": "45000", "share.heartbeat.interval.ms": "15000"},
            None,  # accepted, as by Kafka: 45 s is longer than 15 s
        ),
        (
            {"consumer.session.timeout.ms": "45000", "consumer.heartbeat.interval.ms": "15000"},
            None,
        ),
        ({"streams.num.standby.replicas": "1"}, "a Kafka group config seglog does not apply"),
    ],
)
def test_bad_group_configs_are_refused_with_kafkas_message_and_nothing_stored(
    tmp_path, configs, message
):
    group_config = group_configs(tmp_path)
    good = {"share.auto.offset.reset": "earliest"}
    if message is None:
        group_config.alter(ANYONE, "g", {**good, **configs})
        assert group_config.registry.group_configs["g"] == {**good, **configs}
        return
    with pytest.raises(InvalidConfigError) as refused:
        group_config.alter(ANYONE, "g", {**good, **configs})  # the good one is not kept either
    assert message in str(refused.value)
    assert group_config.registry.group_configs == {}
    with pytest.raises(InvalidRequestError, match="Group name must not be empty"):
        group_config.alter(ANYONE, "", good)


def test_a_session_must_be_longer_than_its_heartbeat(tmp_path):
    configs = group_configs(tmp_path, **{"share.session.timeout.ms": "6000"})
    with pytest.raises(InvalidConfigError, match=r"^share.session.timeout.ms must be greater"):
        configs.alter(ANYONE, "g", {"share.heartbeat.interval.ms": "6000"})
    # The broker's bounds hold the gateway's own defaults (6 s is below Kafka's 45 s).
    configs.alter(ANYONE, "g", {"share.session.timeout.ms": "6000"})


def test_by_duration_resets_read_as_java_durations():
    assert duration_ms("by_duration:PT1H") == 3_600_000
    assert duration_ms("by_duration:P1DT0.5S") == 86_400_500
    assert duration_ms("by_duration:PT") is None
    assert duration_ms("by_duration:-PT1H") is None  # Kafka: negative durations refused
    assert duration_ms("earliest") is None


def test_group_config_records_are_checked():
    check_records([group_config_record("g", {"share.auto.offset.reset": "earliest"})])
    with pytest.raises(MetadataRecordError):
        check_records([{"type": "group_config", "group": 1, "configs": {}}])


def header(base: int, last: int, producer: int, attributes: int) -> BatchHeader:
    return BatchHeader(base, 0, 0, 2, 0, attributes, last - base, 0, 0, producer, 0, 0, 1)


def test_read_committed_archives_an_aborted_transactions_batches_only():
    txn = TRANSACTIONAL_MASK
    headers = [
        header(0, 1, 7, txn),  # aborted (7's transaction from offset 0)
        header(2, 2, 8, txn),  # committed
        header(3, 3, 7, txn | CONTROL_MASK),  # 7's abort marker
        header(4, 5, 8, txn | CONTROL_MASK),  # 8's commit marker
        header(6, 6, 7, txn),  # 7's next transaction: committed
        header(7, 9, 9, 0),  # not transactional
    ]
    assert committed_batches(headers, [(7, 0)]) == [
        FetchedBatch(0, 1, True),
        FetchedBatch(2, 2, False),
        FetchedBatch(3, 3, True),
        FetchedBatch(4, 5, True),
        FetchedBatch(6, 6, False),
        FetchedBatch(7, 9, False),
    ]
    assert [b.is_control for b in committed_batches(headers, [])] == [
        False,
        False,
        True,
        True,
        False,
        False,
    ]
