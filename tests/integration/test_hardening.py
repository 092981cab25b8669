"""One request must not kill a node or a cluster: names, limits, internal topics, the storage
node's own API, and partitions that cannot be opened."""

from __future__ import annotations

import threading

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from seglog.errors import (
    InvalidPartitionsError,
    InvalidRequestError,
    InvalidTopicError,
    SeglogError,
    StorageError,
)
from seglog.rpc import MAX_REQUEST_ENTRIES
from seglog.rpc.status import error_from_code, error_from_rpc
from seglog.storage import log_files
from seglog.v1 import (
    common_pb2,
    gateway_pb2,
    gateway_pb2_grpc,
    groups_pb2,
    groups_pb2_grpc,
    storage_pb2,
    storage_pb2_grpc,
)
from tests.batches import make_batch
from tests.cluster import SESSION_TIMEOUT_MS, LocalCluster
from tests.waiting import wait_until


@pytest.fixture
def small_cluster(tmp_path):
    c = LocalCluster(tmp_path, nodes=1, max_partitions_per_topic=8, max_partitions=12)
    yield c
    c.close()


def _produce(cluster, topic, partition, values):
    (result,) = cluster.client.produce(topic, {partition: make_batch(values)})
    return result


def test_topic_names_must_leave_room_for_every_directory_the_node_makes(cluster):
    longest = 255 - len("-0") - log_files.LONGEST_DIRECTORY_SUFFIX
    cluster.admin.create_topic("a" * longest, 1)
    with pytest.raises(InvalidTopicError, match="over the filesystem's 255"):
        cluster.admin.create_topic("b" * (longest + 1), 1)
    # Eleven partitions (0..10) need one more digit in the directory name.
    with pytest.raises(InvalidTopicError, match="at most"):
        cluster.admin.create_topic("c" * longest, 11)
    with pytest.raises(InvalidTopicError, match="illegal"):
        cluster.admin.create_topic("d" * 250, 1)
    assert _produce(cluster, "a" * longest, 0, [b"x"]).base_offset == 0


def test_partition_counts_are_bounded_per_topic_and_per_cluster(small_cluster):
    with pytest.raises(InvalidPartitionsError, match=r"\[1, 8\]"):
        small_cluster.admin.create_topic("huge", 2**31 - 1)
    small_cluster.admin.create_topic("eight", 8)
    with pytest.raises(InvalidPartitionsError, match="over its limit of 12"):
        small_cluster.admin.create_topic("five", 5)
    small_cluster.admin.create_topic("four", 4)
    assert sorted(t.name for t in small_cluster.client.list_topics()) == ["eight", "four"]


def test_clients_cannot_create_delete_or_produce_into_internal_topics(cluster):
    with pytest.raises(InvalidTopicError, match="reserved for internal topics"):
        cluster.admin.create_topic("__mine", 1)
    cluster.gateway.topic_admin.create_internal_topic("__consumer_offsets", 1, {})
    with pytest.raises(InvalidTopicError, match="internal"):
        cluster.admin.delete_topic("__consumer_offsets")
    with pytest.raises(InvalidTopicError, match="only the cluster itself writes it"):
        cluster.client.produce("__consumer_offsets", {0: make_batch([b"forged"])})
    assert cluster.log("__consumer_offsets", 0).log_end_offset == 0


def test_the_storage_node_api_refuses_paths_outside_its_data_dir(cluster, tmp_path):
    node = cluster.nodes[1]
    outside = tmp_path / "precious-0"
    outside.mkdir()
    (outside / "keep").write_bytes(b"x")
    with grpc.insecure_channel(node.address) as channel:
        stub = storage_pb2_grpc.StorageNodeStub(channel)
        for call, request in [
            (
                stub.DeletePartition,
                storage_pb2.DeletePartitionRequest(topic="../precious", partition=0),
            ),
            (
                stub.UpdatePartitions,
                gateway_pb2.NodeAssignment(
                    partitions=[gateway_pb2.AssignedPartition(topic="../escaped", leader=1)]
                ),
            ),
            (
                stub.UpdatePartitions,
                gateway_pb2.NodeAssignment(
                    partitions=[gateway_pb2.AssignedPartition(topic="..", leader=1)]
                ),
            ),
        ]:
            with pytest.raises(grpc.RpcError) as caught:
                call(request, timeout=10)
            assert isinstance(error_from_rpc(caught.value), InvalidTopicError)
    assert (outside / "keep").exists()
    assert not (tmp_path / "escaped-0").exists()


