"""Every RPC of every service (the gateway's Gateway, GroupCoordinator, TransactionCoordinator
and Registry, the storage node's StorageNode) fed requests built by hypothesis from the .proto
descriptors (tests/proto_strategies.py), against a real gateway and real nodes, no TLS; the
authorizer off, and on with every operation allowed (so every call still reaches its handler,
after the authorizer has read the request too). No answer may be UNKNOWN or INTERNAL —
malformed input is INVALID_ARGUMENT or the method's own error — no server thread dies of one,
and the server answers a good request after each one. Derandomized with a bounded number of
examples per method, so CI runs the same few hundred requests every time."""

from __future__ import annotations

import os
from collections.abc import Iterator

import grpc
import pytest
from google.protobuf import message_factory
from google.protobuf.descriptor import MethodDescriptor
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog.rpc import wire
from seglog.rpc.wire import encode_uvarint
from seglog.v1 import (
    common_pb2,
    gateway_pb2,
    groups_pb2,
    storage_pb2,
    storage_pb2_grpc,
    transactions_pb2,
)
from tests.authorizer_modes import AUTHORIZER_MODES, Grant, cluster_in_mode
from tests.batches import make_batch
from tests.cluster import LocalCluster
from tests.proto_strategies import Known, messages

# A request that kills a server's thread (a replica fetcher handed a bad address) breaks the
# server as surely as a crash: the thread's exception fails the test that sent it.
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")

TOPIC = "fuzz"
GROUP = "fuzz-group"
BATCH_TIMESTAMP_MS = 1_700_000_000_000  # fixed: the same examples on every run
# Names that exist and record batches that are valid (one plain, one gzip with a key and a
# header), so some requests reach real partitions and groups and get past a first look.
KNOWN = Known(
    names=(TOPIC, GROUP, "fuzz-member"),
    payloads=(
        make_batch([b"a", b"b"], timestamp_ms=BATCH_TIMESTAMP_MS),
        make_batch(
            [b"c"],
            keys=[b"k"],
            headers=[("h", b"v")],
            compression=1,
            timestamp_ms=BATCH_TIMESTAMP_MS,
        ),
    ),
)
# CI's bound: ~400 requests in all, ~20 s. A deeper local search: SEGLOG_FUZZ_EXAMPLES=200.
EXAMPLES_PER_METHOD = int(os.environ.get("SEGLOG_FUZZ_EXAMPLES", "8"))
# Long enough for any handler that answers at once on a loaded machine; methods that may
# wait by design (long polls, rebalances) are allowed to reach it.
CALL_TIMEOUT_S = 8.0
MAY_WAIT = {"Fetch", "JoinGroup", "Produce", "Append"}
FORBIDDEN = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}

# (which server, service descriptor): the gateway's client listener serves Gateway and
# GroupCoordinator, its internal address the Registry, the node its StorageNode.
SERVICES = [
    ("gateway", gateway_pb2.DESCRIPTOR.services_by_name["Gateway"]),
    ("gateway", groups_pb2.DESCRIPTOR.services_by_name["GroupCoordinator"]),
    ("gateway", transactions_pb2.DESCRIPTOR.services_by_name["TransactionCoordinator"]),
    ("registry", gateway_pb2.DESCRIPTOR.services_by_name["Registry"]),
    ("node", storage_pb2.DESCRIPTOR.services_by_name["StorageNode"]),
]
METHODS = [(server, method) for server, service in SERVICES for method in service.methods]


