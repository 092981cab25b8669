"""The services' settings, declared once on their config fields (services/settings.py): every
surface derived from the declaration agrees with it, and every spelling that worked before
the settings were declared once still works."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from services import command_line, settings
from services.gateway.__main__ import parse_args as gateway_args
from services.gateway.settings import GatewayConfig
from services.storage_node.__main__ import parse_args as node_args
from services.storage_node.settings import NodeConfig

ROOT = Path(__file__).resolve().parents[2]
SECRET = "a-cluster-secret-0123456789"
# The flags the services took before their settings were declared once; tests, deploy/ and
# operators' scripts spell them so.
GATEWAY_FLAGS = [
    "--listen",
    "--data-dir",
    "--registry-etcd",
    "--advertised-listener",
    "--gateway-session-timeout-ms",
    "--registry-etcd-prefix",
    "--session-timeout-ms",
    "--heartbeat-interval-ms",
    "--offsets-topic-num-partitions",
    "--group-initial-rebalance-delay-ms",
    "--group-min-session-timeout-ms",
    "--max-partitions-per-topic",
    "--max-partitions",
    "--max-unacknowledged-bytes",
    "--offsets-retention-minutes",
    "--offsets-retention-check-interval-ms",
    "--default-replication-factor",
    "--offsets-topic-replication-factor",
    "--auto-leader-rebalance-enable",
    "--leader-imbalance-check-interval-seconds",
    "--auto-balance-enable",
    "--auto-balance-max-moves",
    "--auto-balance-throttle-bytes-per-s",
    "--auto-balance-interval-ms",
    "--cluster-secret",
    "--fetch-grant-ttl-ms",
    "--tls-cert",
    "--tls-key",
    "--tls-ca",
    "--tls-client-auth",
    "--internal-listen",
    "--tls-node-identity-prefix",
    "--oauth-jwks-file",
    "--oauth-audience",
    "--token-file",
    "--ssl-principal-mapping-rules",
    "--authorizer",
    "--super-users",
    "--allow-everyone-if-no-acl-found",
    "--health-listen",
    "--config-file",
]
NODE_FLAGS = [
    "--node-id",
    "--listen",
    "--data-dir",
    "--gateway",
    "--advertised-address",
    "--heartbeat-interval-ms",
    "--cluster-secret",
    "--bulk-listen",
    "--advertised-bulk-address",
    "--tls-cert",
    "--tls-key",
    "--tls-ca",
    "--tls-node-identity-prefix",
    "--config",
    "--health-listen",
    "--config-file",
]
# What DescribeConfigs named the gateway's settings before.
DESCRIBED_NAMES = [
    "registry.etcd",
    "registry.etcd.prefix",
    "registry.etcd.security.protocol",
    "registry.etcd.user",
    "advertised.listener",
    "max.connections",
    "max.connections.per.ip",
    "max.connections.per.ip.overrides",
    "connections.max.idle.ms",
    "connections.first.request.timeout.ms",
    "num.network.threads",
    "num.io.threads",
    "num.partitions",
    "remote.log.storage.system.enable",
    "auto.create.topics.enable",
    "queued.max.requests",
    "max.incremental.fetch.session.cache.slots",
    "gateway.session.timeout.ms",
    "broker.session.timeout.ms",
    "broker.heartbeat.interval.ms",
    "socket.request.max.bytes",
    "queued.max.request.bytes",
    "max.concurrent.requests",
    "offsets.topic.num.partitions",
    "transaction.state.log.num.partitions",
    "transaction.max.timeout.ms",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms",
    "group.initial.rebalance.delay.ms",
    "group.consumer.session.timeout.ms",
    "group.consumer.heartbeat.interval.ms",
    "group.consumer.migration.policy",
    "group.share.delivery.count.limit",
    "group.share.record.lock.duration.ms",
    "group.share.session.timeout.ms",
    "share.auto.offset.reset",
    "errors.deadletterqueue.topic.name",
    "errors.deadletterqueue.topic.name.prefix",
    "errors.deadletterqueue.auto.create.topics.enable",
    "errors.deadletterqueue.copy.record.enable",
    "share.coordinator.state.topic.num.partitions",
    "group.min.session.timeout.ms",
    "group.max.session.timeout.ms",
    "group.max.size",
    "max.partitions.per.topic",
    "max.partitions",
    "max.unacknowledged.bytes",
    "offsets.retention.minutes",
    "offsets.retention.check.interval.ms",
    "default.replication.factor",
    "offsets.topic.replication.factor",
    "auto.leader.rebalance.enable",
    "leader.imbalance.check.interval.seconds",
    "auto.balance.enable",
    "auto.balance.max.moves",
    "auto.balance.throttle.bytes.per.s",
    "auto.balance.interval.ms",
    "bulk.fetch.enabled",
    "fetch.grant.ttl.ms",
    "bulk.produce.relay.enable",
    "bulk.fetch.relay.enable",
    "security.protocol",
    "tls.client.auth",
    "internal.listen",
    "node.identity.prefix",
    "health.listen",
    "ssl.principal.mapping.rules",
    "authorizer",
    "super.users",
    "allow.everyone.if.no.acl.found",
]
NODE_REQUIRED = ["--node-id", "1", "--data-dir", "data/node-1"]


@pytest.fixture(autouse=True)
def _no_seglog_environment(monkeypatch):
    """The tests' own environment, not the caller's SEGLOG_* variables."""
    for config_class in (GatewayConfig, NodeConfig):
        for name in command_line.environment_variables(config_class):
            monkeypatch.delenv(name, raising=False)


def _flags_known(parse_args, required):
    with pytest.raises(SystemExit):  # --help lists every flag, then exits
        parse_args([*required, "--help"])


def test_every_flag_spelling_of_before_still_parses(capsys):
    _flags_known(gateway_args, [])
    shown = capsys.readouterr().out
    assert all(f"{flag} " in shown for flag in GATEWAY_FLAGS), shown
    _flags_known(node_args, NODE_REQUIRED)
    shown = capsys.readouterr().out
    assert all(f"{flag} " in shown for flag in NODE_FLAGS), shown


def test_a_command_line_without_flags_gives_the_declared_defaults():
    assert gateway_args([]) == GatewayConfig()
    assert node_args(NODE_REQUIRED) == NodeConfig(node_id=1, data_dir=Path("data/node-1"))


def test_flags_and_their_variables_set_fields_and_the_flag_wins(monkeypatch):
    monkeypatch.setenv("SEGLOG_SESSION_TIMEOUT_MS", "4000")
    monkeypatch.setenv("SEGLOG_SUPER_USERS", "User:a;User:b")
    config = gateway_args(["--authorizer", "true", "--data-dir", "elsewhere"])
    assert config.session_timeout_ms == 4000 and config.super_users == ("User:a", "User:b")
    assert config.authorizer is True and config.data_dir == Path("elsewhere")
    assert gateway_args(["--session-timeout-ms", "5000"]).session_timeout_ms == 5000
    monkeypatch.setenv("SEGLOG_NODE_ID", "4")
    monkeypatch.setenv("SEGLOG_CLUSTER_SECRET", SECRET)
    node = node_args(["--data-dir", "d"])
    assert node.node_id == 4 and node.cluster_secret == SECRET.encode()


def test_the_node_takes_its_own_settings_among_the_engine_settings():
    config = node_args(
        [
            *NODE_REQUIRED,
            "--config",
            "controlled.shutdown.enable=FALSE",
            "--config",
            "broker.session.timeout.ms=5000",
            "--config",
            "log.segment.bytes=1048576",
        ]
    )
    assert config.controlled_shutdown_enable is False and config.session_timeout_ms == 5000
    assert config.controlled_shutdown_timeout_ms == 30_000
    assert config.engine_configs == {"log.segment.bytes": "1048576"}


@pytest.mark.parametrize(
    "args",
    [
        ["--config", "controlled.shutdown.enable=maybe"],
        ["--config", "controlled.shutdown.timeout.ms=-1"],
        ["--config", "no-equals-sign"],
        ["--tls-cert", "node.pem", "--tls-key", "node.key"],  # a node's TLS needs the CA
        ["--cluster-secret", "too short"],
    ],
)
def test_a_wrong_node_setting_is_a_usage_error(args):
    with pytest.raises(SystemExit) as exited:
        node_args([*NODE_REQUIRED, *args])
    assert exited.value.code == 2


def test_a_properties_file_takes_kafka_names_and_the_flags_dotted_spellings(tmp_path):
    path = tmp_path / "gateway.properties"
    path.write_text(
        "broker.session.timeout.ms=4000\n"  # Kafka's name
        "heartbeat.interval.ms=500\n"  # the flag's spelling, as deploy/ writes it
        "tls.node.identity.prefix=seglog-node-\n"
        "super.users=User:admin\n"
        "auto.leader.rebalance.enable=false\n"
    )
    config = gateway_args(["--config-file", str(path), "--heartbeat-interval-ms", "700"])
    assert config.session_timeout_ms == 4000
    assert config.heartbeat_interval_ms == 700  # the command line wins
    assert config.node_identity_prefix == "seglog-node-"
    assert config.super_users == ("User:admin",) and config.auto_leader_rebalance_enable is False
    path.write_text("socket.request.max.bytes=1\n")  # declared, but set only in code
    with pytest.raises(SystemExit):
        gateway_args(["--config-file", str(path)])


def test_a_node_properties_file_sends_other_names_to_the_engine(tmp_path, monkeypatch):
    path = tmp_path / "node.properties"
    path.write_text(
        "controlled.shutdown.timeout.ms=10000\nmin.insync.replicas=2\nhealth.listen=0.0.0.0:7079\n"
    )
    monkeypatch.setenv(command_line.CONFIG_FILE_ENV, str(path))
    config = node_args(NODE_REQUIRED)
    assert config.controlled_shutdown_timeout_ms == 10_000
    assert config.health_listen == "0.0.0.0:7079"
    assert config.engine_configs == {"min.insync.replicas": "2"}


def test_describe_configs_keeps_its_names_and_never_shows_the_secret():
    described = settings.described_settings(GatewayConfig(cluster_secret=SECRET.encode()))
    assert sorted(described) == sorted(DESCRIBED_NAMES)
    assert described["bulk.fetch.enabled"] == "true" and SECRET not in str(described)
    assert described["security.protocol"] == "PLAINTEXT"
    assert described["broker.session.timeout.ms"] == str(GatewayConfig().session_timeout_ms)


def test_names_and_flags_are_each_one_settings_and_defaults_are_the_fields():
    for config_class in (GatewayConfig, NodeConfig):
        declared = list(settings.settings_of(config_class))
        names = [item.name for item in declared]
        assert len(names) == len(set(names)), names
        spellings = [flag.spelling for item in declared for flag in item.flags]
        assert len(spellings) == len(set(spellings)), spellings
        for item in declared:
            assert item.name == item.name.lower() and "_" not in item.name, item.name
            field = {f.name: f for f in dataclasses.fields(config_class)}[item.field]
            assert item.default is field.default


def test_a_nodes_object_store_comes_from_flags_and_its_secret_from_the_environment(monkeypatch):
    assert node_args(NODE_REQUIRED).remote_storage is None
    monkeypatch.setenv("SEGLOG_REMOTE_LOG_STORAGE_SECRET_ACCESS_KEY", "from-a-secret")
    config = node_args(
        [
            *NODE_REQUIRED,
            "--remote-log-storage-endpoint", "http://s3.example:8333",
            "--remote-log-storage-bucket", "history",
            "--remote-log-storage-access-key-id", "seglog",
            "--config", "remote.log.manager.task.interval.ms=1000",
        ]
    )  # fmt: skip
    remote = config.remote_storage
    assert remote is not None and remote.bucket == "history" and remote.region == "us-east-1"
    assert remote.secret_access_key == "from-a-secret"
    assert "from-a-secret" not in repr(config)  # the secret reaches no log line
    assert config.remote_log_manager_task_interval_ms == 1000
    assert config.engine_configs == {}


@pytest.mark.parametrize(
    "args",
    [
        ["--remote-log-storage-bucket", "history"],  # no endpoint
        ["--remote-log-storage-endpoint", "http://s3.example:8333"],  # no bucket, no keys
    ],
)
def test_an_incomplete_object_store_is_a_usage_error(args):
    with pytest.raises(SystemExit) as exited:
        node_args([*NODE_REQUIRED, *args])
    assert exited.value.code == 2