def test_a_partition_that_cannot_be_created_goes_offline_and_the_node_keeps_serving(tmp_path):
    cluster = LocalCluster(tmp_path, nodes=1)
    try:
        node = cluster.nodes[1]
        # A plain file where the partition's directory must go: a real OSError on create.
        (node.config.data_dir / "t-0").write_bytes(b"in the way")
        cluster.admin.create_topic("t", 2)
        assert _produce(cluster, "t", 1, [b"fine"]).base_offset == 0
        assert wait_until(lambda: "t-0" in _offline_reason(cluster, 1))
        # A retriable KAFKA_STORAGE_ERROR that names the partition and the reason.
        with pytest.raises(StorageError, match="t-0 is offline on node 1: .*File exists") as e:
            _produce(cluster, "t", 0, [b"lost?"])
        assert e.value.retriable
        # The session outlives the failure: heartbeats go on past several session timeouts.
        before = cluster.gateway.registry.nodes[1].last_heartbeat
        assert wait_until(lambda: cluster.gateway.registry.nodes[1].last_heartbeat != before)
        assert cluster.gateway.registry.is_live(1)
        # Once the obstacle is gone the next heartbeat brings the partition online.
        (node.config.data_dir / "t-0").unlink()
        assert wait_until(lambda: "t-0" not in _offline_reason(cluster, 1))
        assert _produce(cluster, "t", 0, [b"back"]).base_offset == 0
    finally:
        cluster.close()


def test_a_node_restarts_with_an_unopenable_partition_on_disk_and_serves_the_rest(tmp_path):
    cluster = LocalCluster(tmp_path, nodes=1)
    try:
        cluster.admin.create_topic("t", 2)
        for partition in (0, 1):
            assert _produce(cluster, "t", partition, [b"a", b"b"]).error == 0
        data_dir = cluster.nodes[1].config.data_dir
        cluster.stop_node(1)
        segment = data_dir / "t-0" / "00000000000000000000.log"
        segment.unlink()
        segment.mkdir()  # a directory where the segment file was: open() fails
        node = cluster.start_node(1)
        with pytest.raises(StorageError, match="offline"):
            node.logs.get_log("t", 0)
        assert node.logs.get_log("t", 1).log_end_offset == 2
        assert wait_until(lambda: "t-0" in _offline_reason(cluster, 1))
        assert _produce(cluster, "t", 1, [b"c"]).base_offset == 2
        assert SESSION_TIMEOUT_MS > 0 and cluster.gateway.registry.is_live(1)
    finally:
        cluster.close()


def _offline_reason(cluster, node_id: int) -> str:
    node = cluster.gateway.registry.nodes.get(node_id)
    return " ".join(f"{t}-{p}: {r}" for (t, p), r in (node.offline if node else {}).items())