class Servers:
    def __init__(self, cluster: LocalCluster) -> None:
        assert cluster.gateway is not None
        node = cluster.nodes[1]
        self.cluster = cluster
        # The node's Append is fuzzed at the leader of TOPIC-0, so requests get past the
        # leadership check to the bytes.
        self.channels = {
            "gateway": grpc.insecure_channel(cluster.address),
            "registry": grpc.insecure_channel(cluster.gateway.internal_address),
            "node": grpc.insecure_channel(node.address),
            "leader": grpc.insecure_channel(cluster.leader_of(TOPIC, 0).address),
        }

    def call(self, server: str, method: MethodDescriptor, request) -> grpc.StatusCode:
        """The status of one call (streams read to their end)."""
        return self.call_raw(server, method, request.SerializeToString())

    def call_raw(self, server: str, method: MethodDescriptor, request: bytes) -> grpc.StatusCode:
        """The status of one call whose request is these wire bytes."""
        path = f"/{method.containing_service.full_name}/{method.name}"
        response_class = message_factory.GetMessageClass(method.output_type)
        channel = self.channels[server]
        try:
            if method.server_streaming:
                stream = channel.unary_stream(path, response_deserializer=response_class.FromString)
                for _ in stream(request, timeout=CALL_TIMEOUT_S):
                    pass
            else:
                unary = channel.unary_unary(path, response_deserializer=response_class.FromString)
                unary(request, timeout=CALL_TIMEOUT_S)
        except grpc.RpcError as error:
            return error.code()
        return grpc.StatusCode.OK

    def good_call_succeeds(self, server: str) -> None:
        """A well-formed call the same server answers with OK."""
        if server in ("node", "leader"):
            stub_method = storage_pb2.DESCRIPTOR.services_by_name["StorageNode"]
            method = stub_method.methods_by_name["DescribePartitions"]
            request = storage_pb2.DescribePartitionsRequest()
        else:
            service = gateway_pb2.DESCRIPTOR.services_by_name["Gateway"]
            method = service.methods_by_name["ListTopics"]
            request = gateway_pb2.ListTopicsRequest()
        server = "gateway" if server == "registry" else server
        assert self.call(server, method, request) == grpc.StatusCode.OK

    def close(self) -> None:
        for channel in self.channels.values():
            channel.close()


EVERYTHING = (
    Grant("topic", ("All",)),
    Grant("group", ("All",)),
    Grant("cluster", ("All",)),
)


@pytest.fixture(scope="module", params=AUTHORIZER_MODES)
def servers(request, tmp_path_factory) -> Iterator[Servers]:
    cluster = cluster_in_mode(tmp_path_factory.mktemp("fuzz"), request.param, EVERYTHING, nodes=2)
    try:
        cluster.admin.create_topic(TOPIC, 2, 2)
        cluster.client.produce(TOPIC, {0: make_batch([b"a", b"b"])}, acks=-1)
        servers = Servers(cluster)
        yield servers
        servers.close()
    finally:
        cluster.close()


def _field(number: int, value: bytes | int) -> bytes:
    """One protobuf field: length-delimited for bytes, a varint for an int."""
    if isinstance(value, int):
        return encode_uvarint(number << 3) + encode_uvarint(value)
    return encode_uvarint(number << 3 | 2) + encode_uvarint(len(value)) + value


# First in the module, so first on its cluster: the fuzzers below register nodes at addresses
# no client can dial and delete topics, which leaves no cluster for a produce to succeed on.
def test_the_nodes_append_refuses_malformed_bytes_and_writes_nothing(servers: Servers) -> None:
    """The node's Append reads the request's wire bytes itself: every strict prefix of a good
    request, and bytes no protobuf parser accepts, are INVALID_ARGUMENT with nothing written
    (the partition's log end offset unchanged); the good request then appends the client's
    batch as it was sent, read back from the node."""
    topic = "raw-append"  # its own, out of the fuzzers' names
    cluster = servers.cluster
    cluster.admin.create_topic(topic, 1, 2)
    cluster.client.produce(topic, {0: KNOWN.payloads[0]}, acks=-1)  # through the gateway
    log = cluster.log(topic, 0)
    batch = KNOWN.payloads[1]  # gzip: its insides are checked too
    # The records last, so that no cut ends on a whole request: a protobuf message cut after
    # its last field is a shorter message, well-formed (a ProduceRequest cut before `acks`
    # asks for acks=0) - the records carry their own lengths and CRCs.
    entry = _field(1, 0) + _field(3, 2**64 - 1) + _field(2, batch)  # epoch -1: any
    # acks=all: the answer comes once the follower has it, so a consumer's fetch finds it.
    acks_all = _field(3, 2**64 - 1)
    good = _field(1, topic.encode()) + acks_all + _field(4, 5000) + _field(2, entry)
    assert common_pb2.ProduceRequest.FromString(good).partitions[0].records == batch
    bad = [good[:cut] for cut in range(len(good))]
    bad += [
        NOT_UTF8_TOPIC + good,
        good + b"\x80",  # a truncated varint after a whole request
        good + b"\x0f",  # field 1, wire type 7
        b"\x00\x00" + good,  # field number 0
        good.replace(_field(2, entry), _field(2, entry[:-1])),  # the batch one byte short
    ]
    end_before = log.log_end_offset
    with grpc.insecure_channel(cluster.leader_of(topic, 0).address) as channel:
        append = channel.unary_unary(
            "/seglog.v1.StorageNode/Append",
            request_serializer=wire.identity,
            response_deserializer=common_pb2.ProduceResponse.FromString,
        )
        for request in bad:
            with pytest.raises(grpc.RpcError) as refused:
                append(request, timeout=CALL_TIMEOUT_S)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, request
        assert log.log_end_offset == end_before
        [result] = append(good, timeout=CALL_TIMEOUT_S).partitions
        assert (result.error, result.base_offset) == (0, end_before)
        assert log.log_end_offset == end_before + 1
        fetch = common_pb2.FetchRequest(max_wait_ms=0, max_bytes=1 << 20)
        fetch.partitions.add(
            topic=topic, partition=0, fetch_offset=end_before, partition_max_bytes=1 << 20
        )
        [answer] = storage_pb2_grpc.StorageNodeStub(channel).Fetch(fetch, timeout=CALL_TIMEOUT_S)
    stored = answer.records
    # The node rewrote baseOffset and partitionLeaderEpoch only, neither under the CRC.
    assert int.from_bytes(stored[:8], "big") == end_before
    assert (stored[8:12], stored[16:]) == (batch[8:12], batch[16:])


