"""Real processes: the local cluster and the CLI, a storage node SIGKILLed in the middle of a
produce stream, a gateway SIGKILLed and restarted, and traces exported over OTLP."""

import os
import re
import signal
import subprocess
import threading
import time
from concurrent import futures

import grpc
import pytest
from kafka.record.default_records import DefaultRecordBatch
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from devtools.processes import ServerProcess, gateway_process, node_process
from seglog.client.admin import Admin
from seglog.client.gateway import FetchPosition, GatewayClient
from seglog.client.partitioner import partition_for_key
from seglog.errors import SeglogError
from seglog.records import iter_batches, iter_records
from tests.batches import make_batch
from tests.cluster import local_cluster_command, run_cli
from tests.waiting import wait_until

FAST = ["--session-timeout-ms", "2000", "--heartbeat-interval-ms", "200"]


class ProcessCluster:
    def __init__(self, root, nodes=2, env=None, gateway_args=(), node_args=()):
        self.root = root
        self.env = env or {}
        self.node_args = list(node_args)
        self.gateway = gateway_process(
            "127.0.0.1:0",
            root / "gateway",
            extra_args=[*FAST, *gateway_args],
            env=self.env,
            stderr_path=root / "gateway.log",
        )
        self.gateway.start()
        self.nodes: dict[int, ServerProcess] = {}
        for node_id in range(1, nodes + 1):
            self.start_node(node_id, "127.0.0.1:0")
        self.client = GatewayClient(self.gateway.address)
        self.admin = Admin(self.gateway.address)
        assert wait_until(lambda: sum(n.live for n in self.admin.describe_cluster().nodes) == nodes)

    def start_node(self, node_id, listen):
        node = node_process(
            node_id,
            listen,
            self.root / f"node-{node_id}",
            self.gateway.internal_address,
            extra_args=["--heartbeat-interval-ms", "200", *self.node_args],
            env=self.env,
            stderr_path=self.root / f"node-{node_id}.log",
        )
        node.start()
        self.nodes[node_id] = node
        return node

    def restart_gateway(self):
        port = self.gateway.address.rsplit(":", 1)[1]
        self.gateway = gateway_process(
            f"127.0.0.1:{port}",
            self.root / "gateway",
            internal_listen=self.gateway.internal_address,  # where the nodes call it
            extra_args=FAST,
            env=self.env,
            stderr_path=self.root / "gateway.log",
        )
        self.gateway.start()

    def close(self):
        self.client.close()
        self.admin.close()
        for node in self.nodes.values():
            node.stop()
        self.gateway.stop()


@pytest.fixture
def processes(tmp_path):
    cluster = ProcessCluster(tmp_path)
    yield cluster
    cluster.close()


def read_partition(client, topic, partition):
    """Every record of a partition, checking every batch's CRC with kafka-python as well."""
    records, offset = [], 0
    latest = client.list_offsets(topic, {partition: -1})[partition]
    assert latest.error == 0, latest.error_message
    end = latest.offset
    while offset < end:
        (message,) = list(client.fetch([FetchPosition(topic, partition, offset)], max_wait_ms=0))
        assert message.error == 0, message.error_message
        for stored in iter_batches(message.records):
            assert DefaultRecordBatch(bytes(stored.raw())).validate_crc()
        got = [r for r in iter_records(message.records) if r.offset >= offset]
        records += got
        offset = got[-1].offset + 1
    return records