# -- whole-request bounds -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [("max_wait_ms", -1), ("max_wait_ms", 10**9), ("min_bytes", -5), ("max_bytes", -1)],
)
def test_fetch_fields_out_of_range_are_invalid_argument_at_gateway_and_node(cluster, field, value):
    cluster.admin.create_topic("t", 1)
    request = common_pb2.FetchRequest(max_wait_ms=100, min_bytes=1, max_bytes=1 << 20)
    setattr(request, field, value)
    request.partitions.add(topic="t", partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
    node_address = cluster.leader_of("t", 0).address
    for address, stub_class in [
        (cluster.address, gateway_pb2_grpc.GatewayStub),
        (node_address, storage_pb2_grpc.StorageNodeStub),
    ]:
        with grpc.insecure_channel(address) as channel, pytest.raises(grpc.RpcError) as caught:
            list(stub_class(channel).Fetch(request, timeout=10))
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert field in caught.value.details()


def test_a_negative_produce_timeout_is_invalid_not_a_retriable_deadline(cluster):
    cluster.admin.create_topic("t", 1)
    with pytest.raises(InvalidRequestError, match="timeout_ms -1 is negative") as caught:
        cluster.client.produce("t", {0: make_batch([b"x"])}, timeout_ms=-1)
    assert not caught.value.retriable
    assert cluster.log("t", 0).log_end_offset == 0


def test_group_ids_metadata_and_committed_offsets_are_checked(cluster):
    cluster.admin.create_topic("t", 1)
    with grpc.insecure_channel(cluster.address) as channel:
        groups = groups_pb2_grpc.GroupCoordinatorStub(channel)
        huge_id = "g" * 40_000
        joined = groups.JoinGroup(
            groups_pb2.JoinGroupRequest(
                group_id=huge_id,
                topics=["t"],
                session_timeout_ms=10_000,
                rebalance_timeout_ms=1000,
                assignment_strategies=["range"],
            ),
            timeout=10,
        )
        assert common_pb2.ErrorCode.Name(joined.error) == "INVALID_GROUP_ID"
        commit = groups_pb2.CommitOffsetsRequest(group_id="g", generation_id=-1)
        commit.offsets.add(topic="t", partition=0, offset=-7)
        commit.offsets.add(topic="t", partition=0, offset=3, metadata="m" * 5000)
        answer = groups.CommitOffsets(commit, timeout=10)
        reasons = [common_pb2.ErrorCode.Name(r.error) for r in answer.partitions]
        assert reasons == ["INVALID_OFFSET", "OFFSET_METADATA_TOO_LARGE"]
        assert "4096" in answer.partitions[1].error_message
        fetched = groups.FetchOffsets(groups_pb2.FetchOffsetsRequest(group_id="g"), timeout=10)
        assert list(fetched.offsets) == []  # nothing was written
        too_big = groups_pb2.CommitOffsetsRequest(group_id=huge_id, generation_id=-1)
        too_big.offsets.add(topic="t", partition=0, offset=1)
        answer = groups.CommitOffsets(too_big, timeout=10)
        assert common_pb2.ErrorCode.Name(answer.error) == "INVALID_GROUP_ID"


# -- resources stay bounded under load ----------------------------------------------------


@pytest.mark.parametrize("relay", [False, True], ids=["grpc", "bulk-relay"])
def test_idle_long_polls_cannot_freeze_a_node_or_the_gateway_and_cancelling_releases_them(
    tmp_path, relay
):
    """Over gRPC, the node bounds its waiting fetches itself; over the gateway's relay, each
    waits on a connection of the gateway's pool, bounded by the gateway's own waiting slots,
    on a thread of the node's bulk listener, away from its gRPC threads."""
    cluster = LocalCluster(tmp_path, nodes=3, bulk_fetch_relay_enable=relay)
    try:
        _idle_long_polls(cluster, relay)
    finally:
        cluster.close()


def _idle_long_polls(cluster, relay: bool) -> None:
    cluster.admin.create_topic("idle", 1)
    node = cluster.leader_of("idle", 0)
    pool = cluster.gateway.service.fetch_relay.pool if relay else None

    def waiting_on_node() -> int:
        if pool is None:
            return node.service.waiting_fetches.in_use
        opened, idle = pool.open_connections(node.config.node_id)
        return opened - idle

    request = common_pb2.FetchRequest(max_wait_ms=60_000, min_bytes=1 << 20, max_bytes=1 << 20)
    request.partitions.add(topic="idle", partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
    channel = grpc.insecure_channel(cluster.address)
    try:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        calls = [stub.Fetch(request, timeout=120) for _ in range(40)]
        answered: list[int] = []
        busy: list[int] = []

        def read(call) -> None:
            try:
                for _ in call:
                    pass
                answered.append(1)
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    busy.append(1)  # SERVER_BUSY: fetches hold their share of threads
                # else: cancelled below

        readers = [threading.Thread(target=read, args=(call,), daemon=True) for call in calls]
        for reader in readers:
            reader.start()
        gateway_slots = cluster.gateway.service.waiting_fetches
        assert wait_until(lambda: gateway_slots.in_use == gateway_slots.limit)
        assert wait_until(lambda: waiting_on_node() == gateway_slots.limit)
        # Past the bound, fetches answer at once (here: nothing to read) instead of waiting,
        # or, past the fetches' share of the gateway's threads, are refused retriably.
        assert wait_until(lambda: len(answered) + len(busy) == 40 - gateway_slots.limit)
        # Appends, health checks and node heartbeats still find threads.
        assert _produce(cluster, "idle", 0, [b"still served"]).base_offset == 0
        for address in (cluster.address, node.address):
            with grpc.insecure_channel(address) as probe:
                health = health_pb2_grpc.HealthStub(probe).Check(
                    health_pb2.HealthCheckRequest(), timeout=5
                )
                assert health.status == health_pb2.HealthCheckResponse.SERVING
        assert cluster.gateway.registry.is_live(node.config.node_id)
        for call in calls:
            call.cancel()
        for reader in readers:
            reader.join(10)
        # Cancelled calls give their waits back at once, not when max_wait_ms runs out.
        assert wait_until(lambda: gateway_slots.in_use == 0, timeout_s=10)
        assert wait_until(lambda: waiting_on_node() == 0, timeout_s=10)
    finally:
        channel.close()


def test_min_bytes_is_counted_from_file_positions_across_segments(tmp_path):
    from seglog.storage import Log, LogConfig

    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=4096))
    try:
        sizes = []
        for _ in range(10):
            records = make_batch([bytes(900)] * 2)
            sizes.append(len(records))
            log.append(records)
        assert len(log.segments) > 2
        first = log.bytes_from(0)
        assert first.available_bytes == sum(sizes) == log.size_in_bytes
        middle = log.bytes_from(7)  # the batch holding offset 7 starts at offset 6
        assert middle.available_bytes == sum(sizes[3:])
        assert log.bytes_from(7, middle) == middle  # the hint skips the lookup
        assert log.bytes_from(log.log_end_offset).available_bytes == 0
    finally:
        log.close()