@pytest.mark.parametrize(
    ("server", "method"),
    METHODS,
    ids=[f"{method.containing_service.name}.{method.name}" for _, method in METHODS],
)
@settings(
    max_examples=EXAMPLES_PER_METHOD,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_no_request_breaks_a_handler(servers: Servers, server: str, method, data) -> None:
    request = data.draw(messages(method.input_type, KNOWN), label="request")
    status = servers.call(server, method, request)
    assert status not in FORBIDDEN, f"{method.full_name} answered {status.name}"
    if status == grpc.StatusCode.DEADLINE_EXCEEDED:
        assert method.name in MAY_WAIT, f"{method.full_name} did not answer in time"
    servers.good_call_succeeds(server)


# The gateway takes Produce's and Fetch's requests as wire bytes (it forwards them, reading
# only what it needs), and so does the node's Append (the gateway relays a producer's bytes
# to it): these meet bytes no protobuf serializer would write: cut short, a byte changed, a
# topic that is not UTF-8, noise.
RAW_METHODS = [
    ("gateway", gateway_pb2.DESCRIPTOR.services_by_name["Gateway"].methods_by_name[name])
    for name in ("Produce", "Fetch")
] + [("leader", storage_pb2.DESCRIPTOR.services_by_name["StorageNode"].methods_by_name["Append"])]


def _good_raw_request(method: MethodDescriptor) -> bytes:
    if method.name in ("Produce", "Append"):
        request = common_pb2.ProduceRequest(topic=TOPIC, acks=1, timeout_ms=1000)
        request.partitions.add(partition=0, records=KNOWN.payloads[0])
    else:
        request = common_pb2.FetchRequest(max_wait_ms=0)
        request.partitions.add(topic=TOPIC, partition=0, fetch_offset=0)
    return request.SerializeToString()


NOT_UTF8_TOPIC = b"\x0a\x03\xff\xfe\xfd"  # field 1 (topic), 3 bytes that are not UTF-8


@st.composite
def _raw_requests(draw: st.DrawFn, method: MethodDescriptor) -> bytes:
    good = _good_raw_request(method)
    kind = draw(st.sampled_from(["noise", "cut", "changed", "bad topic"]))
    if kind == "noise":
        return draw(st.binary(max_size=200))
    if kind == "bad topic":
        return NOT_UTF8_TOPIC + draw(st.sampled_from([b"", good]))
    position = draw(st.integers(0, len(good) - 1))
    if kind == "cut":
        return good[:position]
    changed = bytearray(good)
    changed[position] = draw(st.integers(0, 255))
    return bytes(changed)


@pytest.mark.parametrize(("server", "method"), RAW_METHODS, ids=[m.name for _, m in RAW_METHODS])
@settings(
    max_examples=EXAMPLES_PER_METHOD * 3,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(data=st.data())
def test_no_wire_bytes_break_a_raw_handler(servers: Servers, server: str, method, data) -> None:
    request = data.draw(_raw_requests(method), label="request")
    status = servers.call_raw(server, method, request)
    assert status not in FORBIDDEN, f"{method.full_name} answered {status.name}"
    servers.good_call_succeeds(server)
