import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from seglog.rpc.channels import open_channel
from seglog.semconv import GROUP, PARTITION, TOPIC
from seglog.v1 import common_pb2, gateway_pb2_grpc
from tests.batches import make_batch
from tests.cluster import LocalCluster
from tests.waiting import wait_until

_EXPORTER = InMemorySpanExporter()
_PROVIDER = TracerProvider()
_PROVIDER.add_span_processor(SimpleSpanProcessor(_EXPORTER))


@pytest.fixture(scope="module")
def traced_cluster(tmp_path_factory):
    # The engine's spans go through the global provider, which can be set once per process.
    trace.set_tracer_provider(_PROVIDER)
    if trace.get_tracer_provider() is not _PROVIDER:
        pytest.fail("another test set the global tracer provider first")
    cluster = LocalCluster(tmp_path_factory.mktemp("traced"), nodes=1, tracer_provider=_PROVIDER)
    cluster.admin.create_topic("t", 1)
    yield cluster
    cluster.close()


def children(spans, parent):
    return [s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id]


def in_trace(span):
    return [
        s for s in _EXPORTER.get_finished_spans() if s.context.trace_id == span.context.trace_id
    ]


def one(spans, name):
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, (name, [s.name for s in spans])
    return found[0]


def test_a_produce_is_one_trace_through_gateway_node_and_engine(traced_cluster):
    channel = open_channel(traced_cluster.address, traced=True, tracer_provider=_PROVIDER)
    stub = gateway_pb2_grpc.GatewayStub(channel)
    _EXPORTER.clear()
    request = common_pb2.ProduceRequest(topic="t", acks=1)
    request.partitions.add(partition=0, records=make_batch([b"a", b"b", b"c"]))
    stub.Produce(request, timeout=10)
    assert wait_until(
        lambda: any(s.name == "seglog.log.append" for s in _EXPORTER.get_finished_spans())
    )
    client = [
        s
        for s in _EXPORTER.get_finished_spans()
        if s.name == "/seglog.v1.Gateway/Produce" and s.parent is None
    ]
    assert len(client) == 1 and client[0].kind == trace.SpanKind.CLIENT
    # Heartbeats from the node make traces of their own; this call's trace holds the rest.
    spans = in_trace(client[0])
    assert {s.name for s in spans} >= {"seglog.log.append", "seglog.bulk.produce"}
    (gateway_server,) = children(spans, client[0])
    assert gateway_server.kind == trace.SpanKind.SERVER
    # The gateway relays the request over the leader's bulk listener (bulk.md, version 3).
    (to_node,) = children(spans, gateway_server)
    assert to_node.name == "seglog.bulk.produce" and to_node.kind == trace.SpanKind.CLIENT
    (node_server,) = children(spans, to_node)
    assert node_server.name == "seglog.bulk.produce"
    assert node_server.kind == trace.SpanKind.SERVER
    names = {s.name for s in children(spans, node_server)}
    assert {"seglog.log.validate", "seglog.log.append"} <= names
    append = one(spans, "seglog.log.append")
    assert {s.name for s in children(spans, append)} == {
        "seglog.segment.write",
        "seglog.segment.index",
    }
    # Named as the metrics name them: OpenTelemetry's messaging conventions.
    assert append.attributes[TOPIC] == "t"
    assert append.attributes[PARTITION] == "0"
    assert gateway_server.attributes[TOPIC] == "t"
    assert append.attributes["seglog.batch_count"] == 1
    assert (append.attributes["seglog.first_offset"], append.attributes["seglog.last_offset"]) == (
        0,
        2,
    )
    assert append.attributes["seglog.bytes"] > 61
    channel.close()


