"""Administration over Kafka's protocol with real Kafka clients as the second implementation:
confluent-kafka's AdminClient (librdkafka) and kafka-python's KafkaAdminClient create,
describe, alter and delete topics and configs, grow partitions, delete records and describe
the cluster against the gateway's Kafka listener; what they do is checked through seglog's own
gRPC API, and errors come back as Kafka's codes. (ACLs: test_kafka_acls.py.)"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaError
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)
from kafka import KafkaAdminClient
from kafka import TopicPartition as PythonTopicPartition
from kafka import errors as kafka_errors
from kafka.admin import (
    ACLOperation,
    AlterConfigOp,
)
from kafka.admin import ConfigResource as PythonConfigResource
from kafka.admin import NewPartitions as PythonNewPartitions
from kafka.admin import NewTopic as PythonNewTopic
from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
)

from seglog.client.admin import EARLIEST
from seglog.client.structs import TopicPartition
from seglog.v1 import common_pb2
from services.gateway.kafka.brokers import cluster_id
from tests.authorizer_modes import AUTHORIZER_MODES, cluster_in_mode
from tests.batches import make_batch
from tests.kafka_admin_calls import ADMIN_GRANTS, error_code_of, result_of
from tests.kafka_wire import KafkaWire


@pytest.fixture(scope="module", params=AUTHORIZER_MODES)
def cluster(request, tmp_path_factory):
    """The module's tests with the authorizer off, then on (ADMIN_GRANTS)."""
    c = cluster_in_mode(
        tmp_path_factory.mktemp("kafka-admin"), request.param, ADMIN_GRANTS, nodes=3
    )
    yield c
    c.close()


@pytest.fixture(scope="module")
def admin(cluster):
    return AdminClient({"bootstrap.servers": cluster.kafka_address})


@pytest.fixture(scope="module")
def python_admin(cluster):
    client = KafkaAdminClient(bootstrap_servers=cluster.kafka_address, client_id="admin-tests")
    yield client
    client.close()


def _overrides(cluster, topic: str) -> dict[str, str]:
    return {
        name: value
        for name, (value, source) in cluster.admin.describe_configs(topic).items()
        if source == "topic"
    }


# -- confluent-kafka (librdkafka) -----------------------------------------------------------