def test_the_gateway_and_the_nodes_judge_a_split_request_by_the_same_rules(tmp_path):
    # The nodes run with a larger max.message.bytes than the engine's default: a batch they
    # accept must not be refused by the gateway's own idea of the limit, and a malformed
    # batch in any part of a request split across nodes still fails it whole.
    cluster = LocalCluster(tmp_path, nodes=0)
    try:
        for node_id in (1, 2):
            cluster.start_node(node_id, **{"max.message.bytes": str(3 * 1024 * 1024)})
        cluster.admin.create_topic("large", 2)
        leaders = {cluster.gateway.registry.route("large", p).leader for p in (0, 1)}
        assert leaders == {1, 2}
        big = make_batch([b"x" * (2 * 1024 * 1024)])
        results = cluster.client.produce("large", {0: big, 1: make_batch([b"small"])})
        assert [r.error for r in results] == [0, 0]
        broken = bytearray(make_batch([b"y"]))
        broken[-1] ^= 0xFF
        with pytest.raises(SeglogError, match="CRC"):
            results = cluster.client.produce("large", {0: make_batch([b"z"]), 1: bytes(broken)})
            for r in results:
                if r.error:
                    raise error_from_code(r.error, r.error_message)
        assert cluster.log("large", 0).log_end_offset == 1  # nothing of it was written
    finally:
        cluster.close()


def test_requests_naming_too_many_entries_are_refused_before_any_work(cluster):
    """A request naming more than MAX_REQUEST_ENTRIES partitions or topics is refused whole
    with INVALID_REQUEST, before the gateway looks anything up (a million entries once cost a
    gateway 600-800 MB to answer); one at the limit's side is served."""
    cluster.admin.create_topic("listed", 1)
    too_many = MAX_REQUEST_ENTRIES + 1
    stub = cluster.client._stub
    groups = groups_pb2_grpc.GroupCoordinatorStub(cluster.client._channel)
    list_offsets = common_pb2.ListOffsetsRequest()
    list_offsets.partitions.extend(
        common_pb2.ListOffsetsPartition(topic="listed", partition=0, timestamp=-1)
        for _ in range(too_many)
    )
    fetch_offsets = groups_pb2.FetchOffsetsRequest(group_id="g")
    fetch_offsets.partitions.add(topic="listed", partitions=[0] * too_many)
    fetch = common_pb2.FetchRequest(max_wait_ms=0, max_bytes=1 << 20)
    fetch.partitions.extend(
        common_pb2.FetchPartition(topic="listed", partition=0, partition_max_bytes=1)
        for _ in range(too_many)
    )
    refused = [
        lambda: stub.ListOffsets(list_offsets, timeout=30),
        lambda: groups.FetchOffsets(fetch_offsets, timeout=30),
        lambda: stub.DescribeTopics(
            gateway_pb2.DescribeTopicsRequest(names=["listed"] * too_many), timeout=30
        ),
        lambda: list(stub.Fetch(fetch, timeout=30)),
    ]
    for call in refused:
        with pytest.raises(grpc.RpcError) as denied:
            call()
        error = error_from_rpc(denied.value)
        assert isinstance(error, InvalidRequestError), error
        assert f"at most {MAX_REQUEST_ENTRIES}" in str(error)
    assert cluster.client.list_offsets("listed", {0: -1})[0].error == 0
