"""Every API key and version the Kafka listener advertises (its ApiVersions answer, read over
the socket), fed requests built by hypothesis from Kafka's schemas (tests/kafka_strategies.py),
against a real gateway and real nodes, the authorizer off and on (every operation allowed, so
requests still reach their handlers after it has read them); and Produce frames cut short or
with a length changed, byte by byte. Black-box: frames on a socket, answers read back.

Each example: the answer parses as Kafka's answer of that api and version with the request's
correlation id, or the listener closes the connection (Kafka's answer to a malformed request);
no traceback in the cluster's log (nor the one line a handler's unexpected exception is logged
as); the connection, if open, still serves (an ApiVersions sent
behind the request is answered); a new client is served right after (ApiVersions and Metadata:
no thread lost, nothing stuck); and a refused Produce wrote nothing (the log end offsets of the
partitions it was refused for did not move).

Derandomized with a few examples per API (`make test`: the whole file in under a minute);
`make fuzz-kafka EXAMPLES=n` searches deeper (SEGLOG_KAFKA_FUZZ_EXAMPLES)."""

from __future__ import annotations

import logging
import math
import os
import struct
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st
from kafka.protocol.api_header import RequestHeader
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import ProduceRequest

from services.gateway.kafka.api_table import response_class_of
from tests.authorizer_modes import AUTHORIZER_MODES, Grant, cluster_in_mode
from tests.batches import make_batch
from tests.cluster import LocalCluster
from tests.kafka_fuzz_wire import (
    ANSWER_TIMEOUT_S,
    FOLLOW_UP_CORRELATION_ID,
    SIZE,
    Outcome,
    Tracebacks,
    error_codes,
    exchange,
    exchange_queued,
    frame_of,
)
from tests.kafka_strategies import Known, request_classes, requests
from tests.kafka_wire import KafkaWire

# A handler's exception on a thread of its own (a produce's per-topic pool) breaks the listener
# as surely as one on the connection's: it fails the example that caused it.
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")

TOPIC = "fuzz"  # named by every API: the admin APIs may delete it or change its configs
GROUP = "fuzz-group"
# Named by Produce alone: the partitions whose log end offsets say whether a refused produce
# wrote anything (no other API deletes it or its records under the check).
PRODUCE_TOPIC = "fuzz-produce"
PARTITIONS = 2
BATCH_TIMESTAMP_MS = 1_700_000_000_000  # fixed: the same examples on every run
RECORD_SETS = (
    make_batch([b"a", b"b"], timestamp_ms=BATCH_TIMESTAMP_MS),
    make_batch(
        [b"c"], keys=[b"k"], headers=[("h", b"v")], compression=1, timestamp_ms=BATCH_TIMESTAMP_MS
    ),
)
# acks=0 is not drawn: its answer is no answer, and its write lands after the request is
# done with, under the next example's check. Values Kafka refuses (INVALID_REQUIRED_ACKS) are.
PRODUCE_ACKS = (-1, -1, 1, 1, 2, -2)
KNOWN = Known(names=(TOPIC, GROUP, "fuzz-member"), record_sets=RECORD_SETS)
# Produce's topic and partition drawn mostly from those that exist, so that a good share of
# its examples reach an append (whole, cut or changed record sets).
KNOWN_TO_PRODUCE = Known(
    names=(PRODUCE_TOPIC,),
    record_sets=RECORD_SETS,
    fields={
        "acks": PRODUCE_ACKS,
        "name": (PRODUCE_TOPIC, PRODUCE_TOPIC, PRODUCE_TOPIC, "", "no-such-topic", TOPIC),
        "index": (0, 0, 1, 1, -1, PARTITIONS, 2**31 - 1),
    },
)
# CI's bound: 10 examples for each of the 38 advertised APIs (at least 2 per version), in
# each authorizer mode: ~30 s on 2 cores. Deeper:
# make fuzz-kafka.
EXAMPLES_PER_API = int(os.environ.get("SEGLOG_KAFKA_FUZZ_EXAMPLES", "10"))
MIN_EXAMPLES_PER_VERSION = 2
PRODUCE_KEY = 0
CLASSES = request_classes()