def test_storage_node_sigkilled_mid_produce_loses_no_acknowledged_record(processes):
    client = processes.client
    processes.admin.create_topic("events", 4)
    leaders = {p.partition: p.leader for p in processes.admin.describe_topic("events").partitions}
    victim = leaders[0]
    acked: dict[int, list[bytes]] = {p: [] for p in range(4)}
    errors: dict[int, int] = {p: 0 for p in range(4)}
    # Successes counted by the phase in which their call *started*: a call that began before
    # the kill may return after it, and must not pass for one the restarted node served.
    phase = ["before"]
    successes = {name: {p: 0 for p in range(4)} for name in ("before", "killed", "restarted")}
    stop = threading.Event()

    def produce():
        with GatewayClient(processes.gateway.address, timeout_s=5) as producer:
            i = 0
            while not stop.is_set() and i < 100_000:
                for p in range(4):
                    values = [b"%d-%d-%d" % (p, i, j) for j in range(50)]
                    started_in = phase[0]
                    try:
                        (result,) = producer.produce(
                            "events", {p: make_batch(values)}, timeout_ms=3000
                        )
                    except SeglogError:
                        errors[p] += 1
                        continue
                    if result.error:
                        errors[p] += 1
                        continue
                    acked[p] += values
                    successes[started_in][p] += 1
                i += 1

    thread = threading.Thread(target=produce)
    thread.start()
    assert wait_until(lambda: len(acked[0]) >= 2000)
    os.kill(processes.nodes[victim].pid, signal.SIGKILL)
    processes.nodes[victim].process.wait()
    phase[0] = "killed"
    # The other node keeps serving while the victim is down.
    others = [p for p, leader in leaders.items() if leader != victim]
    assert wait_until(lambda: all(successes["killed"][p] >= 20 for p in others))
    assert wait_until(lambda: errors[0] > 0)
    # On a port of its own: its old one may be another test's by now.
    processes.start_node(victim, "127.0.0.1:0")
    phase[0] = "restarted"
    # The restarted node takes writes again.
    assert wait_until(lambda: successes["restarted"][0] > 0, 30)
    stop.set()
    thread.join(60)

    for p in range(4):
        stored = read_partition(client, "events", p)
        values = [r.value for r in stored]
        assert [r.offset for r in stored] == list(range(len(stored)))
        # Every acknowledged record is there, in order (an unacknowledged one may be too).
        position = 0
        for value in acked[p]:
            position = values.index(value, position) + 1


def test_gateway_sigkill_and_restart_keeps_topics_placement_and_routing(processes):
    client = processes.client
    processes.admin.create_topic("kept", 3, configs={"retention.ms": "3600000"})
    before = processes.admin.describe_topic("kept")
    for p in range(3):
        client.produce("kept", {p: make_batch([b"before"])})
    processes.gateway.kill()
    processes.restart_gateway()
    after = processes.admin.describe_topic("kept")
    assert [(p.leader, list(p.replicas)) for p in after.partitions] == [
        (p.leader, list(p.replicas)) for p in before.partitions
    ]
    assert dict(after.configs) == {"retention.ms": "3600000"}
    for p in range(3):
        (result,) = client.produce("kept", {p: make_batch([b"after"])})
        assert (result.error, result.base_offset) == (0, 1)
        assert [r.value for r in read_partition(client, "kept", p)] == [b"before", b"after"]