def test_topics_are_created_grown_and_deleted_with_kafkas_error_codes(cluster, admin):
    created = admin.create_topics(
        [
            NewTopic("ck-orders", 3, 2, config={"retention.ms": "60000"}),
            NewTopic("ck-default", -1),  # the gateway's defaults: 1 partition, RF 1
            NewTopic("ck-too-wide", 1, 9),
        ]
    )
    assert result_of(created["ck-orders"]) is None
    assert result_of(created["ck-default"]) is None
    assert error_code_of(created["ck-too-wide"]) == KafkaError.INVALID_REPLICATION_FACTOR
    orders = cluster.admin.describe_topic("ck-orders")
    assert len(orders.partitions) == 3 and orders.replication_factor == 2
    assert _overrides(cluster, "ck-orders") == {"retention.ms": "60000"}
    assert len(cluster.admin.describe_topic("ck-default").partitions) == 1
    again = admin.create_topics([NewTopic("ck-orders", 1, 1)])
    assert error_code_of(again["ck-orders"]) == KafkaError.TOPIC_ALREADY_EXISTS
    dry = admin.create_topics([NewTopic("ck-dry", 2, 1)], validate_only=True)
    assert result_of(dry["ck-dry"]) is None
    assert "ck-dry" not in cluster.admin.list_topics()

    grown = admin.create_partitions([NewPartitions("ck-orders", 5)])
    assert result_of(grown["ck-orders"]) is None
    assert len(cluster.admin.describe_topic("ck-orders").partitions) == 5
    shrunk = admin.create_partitions([NewPartitions("ck-orders", 2)])
    assert error_code_of(shrunk["ck-orders"]) == KafkaError.INVALID_PARTITIONS

    deleted = admin.delete_topics(["ck-orders", "ck-default"])
    assert result_of(deleted["ck-orders"]) is None and result_of(deleted["ck-default"]) is None
    assert not {"ck-orders", "ck-default"} & set(cluster.admin.list_topics())
    gone = admin.delete_topics(["ck-orders"])
    assert error_code_of(gone["ck-orders"]) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_configs_are_described_and_altered_incrementally(cluster, admin):
    cluster.admin.create_topic("ck-configs", 1, 1, configs={"retention.ms": "120000"})
    resource = ConfigResource(ResourceType.TOPIC, "ck-configs")
    described = result_of(admin.describe_configs([resource])[resource])
    assert described["retention.ms"].value == "120000"
    assert described["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert described["cleanup.policy"].value == "delete"
    assert described["cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG.value

    def alter(*entries):
        altered = ConfigResource(ResourceType.TOPIC, "ck-configs", incremental_configs=entries)
        return admin.incremental_alter_configs([altered])[altered]

    assert (
        result_of(
            alter(
                ConfigEntry("segment.ms", "3600000", incremental_operation=AlterConfigOpType.SET),
                ConfigEntry(
                    "cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND
                ),
                ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
            )
        )
        is None
    )
    assert _overrides(cluster, "ck-configs") == {
        "segment.ms": "3600000",
        "cleanup.policy": "delete,compact",
    }
    assert (
        result_of(
            alter(
                ConfigEntry(
                    "cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT
                )
            )
        )
        is None
    )
    assert _overrides(cluster, "ck-configs")["cleanup.policy"] == "compact"
    # Nothing of a refused change is applied.
    refused = alter(
        ConfigEntry("segment.ms", "60000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", "5", incremental_operation=AlterConfigOpType.APPEND),
    )
    assert error_code_of(refused) == KafkaError.INVALID_CONFIG
    bad_value = alter(
        ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)
    )
    assert error_code_of(bad_value) == KafkaError.INVALID_CONFIG
    assert _overrides(cluster, "ck-configs")["segment.ms"] == "3600000"
    unknown = ConfigResource(ResourceType.TOPIC, "ck-no-such-topic")
    assert error_code_of(admin.describe_configs([unknown])[unknown]) == (
        KafkaError.UNKNOWN_TOPIC_OR_PART
    )


def test_the_broker_resource_answers_the_gateways_settings(cluster, admin):
    controller = result_of(admin.describe_cluster()).controller
    broker = ConfigResource(ResourceType.BROKER, str(controller.id))
    described = result_of(admin.describe_configs([broker])[broker])
    setting = described["default.replication.factor"]
    assert setting.value == "1" and setting.is_read_only
    assert setting.source == ConfigSource.STATIC_BROKER_CONFIG.value


def test_records_are_deleted_and_the_cluster_described(cluster, admin):
    cluster.admin.create_topic("ck-records", 1, 3)
    (result,) = cluster.client.produce("ck-records", {0: make_batch([b"r"] * 10)}, acks=-1)
    assert result.error == common_pb2.NONE
    deleted = admin.delete_records([KafkaTopicPartition("ck-records", 0, 4)])
    (future,) = deleted.values()
    assert result_of(future).low_watermark == 4
    tp = TopicPartition("ck-records", 0)
    assert cluster.admin.list_offsets({tp: EARLIEST})[tp].offset == 4
    (beyond,) = admin.delete_records([KafkaTopicPartition("ck-records", 0, 11)]).values()
    assert error_code_of(beyond) == KafkaError.OFFSET_OUT_OF_RANGE
    cluster.admin.create_topic("ck-compacted", 1, 1, configs={"cleanup.policy": "compact"})
    (compacted,) = admin.delete_records([KafkaTopicPartition("ck-compacted", 0, 0)]).values()
    assert error_code_of(compacted) == KafkaError.POLICY_VIOLATION

    # librdkafka describes the cluster from Metadata; DescribeCluster itself is below. The
    # brokers are the storage nodes, each at the listener's port + its id (brokers.py).
    description = result_of(admin.describe_cluster())
    host, port = cluster.kafka_address.rsplit(":", 1)
    assert sorted((n.id, n.host, n.port) for n in description.nodes) == [
        (n, host, int(port) + n) for n in sorted(cluster.nodes)
    ]
    assert description.controller.id == min(cluster.nodes)


def test_what_clients_seldom_send_gets_kafkas_answers(cluster):
    """DescribeCluster, topic ids, replica assignments and the legacy AlterConfigs on a
    broker, at the wire level."""
    host, port = cluster.kafka_address.rsplit(":", 1)
    with KafkaWire(cluster.kafka_address) as wire:
        for version in (0, 1):
            described = wire.request(
                DescribeClusterRequest(include_cluster_authorized_operations=True),
                version,
                DescribeClusterResponse,
            )
            assert described.error_code == 0
            assert described.cluster_id == cluster_id(cluster.gateway.kafka_core)
            assert [(b.broker_id, b.host, b.port) for b in described.brokers] == [
                (n, host, int(port) + n) for n in sorted(cluster.nodes)
            ]
            broker_id = min(cluster.nodes)
            assert described.controller_id == broker_id
            # No authorizer: every cluster operation is allowed.
            assert {ACLOperation.DESCRIBE, ACLOperation.ALTER} <= described.authorized_operations
        controller = wire.request(
            DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=2),
            1,
            DescribeClusterResponse,
        )
        assert controller.error_code == kafka_errors.MismatchedEndpointTypeError.errno
        topic = CreateTopicsRequest.CreatableTopic
        assignment = topic.CreatableReplicaAssignment(partition_index=0, broker_ids=[1])
        created = wire.request(
            CreateTopicsRequest(
                topics=[
                    topic(
                        name="wire-assigned",
                        num_partitions=-1,
                        replication_factor=-1,
                        assignments=[assignment],
                        configs=[],
                    )
                ],
                timeout_ms=5000,
                validate_only=False,
            ),
            7,
            CreateTopicsResponse,
        )
        (refused,) = created.topics
        assert refused.error_code == kafka_errors.InvalidRequestError.errno
        assert "replica assignments" in refused.error_message
        config = topic.CreatableTopicConfig(name="retention.ms", value="70000")
        created = wire.request(
            CreateTopicsRequest(
                topics=[
                    topic(
                        name="wire-made",
                        num_partitions=2,
                        replication_factor=-1,
                        assignments=[],
                        configs=[config],
                    )
                ],
                timeout_ms=5000,
                validate_only=False,
            ),
            7,
            CreateTopicsResponse,
        )
        (made,) = created.topics
        assert (made.error_code, made.num_partitions, made.replication_factor) == (0, 2, 1)
        sources = {c.name: (c.value, c.config_source) for c in made.configs}
        assert sources["retention.ms"] == ("70000", 1)  # DYNAMIC_TOPIC_CONFIG
        assert sources["cleanup.policy"] == ("delete", 5)  # DEFAULT_CONFIG
        unknown_id = uuid.UUID(int=7)
        deleted = wire.request(
            DeleteTopicsRequest(
                topics=[DeleteTopicsRequest.DeleteTopicState(name=None, topic_id=unknown_id)],
                timeout_ms=5000,
            ),
            6,
            DeleteTopicsResponse,
        )
        ((topic_id, code),) = [(r.topic_id, r.error_code) for r in deleted.responses]
        assert (topic_id, code) == (unknown_id, kafka_errors.UnknownTopicIdError.errno)
        resource = AlterConfigsRequest.AlterConfigsResource
        altered = wire.request(
            AlterConfigsRequest(
                resources=[
                    resource(
                        resource_type=4,
                        resource_name=str(broker_id),
                        # Static here: only the replication throttles are dynamic broker configs.
                        configs=[resource.AlterableConfig(name="num.io.threads", value="3")],
                    )
                ],
                validate_only=False,
            ),
            2,
            AlterConfigsResponse,
        )
        assert altered.responses[0].error_code == kafka_errors.InvalidConfigurationError.errno
    assert "wire-assigned" not in cluster.admin.list_topics()