def test_a_fetch_traces_the_engine_read_and_health_checks_are_not_traced(traced_cluster):
    # Its own record to read: the test must not rely on another test of the module having
    # run first in the same process.
    produced = common_pb2.ProduceRequest(topic="t", acks=1)
    produced.partitions.add(partition=0, records=make_batch([b"to-fetch"]))
    traced_cluster.stub.Produce(produced, timeout=10)
    _EXPORTER.clear()
    messages = list(
        traced_cluster.stub.Fetch(
            common_pb2.FetchRequest(
                max_wait_ms=0,
                max_bytes=1 << 20,
                partitions=[
                    common_pb2.FetchPartition(
                        topic="t", partition=0, fetch_offset=0, partition_max_bytes=1 << 20
                    )
                ],
            ),
            timeout=10,
        )
    )
    assert messages
    # Every span of the relay finished: the node's serving span ends after the read it
    # holds, and the gateway's after that (a CI run looked between the two).
    wanted = {
        "seglog.bulk.fetch",
        "seglog.bulk.serve",
        "seglog.log.read",
        "/seglog.v1.Gateway/Fetch",
    }
    assert wait_until(lambda: wanted <= {s.name for s in _EXPORTER.get_finished_spans()})
    read = one(_EXPORTER.get_finished_spans(), "seglog.log.read")
    spans = in_trace(read)
    assert read.attributes["seglog.fetch_offset"] == 0
    assert any(s.name == "seglog.segment.index_lookup" for s in children(spans, read))
    # This client is not traced: the gateway's server span is the trace's root.
    (root,) = [s for s in spans if s.parent is None]
    assert root.name == "/seglog.v1.Gateway/Fetch" and root.kind == trace.SpanKind.SERVER
    # Relayed to the node over its bulk listener (routing/fetch_relay.py): the gateway's
    # transfer span, and the node's serving span under it, in the same trace.
    assert {s.name for s in spans} >= {"seglog.bulk.fetch", "seglog.bulk.serve", "seglog.log.read"}
    transfer = one(spans, "seglog.bulk.fetch")
    assert (
        transfer.kind == trace.SpanKind.CLIENT and transfer.parent.span_id == root.context.span_id
    )
    assert one(spans, "seglog.bulk.serve").parent.span_id == transfer.context.span_id

    _EXPORTER.clear()
    health = health_pb2_grpc.HealthStub(traced_cluster.channel)
    health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
    assert not [s for s in _EXPORTER.get_finished_spans() if "Health" in s.name]


