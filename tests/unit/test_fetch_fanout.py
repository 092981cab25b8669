"""routing/fetch_fanout.py: a waiting fetch across nodes answers once one node's answer is
complete, even when another node's call only starts after that (its thread late under load):
that call is cancelled as it starts, and the answer does not wait for it.

The relays here stand in for the gRPC calls to nodes so the order of events can be forced;
the integration tests (test_services, test_kafka_clients) run the same path on real nodes."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

from seglog.v1 import common_pb2
from services.gateway.routing.fetch_fanout import fetch_across_nodes
from tests.waiting import wait_until

BOUND_S = 30


def _request(partitions: int, max_wait_ms: int) -> common_pb2.FetchRequest:
    request = common_pb2.FetchRequest(min_bytes=1, max_wait_ms=max_wait_ms, max_bytes=1 << 20)
    request.partitions.extend(
        common_pb2.FetchPartition(
            topic="t", partition=p, fetch_offset=0, partition_max_bytes=1 << 20
        )
        for p in range(partitions)
    )
    return request


class LateNode:
    """A node whose call starts only once `start` is set, then long-polls until cancelled."""

    def __init__(self) -> None:
        self.start = threading.Event()
        self.cancelled = threading.Event()
        self.cancelled_as_it_started = False

    def relay(self, keep_cancel: Callable[[Callable[[], object]], None]) -> Iterator[bytes]:
        assert self.start.wait(BOUND_S)
        keep_cancel(self.cancelled.set)
        self.cancelled_as_it_started = self.cancelled.is_set()
        self.cancelled.wait(BOUND_S)  # the long poll, cut short by a cancel
        yield b"late"


def test_a_call_that_starts_after_its_node_was_given_up_is_cancelled_and_not_waited_for():
    late = LateNode()

    def relay(target, payload, indexes, keep_cancel):
        if target == "busy":
            yield b"records"
        else:
            yield from late.relay(keep_cancel)

    answer: list[bytes] = []
    fetching = threading.Thread(
        target=lambda: answer.extend(
            fetch_across_nodes(_request(2, 10_000), {1: ("busy", [0]), 2: ("quiet", [1])}, relay)
        ),
        daemon=True,
    )
    fetching.start()
    # The answer is complete before the quiet node's call has even started.
    fetching.join(BOUND_S)
    assert not fetching.is_alive()
    assert answer == [b"records"]
    late.start.set()
    assert wait_until(late.cancelled.is_set, BOUND_S)
    assert late.cancelled_as_it_started


def test_a_fetch_that_does_not_wait_relays_every_node_whole():
    released = threading.Event()

    def relay(target, payload, indexes, keep_cancel):
        if target == "slow":
            assert released.wait(BOUND_S)
        yield target.encode()

    answer: list[bytes] = []
    fetching = threading.Thread(
        target=lambda: answer.extend(
            fetch_across_nodes(_request(2, 0), {1: ("fast", [0]), 2: ("slow", [1])}, relay)
        ),
        daemon=True,
    )
    fetching.start()
    assert wait_until(lambda: answer == [b"fast"], BOUND_S)
    assert fetching.is_alive()  # still relaying the slow node
    released.set()
    fetching.join(BOUND_S)
    assert sorted(answer) == [b"fast", b"slow"]


def test_a_reader_that_stops_early_gives_up_the_nodes_still_polling():
    """The Kafka listener's fetch stops reading once it has min_bytes: the quiet nodes'
    long polls are cancelled, not left running until their own waits end."""
    quiet = LateNode()
    quiet.start.set()

    def relay(target, payload, indexes, keep_cancel):
        if target == "busy":
            yield b"records"
            yield b"more of them"
        else:
            yield from quiet.relay(keep_cancel)

    stream = fetch_across_nodes(_request(2, 10_000), {1: ("busy", [0]), 2: ("quiet", [1])}, relay)
    assert next(stream) == b"records"
    stream.close()
    assert wait_until(quiet.cancelled.is_set, BOUND_S)


def test_each_nodes_share_of_a_read_committed_fetch_keeps_its_isolation_level():
    """A consumer's read_committed fetch split across two nodes: each node is asked at
    READ_COMMITTED, or it would hand out open and aborted transactions' records."""
    request = _request(2, 0)
    request.isolation_level = 1
    sent: list[common_pb2.FetchRequest] = []

    def relay(target, payload, indexes, keep_cancel):
        sent.append(common_pb2.FetchRequest.FromString(payload))
        yield b"records"

    list(fetch_across_nodes(request, {1: ("a", [0]), 2: ("b", [1])}, relay))
    assert sorted(r.partitions[0].partition for r in sent) == [0, 1]
    assert [r.isolation_level for r in sent] == [1, 1]