@dataclass
class Target:
    cluster: LocalCluster
    tracebacks: Tracebacks
    # api key -> (min version, max version), as the listener's ApiVersions says
    advertised: dict[int, tuple[int, int]] = field(default_factory=dict)
    # (api, outcome) -> examples: how far requests got ("closed", or the answer's error
    # codes), printed at the end of a make fuzz-kafka run (hypothesis's own statistics do not
    # reach the per-version tests inside each api's).
    outcomes: Counter[tuple[str, str]] = field(default_factory=Counter)

    @property
    def address(self) -> str:
        return self.cluster.kafka_address

    def end_offsets(self) -> dict[int, int]:
        return {p: self.cluster.log(PRODUCE_TOPIC, p).log_end_offset for p in range(PARTITIONS)}


# With the authorizer on, every operation is allowed to the fuzzer's principal: each request
# still reaches its handler, after the authorizer has read it too (its names, its resources).
EVERYTHING = (
    Grant("topic", ("All",)),
    Grant("group", ("All",)),
    Grant("cluster", ("All",)),
)


@pytest.fixture(scope="module", params=AUTHORIZER_MODES)
def target(request, tmp_path_factory) -> Iterator[Target]:
    tracebacks = Tracebacks()
    root_logger = logging.getLogger()
    root_logger.addHandler(tracebacks)
    root = tmp_path_factory.mktemp("kafka-fuzz")
    cluster = cluster_in_mode(root, request.param, EVERYTHING, nodes=2)
    try:
        cluster.admin.create_topic(TOPIC, PARTITIONS, 2)
        cluster.admin.create_topic(PRODUCE_TOPIC, PARTITIONS, 2)
        cluster.client.produce(PRODUCE_TOPIC, {0: RECORD_SETS[0]}, acks=-1)
        target = Target(cluster, tracebacks)
        with KafkaWire(cluster.kafka_address) as wire:
            answer = wire.request(ApiVersionsRequest[3](), 3, ApiVersionsResponse)
        target.advertised = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
        yield target
        if os.environ.get("SEGLOG_KAFKA_FUZZ_REPORT"):
            print(f"\nhow far the requests got ({request.param}):")
            for (api, reached), count in sorted(target.outcomes.items()):
                print(f"  {api:<28} {count:>6}  {reached}")
    finally:
        cluster.close()
        root_logger.removeHandler(tracebacks)


def check_outcome(
    target: Target, request_class: Any, version: int, correlation_id: int, outcome: Outcome
) -> Any:
    """The assertions every example ends with; the decoded answer (None if closed)."""
    response = None
    if outcome.answer is not None:
        (answered_id,) = SIZE.unpack_from(outcome.answer)
        assert answered_id == correlation_id
        response = response_class_of(request_class).decode(
            outcome.answer, version=version, header=True
        )
        note(f"answer: {response!r:.2000}")
        reached = f"answered {sorted(error_codes(response))}"
    else:
        note("closed" if outcome.closed else "no answer")
        reached = "closed"
    event(reached)
    target.outcomes[(str(request_class.name).removesuffix("Request"), reached)] += 1
    if outcome.answer is None:
        # Only Produce with acks=0 answers nothing, and it is not drawn.
        assert outcome.closed, "the request was neither answered nor refused"
    tracebacks = target.tracebacks.take()
    assert not tracebacks, "\n\n".join(tracebacks)
    good_client_is_served(target)
    return response


