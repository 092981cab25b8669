"""The producer transport's grant renewal (client/produce_transport.py), against a gateway
stand-in that answers ProduceGrants: one thread asks at a time, the others send under grants
still good, and a grant that expires while it is being judged never makes a thread wait
for a lock it already holds."""

from __future__ import annotations

import threading
import time

from seglog.client.produce_transport import ProduceTransport, _NodeGrant, _TopicGrants
from seglog.v1 import bulk_pb2

BOUND_S = 10.0


class GrantingGateway:
    """What the transport asks of a GatewayClient for grants: `security` and `call`."""

    security = None

    def __init__(self) -> None:
        self.asked = 0
        self.answer_after = threading.Event()
        self.answer_after.set()

    def call(self, method: str, request: bulk_pb2.ProduceGrantsRequest) -> object:
        assert method == "ProduceGrants"
        self.asked += 1
        assert self.answer_after.wait(BOUND_S)
        expires_at_ms = time.time_ns() // 1_000_000 + 30_000
        response = bulk_pb2.ProduceGrantsResponse()
        response.grants.add(
            node_id=1,
            bulk_address="127.0.0.1:1",
            grant=b"g",
            signature=b"s",
            expires_at_ms=expires_at_ms,
        )
        return response


def _held(expires_in_ms: int) -> _TopicGrants:
    now_ms = time.time_ns() // 1_000_000
    grant = _NodeGrant("127.0.0.1:1", b"old", b"s", now_ms + expires_in_ms)
    return _TopicGrants({1: grant}, ask_again_at_ms=0)  # due for renewal


def test_others_send_under_the_held_grant_while_one_thread_asks():
    gateway = GrantingGateway()
    transport = ProduceTransport(gateway, direct=True)  # type: ignore[arg-type]
    transport._grants["t"] = _held(20_000)
    gateway.answer_after.clear()  # the asking thread waits for the gateway
    asking = threading.Thread(target=transport._grant, args=("t", 1))
    asking.start()
    deadline = time.monotonic() + BOUND_S
    while gateway.asked == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert gateway.asked == 1
    assert transport._grant("t", 1).grant == b"old"  # not held up behind the ask
    gateway.answer_after.set()
    asking.join(BOUND_S)
    assert transport._grant("t", 1).grant == b"g" and gateway.asked == 1


def test_a_grant_that_expires_while_judged_takes_the_lock_once(monkeypatch):
    gateway = GrantingGateway()
    transport = ProduceTransport(gateway, direct=True)  # type: ignore[arg-type]
    held = _held(20_000)
    transport._grants["t"] = held
    answers = iter([True, False])  # good when first judged, expired the moment after
    monkeypatch.setattr(_TopicGrants, "usable", lambda self: next(answers, False))
    done = threading.Thread(target=transport._grant, args=("t", 1), daemon=True)
    done.start()
    done.join(BOUND_S)
    assert not done.is_alive(), "the renewing thread waits for a lock it holds"
    assert transport._grants["t"].by_node[1].grant == b"g"
