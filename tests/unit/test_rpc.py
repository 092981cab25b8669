import socket
import threading

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from seglog import errors
from seglog.client.partitioner import KeyPartitioner, murmur2, partition_for_key
from seglog.rpc import wire
from seglog.rpc.channels import channel_options, channel_target
from seglog.rpc.status import error_code_for, error_from_code, status_code_for, to_rpc_status
from seglog.v1 import common_pb2

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)


@given(
    topic=st.text(max_size=40),
    partition=INT32,
    error=st.sampled_from(common_pb2.ErrorCode.values()),
    message=st.text(max_size=60),
    high_watermark=INT64,
    log_start_offset=INT64,
    records=st.binary(max_size=300),
    diverging_epoch=st.one_of(st.none(), st.integers(min_value=-(2**31), max_value=2**31 - 1)),
    diverging_end_offset=INT64,
    segment_base_offset=INT64,
)
def test_fetch_response_wire_bytes_equal_protobuf_serialization(
    topic,
    partition,
    error,
    message,
    high_watermark,
    log_start_offset,
    records,
    diverging_epoch,
    diverging_end_offset,
    segment_base_offset,
):
    fields = dict(
        topic=topic,
        partition=partition,
        error=error,
        error_message=message,
        high_watermark=high_watermark,
        log_start_offset=log_start_offset,
        records=records,
        diverging_end_offset=diverging_end_offset,
        segment_base_offset=segment_base_offset,
    )
    if diverging_epoch is not None:
        fields["diverging_epoch"] = diverging_epoch
    expected = common_pb2.FetchResponse(**fields).SerializeToString()
    suffix = wire.fetch_response_suffix(diverging_epoch, diverging_end_offset, segment_base_offset)
    encoded = wire.encode_fetch_response(
        topic, partition, high_watermark, log_start_offset, records, error, message, suffix=suffix
    )
    assert encoded == expected
    assert common_pb2.FetchResponse.FromString(encoded) == common_pb2.FetchResponse(**fields)


_BATCHES = st.lists(st.binary(max_size=40), max_size=3)


@given(
    st.text(max_size=20),
    st.sampled_from([-1, 0, 1]),
    st.integers(min_value=0, max_value=2**31 - 1),
    st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=2**31 - 1),
            st.integers(min_value=-(2**31), max_value=2**31 - 1),
            _BATCHES,
        ),
        max_size=4,
    ),
    st.one_of(st.none(), st.text(max_size=300)),
)
def test_produce_request_wire_bytes_equal_protobuf_serialization(
    topic, acks, timeout_ms, partitions, transactional_id
):
    expected = common_pb2.ProduceRequest(topic=topic, acks=acks, timeout_ms=timeout_ms)
    for partition, epoch, batches in partitions:
        expected.partitions.add(
            partition=partition, records=b"".join(batches), current_leader_epoch=epoch
        )
    if transactional_id is not None:
        expected.transactional_id = transactional_id
    batches_as_views = [(p, e, [memoryview(b) for b in bs]) for p, e, bs in partitions]
    encoded = wire.encode_produce_request(
        topic, acks, timeout_ms, batches_as_views, transactional_id=transactional_id
    )
    assert encoded == expected.SerializeToString()
    assert common_pb2.ProduceRequest.FromString(encoded) == expected
    # The gateway's routing scan reads the same fields without copying the records.
    scanned = wire.scan_produce_request(encoded)
    assert (scanned.topic, scanned.acks, scanned.timeout_ms) == (topic, acks, timeout_ms)
    assert scanned.transactional_id == transactional_id
    assert wire.produce_topic(encoded) == topic
    assert [
        (p.partition, bytes(p.records), p.current_leader_epoch) for p in scanned.partitions
    ] == [(p.partition, p.records, p.current_leader_epoch) for p in expected.partitions]


def test_the_routing_scan_refuses_malformed_requests():
    good = common_pb2.ProduceRequest(topic="t", acks=1)
    good.partitions.add(partition=3, records=b"x" * 10)
    data = good.SerializeToString()
    for broken in (
        data[:-3],
        data + b"\x12\x7f",
        b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
        data + b"\x29\x00\x00",  # field 5 fixed64, cut short
        b"\x00\x00" + data,  # field number 0
    ):
        with pytest.raises(ValueError):
            wire.scan_produce_request(broken)