def good_client_is_served(target: Target) -> None:
    """A new client's ApiVersions and Metadata round trip, answered."""
    with KafkaWire(target.address, timeout_s=ANSWER_TIMEOUT_S) as wire:
        wire.request(ApiVersionsRequest[3](), 3, ApiVersionsResponse)
        topic = MetadataRequest.MetadataRequestTopic(topic_id=None, name=PRODUCE_TOPIC)
        metadata = MetadataRequest[9](
            topics=[topic],
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
        answer = wire.request(metadata, 9, MetadataResponse)
        assert [t.error_code for t in answer.topics] == [0]


def refused_partitions(request: Any, response: Any | None) -> set[int]:
    """The PRODUCE_TOPIC partitions a produce was refused for: all when the connection closed."""
    if response is None:
        return set(range(PARTITIONS))
    written = {
        p.index
        for t in response.responses
        if t.name == PRODUCE_TOPIC
        for p in t.partition_responses
        if p.error_code == 0
    }
    return set(range(PARTITIONS)) - written


FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES_PER_API,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def test_every_advertised_api_has_a_schema(target: Target) -> None:
    """The fuzz below covers what the listener advertises: the codec knows every api key of
    it at every advertised version."""
    assert target.advertised, "ApiVersions advertised nothing"
    for api_key, (_, max_version) in target.advertised.items():
        assert api_key in CLASSES, f"api key {api_key} has no schema in the codec"
        assert max_version <= CLASSES[api_key].max_version, api_key


@pytest.mark.parametrize(
    "api_key",
    sorted(CLASSES),
    ids=[CLASSES[k].name.removesuffix("Request") for k in sorted(CLASSES)],
)
def test_no_request_breaks_the_listener(target: Target, api_key: int) -> None:
    """Every advertised version of the api, each its share of EXAMPLES_PER_API (at least
    two): a version's own fields (tagged fields, compact encodings) are where it breaks. An
    api the codec knows and the listener does not advertise is refused as Kafka's broker
    refuses an unknown api key: the connection closed, nothing else touched."""
    if api_key not in target.advertised:
        request_class = CLASSES[api_key]
        for version in (0, request_class.max_version):
            request = request_class[version]()  # every field at its default
            outcome = exchange(target.address, frame_of(request, version, correlation_id=7))
            assert outcome.closed and outcome.answer is None, (request_class.name, version)
            tracebacks = target.tracebacks.take()
            assert not tracebacks, "\n\n".join(tracebacks)
            good_client_is_served(target)
        return
    low, high = target.advertised[api_key]
    examples = max(MIN_EXAMPLES_PER_VERSION, math.ceil(EXAMPLES_PER_API / (high - low + 1)))
    for version in range(low, high + 1):
        fuzz_one_version(target, CLASSES[api_key], version, examples)


def fuzz_one_version(target: Target, request_class: Any, version: int, examples: int) -> None:
    api_key = int(request_class.API_KEY)
    known = KNOWN_TO_PRODUCE if api_key == PRODUCE_KEY else KNOWN

    @settings(FUZZ_SETTINGS, max_examples=examples)
    @given(data=st.data())
    def one_request(data: st.DataObject) -> None:
        note(f"{request_class.name} v{version}")
        request = data.draw(requests(request_class, version, known), label="request")
        correlation_id = data.draw(st.integers(0, FOLLOW_UP_CORRELATION_ID - 1), label="id")
        before = target.end_offsets() if api_key == PRODUCE_KEY else {}
        outcome = exchange(target.address, frame_of(request, version, correlation_id))
        response = check_outcome(target, request_class, version, correlation_id, outcome)
        if api_key == PRODUCE_KEY:
            after = target.end_offsets()
            for partition in refused_partitions(request, response):
                assert after[partition] == before[partition], f"refused, yet written: {partition}"

    one_request()


# -- Produce frames changed byte by byte --------------------------------------------------------

EDGE_INT32 = (-1, 0, 1, 2**31 - 1, -(2**31), 61, 1000)
EDGE_INT16 = (-1, 0, 1, 2**15 - 1)


MUTATIONS = ("cut", "int32", "int16", "byte", "added")


@st.composite
def produce_frames(
    draw: st.DrawFn, versions: tuple[int, int], kinds: tuple[str, ...] = MUTATIONS
) -> tuple[int, int, bytes]:
    """(version, correlation id, frame): a valid Produce of known batches, then its body cut
    short, a 4- or 2-byte field (a length, a count) set to an edge value, a byte changed, or
    bytes added; the frame's size always says the bytes it holds, so the listener reads it
    whole and must judge its body."""
    version = draw(st.integers(*versions))
    partitions = draw(st.lists(st.integers(0, PARTITIONS - 1), min_size=1, max_size=2, unique=True))
    data_class = ProduceRequest.TopicProduceData
    request = ProduceRequest[version](
        transactional_id=None,
        acks=draw(st.sampled_from((-1, 1))),
        timeout_ms=5000,
        topic_data=[
            data_class(
                name=PRODUCE_TOPIC,
                partition_data=[
                    data_class.PartitionProduceData(
                        index=p, records=draw(st.sampled_from(RECORD_SETS))
                    )
                    for p in partitions
                ],
            )
        ],
    )
    correlation_id = draw(st.integers(0, FOLLOW_UP_CORRELATION_ID - 1))
    frame = frame_of(request, version, correlation_id)
    header_end = SIZE.size + len(
        RequestHeader(
            request_api_key=PRODUCE_KEY,
            request_api_version=version,
            correlation_id=correlation_id,
            client_id="fuzz",
        ).encode(flexible=ProduceRequest.flexible_version_q(version))
    )
    body = bytearray(frame[header_end:])
    kind = draw(st.sampled_from(kinds))
    # Not in transactional_id (null), acks and timeout_ms: acks=0 answers nothing and writes
    # after the answer would have been, so whether it was refused cannot be seen.
    topics_at = (1 if ProduceRequest.flexible_version_q(version) else 2) + 2 + 4
    position = draw(st.integers(topics_at, len(body) - 1))
    if kind == "cut":
        del body[position:]
    elif kind == "int32":
        struct.pack_into(
            ">i", body, min(position, len(body) - 4), draw(st.sampled_from(EDGE_INT32))
        )
    elif kind == "int16":
        struct.pack_into(
            ">h", body, min(position, len(body) - 2), draw(st.sampled_from(EDGE_INT16))
        )
    elif kind == "byte":
        body[position] = draw(st.integers(0, 255))
    elif kind == "added":
        body[position:position] = draw(st.binary(min_size=1, max_size=70))
    payload = frame[SIZE.size : header_end] + bytes(body)
    return version, correlation_id, SIZE.pack(len(payload)) + payload


@settings(FUZZ_SETTINGS, max_examples=EXAMPLES_PER_API * 6)
@given(data=st.data())
def test_no_changed_produce_frame_is_written_when_refused(target: Target, data) -> None:
    versions = target.advertised[PRODUCE_KEY]
    version, correlation_id, frame = data.draw(produce_frames(versions), label="frame")
    before = target.end_offsets()
    outcome = exchange(target.address, frame)
    response = check_outcome(target, ProduceRequest, version, correlation_id, outcome)
    after = target.end_offsets()
    for partition in refused_partitions(None, response):
        assert after[partition] == before[partition], f"refused, yet written: {partition}"


@settings(FUZZ_SETTINGS, max_examples=EXAMPLES_PER_API * 3)
@given(data=st.data())
def test_no_queued_produce_frames_are_written_when_refused(target: Target, data) -> None:
    """Two to four Produce frames back to back, each whole or changed: each is answered as
    alone (in order), or the connection closes; a partition no answer reported written to
    was not written to, whatever the frames around its refusal held."""
    versions = target.advertised[PRODUCE_KEY]
    kinds = (*MUTATIONS, "whole", "whole")
    drawn = data.draw(st.lists(produce_frames(versions, kinds), min_size=2, max_size=4))
    correlation_ids = [correlation_id for _, correlation_id, _ in drawn]
    if len(set(correlation_ids)) != len(correlation_ids):
        return  # answers would not say which request they are for
    before = target.end_offsets()
    answers = exchange_queued(target.address, [frame for _, _, frame in drawn], correlation_ids)
    written: set[int] = set()
    for (version, _, _), answer in zip(drawn, answers, strict=False):
        response = produce_response(version, answer)
        written |= set(range(PARTITIONS)) - refused_partitions(None, response)
    event(f"{len(answers)} of {len(drawn)} answered")
    tracebacks = target.tracebacks.take()
    assert not tracebacks, "\n\n".join(tracebacks)
    good_client_is_served(target)
    after = target.end_offsets()
    for partition in set(range(PARTITIONS)) - written:
        assert after[partition] == before[partition], f"refused, yet written: {partition}"


def produce_response(version: int, answer: bytes) -> Any:
    return response_class_of(ProduceRequest).decode(answer, version=version, header=True)