@pytest.mark.long  # a whole make run
@pytest.mark.slow
def test_local_cluster_and_cli(tmp_path):
    runner = subprocess.Popen(
        local_cluster_command(tmp_path / "data"), stdout=subprocess.PIPE, text=True
    )
    try:
        line = runner.stdout.readline()
        address = re.search(r"gateway on (\S+)", line).group(1)
        ok = run_cli(
            "topics",
            "create",
            "lines",
            "--partitions",
            "3",
            "--config",
            "retention.ms=600000",
            bootstrap=address,
        )
        assert ok.returncode == 0, ok.stderr
        assert run_cli("topics", "list", bootstrap=address).stdout.split() == [b"lines"]
        dup = run_cli("topics", "create", "lines", bootstrap=address)
        assert dup.returncode == 1 and b"TOPIC_ALREADY_EXISTS" in dup.stderr

        keyed = b"".join(b"user%d:v%d\n" % (i % 7, i) for i in range(60))
        produced = run_cli(
            "produce", "lines", "--key-separator", ":", bootstrap=address, stdin=keyed
        )
        assert produced.returncode == 0, produced.stderr
        out = run_cli(
            "consume", "lines", "--from-beginning", "--max-messages", "60", bootstrap=address
        )
        assert out.returncode == 0, out.stderr
        rows = [line.split(b"\t") for line in out.stdout.splitlines()]
        assert len(rows) == 60
        for partition, _offset, _ts, key, _value in rows:
            assert int(partition) == partition_for_key(key, 3)  # Kafka's keyed placement
        assert sorted(r[4] for r in rows) == sorted(b"v%d" % i for i in range(60))
        # A consumer group with the gateway's default settings: the first join creates
        # __consumer_offsets (50 partitions over the three nodes), the close commits.
        grouped = run_cli(
            "consume",
            "lines",
            "--group",
            "readers",
            "--from-beginning",
            "--max-messages",
            "60",
            bootstrap=address,
        )
        assert grouped.returncode == 0, grouped.stderr
        assert len(grouped.stdout.splitlines()) == 60
        described = run_cli("groups", "describe", "readers", bootstrap=address).stdout.decode()
        lags = [line.split()[4] for line in described.splitlines()[2:]]
        assert lags == ["0", "0", "0"], described

        run_cli("produce", "lines", "--partition", "1", bootstrap=address, stdin=b"x\ny\nz\n")
        desc = run_cli("topics", "describe", "lines", bootstrap=address).stdout.decode()
        assert "Partition: 1" in desc and "retention.ms=600000" in desc
        end_1 = int(re.search(r"Partition: 1\t.*LogEndOffset: (\d+)", desc).group(1))
        tail = run_cli(
            "consume",
            "lines",
            "--partition",
            "1",
            "--offset",
            str(end_1 - 3),
            "--max-messages",
            "3",
            bootstrap=address,
        )
        assert [r.split(b"\t")[4] for r in tail.stdout.splitlines()] == [b"x", b"y", b"z"]
        later = run_cli(
            "consume",
            "lines",
            "--timestamp",
            str(time.time_ns() // 10**6 + 10**6),
            "--timeout-ms",
            "300",
            bootstrap=address,
        )
        assert later.returncode == 0 and later.stdout == b""
        bad = run_cli("produce", "lines", "--partition", "9", bootstrap=address, stdin=b"x\n")
        assert bad.returncode == 1 and b"partitions 0..2" in bad.stderr

        assert run_cli("topics", "delete", "lines", bootstrap=address).returncode == 0
        assert run_cli("topics", "list", bootstrap=address).stdout == b""
    finally:
        runner.send_signal(signal.SIGTERM)
        runner.wait(60)
    assert runner.returncode == 0
    for node in ("node-1", "node-2", "node-3"):
        assert (tmp_path / "data" / node / ".kafka_cleanshutdown").exists()


class _Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self):
        self.spans = []  # (service name, span)

    def Export(self, request, context):
        for resource_spans in request.resource_spans:
            attrs = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append((attrs.get("service.name"), span))
        return trace_service_pb2.ExportTraceServiceResponse()


