"""The fault proxy in front of a real gateway: a dropped answer is a call the server handled
whose client saw UNAVAILABLE; severed connections and delayed answers; healing."""

from __future__ import annotations

import random
import time

import grpc
import pytest

from seglog.v1 import gateway_pb2, gateway_pb2_grpc
from tests.cluster import LocalCluster
from tests.faults.proxy import FaultProxy

CALL_TIMEOUT_S = 10.0


@pytest.fixture
def cluster(tmp_path):
    c = LocalCluster(tmp_path, nodes=1)
    yield c
    c.close()


@pytest.fixture
def proxy(cluster):
    with FaultProxy(cluster.address) as p:
        yield p


@pytest.fixture
def stub(proxy):
    with grpc.insecure_channel(proxy.address) as channel:
        yield gateway_pb2_grpc.GatewayStub(channel)


def create(stub, name: str) -> gateway_pb2.CreateTopicsResponse:
    request = gateway_pb2.CreateTopicsRequest()
    request.topics.add(name=name, num_partitions=1, replication_factor=1)
    # Waiting for ready: after a cut connection the channel reconnects before sending.
    return stub.CreateTopics(request, timeout=CALL_TIMEOUT_S, wait_for_ready=True)


def topic_names(cluster) -> set[str]:
    return {t.name for t in cluster.client.list_topics()}


def create_until_answered(cluster, stub, name: str, attempts: int = 3):
    """A call right after a cut can still go out on the dying connection and fail without
    reaching the server (the client's race, not the proxy's): such a failure must not have
    landed, and the call is made again."""
    for _ in range(attempts - 1):
        try:
            return create(stub, name)
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.UNAVAILABLE
            assert name not in topic_names(cluster), "a failure the proxy did not make landed"
    return create(stub, name)


def test_a_dropped_answer_was_handled_and_the_next_call_is_answered(cluster, proxy, stub):
    create(stub, "before")  # the connection is up and answering
    proxy.drop_answers(1)
    with pytest.raises(grpc.RpcError) as lost:
        create(stub, "landed")
    assert lost.value.code() == grpc.StatusCode.UNAVAILABLE
    assert proxy.answers_dropped == 1
    # The gateway handled the call whose answer was lost.
    assert "landed" in topic_names(cluster)
    response = create_until_answered(cluster, stub, "after")
    assert not response.topics[0].error
    assert {"before", "landed", "after"} <= topic_names(cluster)
    assert proxy.answers_dropped == 1


def test_every_answer_dropped_with_probability_one_until_healed(cluster, proxy, stub):
    create(stub, "warm")
    proxy.drop_answer_probability(1.0, random.Random(7))
    names = [f"lost-{i}" for i in range(8)]
    tried = []
    for name in names:
        if proxy.answers_dropped == 2:
            break
        tried.append(name)
        with pytest.raises(grpc.RpcError) as lost:
            create(stub, name)
        assert lost.value.code() == grpc.StatusCode.UNAVAILABLE
    assert proxy.answers_dropped == 2
    # Every call failed; exactly those whose answers the proxy dropped had landed (a call
    # can also fail on the connection being cut, before it reaches the server).
    assert len(set(tried) & topic_names(cluster)) == 2
    proxy.heal()
    assert not create_until_answered(cluster, stub, "healed").topics[0].error
    assert proxy.answers_dropped == 2


def test_sever_cuts_open_connections_and_clients_reconnect(cluster, proxy, stub):
    # A call held in the proxy (its answer delayed) when the connections are cut fails.
    create(stub, "warm")
    proxy.delay_answers(30_000)
    pending = stub.CreateTopics.future(
        gateway_pb2.CreateTopicsRequest(
            topics=[gateway_pb2.NewTopic(name="held", num_partitions=1, replication_factor=1)]
        ),
        timeout=CALL_TIMEOUT_S,
    )
    deadline = time.monotonic() + CALL_TIMEOUT_S
    while "held" not in topic_names(cluster) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert "held" in topic_names(cluster)
    proxy.sever()
    with pytest.raises(grpc.RpcError) as severed:
        pending.result(timeout=CALL_TIMEOUT_S)
    assert severed.value.code() == grpc.StatusCode.UNAVAILABLE
    assert proxy.answers_dropped == 0  # a cut is not counted as a dropped answer
    proxy.heal()
    assert not create_until_answered(cluster, stub, "later").topics[0].error


def test_answers_delayed_then_healed(cluster, proxy, stub):
    create(stub, "warm")
    delay_ms = 1500
    proxy.delay_answers(delay_ms)
    started = time.monotonic()
    create(stub, "slow")
    assert time.monotonic() - started >= delay_ms / 1000
    # Healing releases an answer being held at once.
    proxy.delay_answers(60_000)
    pending = stub.CreateTopics.future(
        gateway_pb2.CreateTopicsRequest(
            topics=[gateway_pb2.NewTopic(name="released", num_partitions=1, replication_factor=1)]
        ),
        timeout=CALL_TIMEOUT_S,
    )
    deadline = time.monotonic() + CALL_TIMEOUT_S
    while "released" not in topic_names(cluster) and time.monotonic() < deadline:
        time.sleep(0.02)
    proxy.heal()
    assert not pending.result(timeout=CALL_TIMEOUT_S).topics[0].error
    assert proxy.answers_dropped == 0