@st.composite
def _mutated_produce_requests(draw: st.DrawFn) -> bytes:
    """A well-formed ProduceRequest, then cut, a byte changed, or bytes inserted."""
    request = common_pb2.ProduceRequest(
        topic=draw(st.text(max_size=8)), acks=draw(st.sampled_from([-1, 0, 1, 7]))
    )
    for partition in draw(st.lists(st.integers(0, 300), max_size=3)):
        data = request.partitions.add(partition=partition, records=draw(st.binary(max_size=20)))
        if draw(st.booleans()):
            data.current_leader_epoch = draw(INT32)
    encoded = bytearray(request.SerializeToString())
    for _ in range(draw(st.integers(0, 3))):
        position = draw(st.integers(0, len(encoded)))
        kind = draw(st.sampled_from(["cut", "change", "insert"]))
        if kind == "cut":
            del encoded[position:]
        elif kind == "change" and position < len(encoded):
            encoded[position] = draw(st.integers(0, 255))
        else:
            encoded[position:position] = draw(st.binary(min_size=1, max_size=4))
    return bytes(encoded)


@given(_mutated_produce_requests())
def test_the_scan_accepts_nothing_protobuf_refuses_and_reads_what_it_reads(raw):
    """The node appends what the scan reads (it parses no message): whatever the scan
    accepts, protobuf's parser accepts too, with the same fields."""
    try:
        scanned = wire.scan_produce_request(raw)
    except ValueError:
        return  # refused: the node answers INVALID_ARGUMENT
    parsed = common_pb2.ProduceRequest.FromString(raw)
    assert (scanned.topic, scanned.acks, scanned.timeout_ms) == (
        parsed.topic,
        parsed.acks,
        parsed.timeout_ms,
    )
    assert [
        (p.partition, bytes(p.records), p.current_leader_epoch) for p in scanned.partitions
    ] == [
        (
            p.partition,
            p.records,
            p.current_leader_epoch if p.HasField("current_leader_epoch") else None,
        )
        for p in parsed.partitions
    ]


def test_every_reason_code_has_an_error_class_and_a_status():
    for name, value in common_pb2.ErrorCode.items():
        if name == "NONE":
            continue
        error = error_from_code(value, "boom")
        assert error.reason == name, name
        assert error_code_for(error) == value
        if name != "UNKNOWN":
            assert status_code_for(error) != grpc.StatusCode.INTERNAL or name == "CORRUPT_INDEX"
    # ...and every error class's reason is a proto code.
    codes = set(common_pb2.ErrorCode.keys())
    for reason in errors.error_classes():
        assert reason in codes


def test_status_details_carry_reason_and_retriable():
    status = to_rpc_status(errors.LeaderNotAvailableError("node 3 is down"))
    assert status.code == grpc.StatusCode.UNAVAILABLE
    assert status.details == "node 3 is down"
    ((key, value),) = status.trailing_metadata
    assert key == "grpc-status-details-bin"
    assert b"LEADER_NOT_AVAILABLE" in value and b"retriable" in value


def test_not_coordinator_names_the_coordinator_across_the_wire():
    """The address travels in the ErrorInfo's metadata and comes back on the client's error,
    through a real server and channel."""
    from concurrent import futures

    from seglog.rpc.status import abort, error_from_rpc

    def refuse(request, context):
        abort(context, errors.NotCoordinatorError("ask elsewhere", coordinator="10.0.0.9:7070"))

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    handler = grpc.unary_unary_rpc_method_handler(refuse)
    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler("t.T", {"Call": handler})]
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.unary_unary("/t.T/Call")
            try:
                call(b"", timeout=5)
            except grpc.RpcError as exc:
                error = error_from_rpc(exc)
            else:
                raise AssertionError("the call succeeded")
    finally:
        server.stop(0)
    assert isinstance(error, errors.NotCoordinatorError)
    assert error.coordinator == "10.0.0.9:7070" and error.retriable