def test_processes_export_one_trace_per_call_over_otlp(tmp_path):
    receiver = _Receiver()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(receiver, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    env = {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_EXPORTER_OTLP_INSECURE": "true",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    cluster = ProcessCluster(tmp_path, nodes=1, env=env)
    try:
        cluster.admin.create_topic("traced", 1)
        cluster.client.produce("traced", {0: make_batch([b"hello"])})

        def produce_trace():
            gateway_spans = [
                s
                for svc, s in receiver.spans
                if svc == "seglog-gateway" and s.name == "/seglog.v1.Gateway/Produce"
            ]
            if not gateway_spans:
                return None
            trace_id = gateway_spans[0].trace_id
            return [(svc, s) for svc, s in receiver.spans if s.trace_id == trace_id]

        assert wait_until(
            lambda: (
                produce_trace() and any(s.name == "seglog.log.append" for _, s in produce_trace())
            ),
            30,
        )
        spans = produce_trace()
        services = {svc for svc, _ in spans}
        assert services == {"seglog-gateway", "seglog-storage-node-1"}
        by_id = {s.span_id: s for _, s in spans}
        node_server = next(
            s
            for svc, s in spans
            if svc == "seglog-storage-node-1" and s.name == "/seglog.v1.StorageNode/Append"
        )
        gateway_client = by_id[node_server.parent_span_id]
        assert gateway_client.name == "/seglog.v1.StorageNode/Append"
        assert not any("Health" in s.name for _, s in receiver.spans)
    finally:
        cluster.close()
        server.stop(0)


def test_acks0_through_the_gateway_is_bounded_while_a_leader_hangs(tmp_path):
    # A long session timeout: the stopped node stays the routed leader during the test.
    cluster = ProcessCluster(
        tmp_path,
        nodes=1,
        gateway_args=[
            "--session-timeout-ms",
            "60000",
            "--max-unacknowledged-bytes",
            str(2 * 1024 * 1024),
        ],
    )
    node = cluster.nodes[1]
    try:
        cluster.admin.create_topic("t", 1)
        payload = make_batch([os.urandom(100_000)] * 6)  # ~600 KB
        os.kill(node.pid, signal.SIGSTOP)
        accepted = 0
        with pytest.raises(SeglogError, match="still unanswered") as caught:
            for _ in range(20):
                cluster.client.produce("t", {0: payload}, acks=0, timeout_ms=120_000)
                accepted += 1
        assert caught.value.retriable and accepted == 3  # 3 x 600 KB fit in 2 MiB, 4 do not
        os.kill(node.pid, signal.SIGCONT)
        # Once the node answers what it held, the gateway takes acks=0 produce again.
        assert wait_until(lambda: _acks0_accepted(cluster.client, payload), timeout_s=30)
    finally:
        os.kill(node.pid, signal.SIGCONT)
        cluster.close()


def _acks0_accepted(client, payload):
    try:
        client.produce("t", {0: payload}, acks=0)
        return True
    except SeglogError:
        return False


def _produce_outcomes(client, topic, partitions):
    """partition -> None when a record was stored, else the error's message."""
    out = {}
    for p in range(partitions):
        try:
            (result,) = client.produce(topic, {p: make_batch([b"v"])})
            out[p] = None if result.error == 0 else result.error_message
        except SeglogError as exc:
            out[p] = str(exc)
    return out


def test_a_node_out_of_file_descriptors_keeps_heartbeating_and_serving(tmp_path):
    # A real EMFILE: the node's open-file limit is lowered under it, then a topic asks for
    # more partitions than it can open. Partitions that cannot open go offline with the
    # reason; the registry session, the node and the partitions it holds go on, and the
    # offline ones come back once descriptors are available again.
    import resource

    cluster = ProcessCluster(tmp_path, nodes=1)
    try:
        node = cluster.nodes[1]
        in_use = len(os.listdir(f"/proc/{node.pid}/fd"))
        _, hard = resource.prlimit(node.pid, resource.RLIMIT_NOFILE)
        # A partition costs one descriptor (its active .log), so 30 cannot fit in 15.
        resource.prlimit(node.pid, resource.RLIMIT_NOFILE, (in_use + 15, hard))
        cluster.admin.create_topic("crowded", 30)

        def settled():
            outcomes = _produce_outcomes(cluster.client, "crowded", 30)
            return outcomes if any(v and "open files" in v for v in outcomes.values()) else None

        assert wait_until(settled, timeout_s=30)
        outcomes = settled()
        assert any(v is None for v in outcomes.values())  # the partitions it opened serve
        (described,) = cluster.admin.describe_cluster().nodes
        assert described.live
        # Only a registry session still reconciling after EMFILE brings them back.
        resource.prlimit(node.pid, resource.RLIMIT_NOFILE, (hard, hard))

        def all_served():
            outcomes = _produce_outcomes(cluster.client, "crowded", 30)
            return all(v is None for v in outcomes.values())

        assert wait_until(all_served, timeout_s=30)
    finally:
        cluster.close()