# -- kafka-python -------------------------------------------------------------------------


def test_kafka_python_administers_topics_configs_partitions_and_records(cluster, python_admin):
    python_admin.create_topics(
        [PythonNewTopic("kp-events", 2, 1, topic_configs={"retention.ms": "90000"})]
    )
    assert len(cluster.admin.describe_topic("kp-events").partitions) == 2
    with pytest.raises(kafka_errors.TopicAlreadyExistsError):
        python_admin.create_topics([PythonNewTopic("kp-events", 1, 1)])
    with pytest.raises(kafka_errors.InvalidReplicationFactorError):
        python_admin.create_topics([PythonNewTopic("kp-wide", 1, 7)])

    resource = PythonConfigResource("TOPIC", "kp-events")
    described = python_admin.describe_configs([resource])
    assert described["topic"]["kp-events"]["retention.ms"]["value"] == "90000"
    altered = python_admin.alter_configs(
        [
            PythonConfigResource(
                "TOPIC",
                "kp-events",
                configs={
                    "cleanup.policy": (AlterConfigOp.APPEND, "compact"),
                    "retention.ms": (AlterConfigOp.DELETE, None),
                },
            )
        ]
    )
    assert altered["topic"]["kp-events"] == "OK"
    assert _overrides(cluster, "kp-events") == {"cleanup.policy": "delete,compact"}

    python_admin.create_partitions({"kp-events": PythonNewPartitions(4)})
    assert len(cluster.admin.describe_topic("kp-events").partitions) == 4

    keyed = make_batch([b"e"] * 6, keys=[b"k%d" % i for i in range(6)])  # compacted now
    (result,) = cluster.client.produce("kp-events", {1: keyed}, acks=-1)
    assert result.error == common_pb2.NONE
    deleted = python_admin.delete_records({PythonTopicPartition("kp-events", 1): -1})
    assert deleted[PythonTopicPartition("kp-events", 1)]["low_watermark"] == 6

    description = python_admin.describe_cluster()
    assert sorted(b["broker_id"] for b in description["brokers"]) == sorted(cluster.nodes)
    assert description["controller_id"] == min(cluster.nodes)

    python_admin.delete_topics(["kp-events"])
    assert "kp-events" not in cluster.admin.list_topics()
    with pytest.raises(kafka_errors.UnknownTopicOrPartitionError):
        python_admin.delete_topics(["kp-events"])