def test_a_bulk_transfer_is_a_client_span_with_the_nodes_span_in_its_trace(traced_cluster):
    from seglog.client.bulk import BulkReader
    from seglog.client.structs import TopicPartition

    traced_cluster.client.produce("t", {0: make_batch([b"bulk"] * 10)})
    _EXPORTER.clear()
    reader = BulkReader(traced_cluster.stub, 10)
    by_grant, fallback = reader.route([(TopicPartition("t", 0), 0)])
    assert not fallback
    [(grant, _)] = by_grant.values()
    request = common_pb2.FetchRequest(max_wait_ms=0, max_bytes=1 << 20)
    request.partitions.add(topic="t", partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
    messages = list(reader.send(grant, request).receive())
    reader.close()
    size = sum(len(m.records) for m in messages)
    assert size > 0
    assert wait_until(
        lambda: any(s.name == "seglog.bulk.serve" for s in _EXPORTER.get_finished_spans())
    )
    client = one(_EXPORTER.get_finished_spans(), "seglog.bulk.fetch")
    assert client.kind == trace.SpanKind.CLIENT
    assert client.attributes["seglog.bytes"] == size
    assert client.attributes["seglog.node_id"] == grant.node_id
    assert client.end_time > client.start_time
    (served,) = children(in_trace(client), client)
    assert served.name == "seglog.bulk.serve" and served.kind == trace.SpanKind.SERVER
    assert served.attributes["seglog.bytes"] == size


def test_a_long_poll_that_finds_nothing_leaves_no_span(traced_cluster):
    from seglog.client.bulk import BulkReader
    from seglog.client.structs import TopicPartition

    traced_cluster.client.produce("t", {0: make_batch([b"polled"])})
    end = traced_cluster.log("t", 0).high_watermark
    reader = BulkReader(traced_cluster.stub, 10)
    try:
        by_grant, _ = reader.route([(TopicPartition("t", 0), 0)])
        [(grant, _)] = by_grant.values()

        def fetch(offset, max_wait_ms):
            request = common_pb2.FetchRequest(max_wait_ms=max_wait_ms, max_bytes=1 << 20)
            request.partitions.add(
                topic="t", partition=0, fetch_offset=offset, partition_max_bytes=1 << 20
            )
            return sum(len(m.records) for m in reader.send(grant, request).receive())

        _EXPORTER.clear()
        assert fetch(end, 100) == 0  # caught up: waits 100 ms, answers nothing
        assert fetch(0, 0) > 0
    finally:
        reader.close()
    # The second answer's span marks the first one's end (one connection, in order).
    assert wait_until(
        lambda: any(s.name == "seglog.bulk.serve" for s in _EXPORTER.get_finished_spans())
    )
    served = [s for s in _EXPORTER.get_finished_spans() if s.name == "seglog.bulk.serve"]
    assert len(served) == 1 and served[0].attributes["seglog.bytes"] > 0
    # The client's spans are both kept: the caller's own request, empty or not.
    fetched = [s for s in _EXPORTER.get_finished_spans() if s.name == "seglog.bulk.fetch"]
    assert sorted(s.attributes["seglog.bytes"] > 0 for s in fetched) == [False, True]


def test_a_consumer_closing_during_its_long_poll_records_no_error(traced_cluster):
    from seglog.client.consumer import Consumer

    traced_cluster.client.produce("t", {0: make_batch([b"read then leave"])})
    _EXPORTER.clear()
    consumer = Consumer(traced_cluster.address, group_id="leaving", auto_offset_reset="earliest")
    consumer.subscribe(["t"])
    assert wait_until(lambda: bool(consumer.poll(200)), 30)
    consumer.poll(300)  # caught up: the next long poll is in flight when it closes
    consumer.close()
    assert wait_until(
        lambda: any(s.attributes.get("seglog.cancelled") for s in _EXPORTER.get_finished_spans()),
        10,
    )
    errors = [
        (s.name, s.status.description)
        for s in _EXPORTER.get_finished_spans()
        if s.status.status_code == trace.StatusCode.ERROR
    ]
    assert not errors


def test_an_authorized_call_carries_its_principal_not_its_credentials(tmp_path):
    # A second cluster with TLS and the authorizer, under the same global provider.
    trace.set_tracer_provider(_PROVIDER)
    cluster = LocalCluster(
        tmp_path, nodes=1, tracer_provider=_PROVIDER, tls=True, authorizer=True,
        super_users=("User:client",),
    )  # fmt: skip
    try:
        _EXPORTER.clear()
        cluster.admin.create_topic("who", 1, 1)
        assert wait_until(
            lambda: any(
                s.name == "/seglog.v1.Gateway/CreateTopics" and s.kind == trace.SpanKind.SERVER
                for s in _EXPORTER.get_finished_spans()
            )
        )
        server = [
            s
            for s in _EXPORTER.get_finished_spans()
            if s.name == "/seglog.v1.Gateway/CreateTopics" and s.kind == trace.SpanKind.SERVER
        ]
        assert server[0].attributes["seglog.principal"] == "User:client"
        assert all("Bearer" not in str(v) for s in server for v in s.attributes.values())
    finally:
        cluster.close()


def test_a_kafka_produce_is_one_span_carrying_its_api_client_and_topic(traced_cluster):
    import confluent_kafka

    _EXPORTER.clear()
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": traced_cluster.kafka_address, "client.id": "traced-client"}
    )
    producer.produce("t", value=b"over kafka")
    assert producer.flush(15) == 0
    assert wait_until(
        lambda: any(s.name == "seglog.log.append" for s in _EXPORTER.get_finished_spans())
    )
    produce = one(_EXPORTER.get_finished_spans(), "kafka.Produce")
    assert produce.attributes["kafka.client_id"] == "traced-client"
    assert produce.attributes["kafka.topics"] == "t"
    assert produce.attributes[TOPIC] == "t"
    assert 3 <= produce.attributes["kafka.api_version"] <= 13  # the versions served
    assert produce.attributes["kafka.principal"] == "User:ANONYMOUS"
    # The relay to the node and the node's append are in the Kafka request's trace.
    assert one(in_trace(produce), "seglog.log.append")
    assert any(s.name == "kafka.Metadata" for s in _EXPORTER.get_finished_spans())


def test_a_kip848_heartbeat_is_a_span_naming_its_group_and_member_epoch(traced_cluster):
    from tests.kafka_wire import KafkaWire
    from tests.kip848_clients import heartbeat

    _EXPORTER.clear()
    with KafkaWire(traced_cluster.kafka_address) as wire:
        joined = heartbeat(wire, "traced-group", "traced-member", 0, topics=["t"])
        assert joined.error_code == 0
        assert heartbeat(wire, "traced-group", "traced-member", -1).error_code == 0
    beats = [s for s in _EXPORTER.get_finished_spans() if s.name == "kafka.ConsumerGroupHeartbeat"]
    assert [s.attributes[GROUP] for s in beats] == ["traced-group", "traced-group"]
    assert [s.attributes["seglog.group.member_epoch"] for s in beats] == ["0", "-1"]