def test_a_call_past_the_servers_concurrent_rpc_limit_is_retriable_server_busy():
    """gRPC refuses a call past maximum_concurrent_rpcs with a bare RESOURCE_EXHAUSTED (no
    ErrorInfo): clients must back off and retry it, not take it for a request too large."""
    import threading
    from concurrent import futures

    from seglog.rpc.status import error_from_rpc

    entered, release = threading.Event(), threading.Event()

    def hold(request, context):
        entered.set()
        release.wait(30)
        return b""

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), maximum_concurrent_rpcs=1)
    handler = grpc.unary_unary_rpc_method_handler(hold)
    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler("t.T", {"Call": handler})]
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.unary_unary("/t.T/Call")
            held = call.future(b"", timeout=30)
            assert entered.wait(30)
            try:
                call(b"", timeout=30)
            except grpc.RpcError as exc:
                error = error_from_rpc(exc)
            else:
                raise AssertionError("the call past the limit succeeded")
            release.set()
            assert held.result() == b""
            assert call(b"", timeout=30) == b""  # room again once the first one ended
    finally:
        release.set()
        server.stop(0)
    assert isinstance(error, errors.ServerBusyError) and error.retriable


KAFKA_MURMUR2_VECTORS = {
    # Kafka's UtilsTest.testMurmur2
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def test_murmur2_matches_kafka_test_vectors():
    for data, expected in KAFKA_MURMUR2_VECTORS.items():
        assert murmur2(data) == expected


@given(st.lists(st.binary(max_size=24), min_size=1, max_size=40), st.integers(1, 500))
def test_key_partitioner_remembers_keys_without_changing_their_partitions(keys, partitions):
    partitioner = KeyPartitioner(max_keys=8)  # small: the memory starts over mid-list
    for _ in range(2):
        for key in keys:
            assert partitioner.partition(key, partitions) == partition_for_key(key, partitions)
            assert partitioner.partition(key, 7) == partition_for_key(key, 7)


@given(st.binary(max_size=64), st.integers(1, 500))
def test_partition_for_key_matches_kafka_python(key, partitions):
    assert murmur2(key) & 0xFFFFFFFF == kafka_python_murmur2(key)
    assert (
        partition_for_key(key, partitions) == (kafka_python_murmur2(key) & 0x7FFFFFFF) % partitions
    )


def test_several_addresses_become_one_target_that_fails_over():
    assert channel_target("10.0.0.1", 7070) == "10.0.0.1:7070"
    assert channel_target("gw.example:7071", 7070) == "gw.example:7071"
    assert channel_target("[::1]", 7070) == "[::1]:7070"
    assert channel_target("unix:/tmp/s", 7070) == "unix:/tmp/s"
    assert channel_target("127.0.0.1:1, 127.0.0.2", 7070) == "ipv4:127.0.0.1:1,127.0.0.2:7070"
    assert channel_target("[::1]:5,[::2]:6", 7070) == "ipv6:[::1]:5,[::2]:6"
    # A name resolves once (here to loopback); an unresolvable one is skipped; none: an error.
    assert "127.0.0.1:9" in channel_target("localhost:9,no-such-host.invalid:9", 7070)
    with pytest.raises(ValueError, match="resolves"):
        channel_target("no-such-host.invalid:1,also-not.invalid:2", 7070)


def test_a_connection_is_given_time_to_finish_its_handshake():
    # A server that accepts but is slow to send its HTTP/2 SETTINGS (here: never) is given
    # the connection setup timeout, not the 50 ms reconnect backoff: the call runs to its
    # own deadline instead of failing UNAVAILABLE at once, as it did under load.
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: accepted.append(listener.accept()[0]), daemon=True).start()
    port = listener.getsockname()[1]
    channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=channel_options())
    try:
        with pytest.raises(grpc.RpcError) as raised:
            channel.unary_unary("/seglog.v1.Probe/Call")(b"", timeout=2)
        assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED, raised.value
        assert len(accepted) == 1
    finally:
        channel.close()
        for conn in accepted:
            conn.close()
        listener.close()
