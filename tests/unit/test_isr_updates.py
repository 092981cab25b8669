"""The leader's ISR-change sender (services/storage_node/isr_updates.py) over a real
partition and log: whatever becomes of a proposal, the partition is free to propose again,
so an idle partition's caught-up follower is added back on its next recorded fetch. The
registry's AlterPartition is a plain function here (the gRPC path is tested with real
gateways elsewhere)."""

from __future__ import annotations

import queue

import pytest

from seglog.errors import InvalidUpdateVersionError
from seglog.storage import Log, LogConfig
from services.storage_node.isr_updates import IsrUpdates
from services.storage_node.partition import IsrProposal, Partition, Registration
from tests.waiting import wait_until

LOCAL = 3
LAG_TIME_MAX_MS = 60_000  # no shrink check during a test


@pytest.fixture
def partition(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(min_insync_replicas=2))
    held = Partition("t", 0, log, LOCAL)
    # Leads alone: its followers left the ISR while they were away.
    held.apply(Registration(LOCAL, 5, 9, (3, 1, 2), (3,)))
    yield held
    log.close()


class Registry:
    """AlterPartition as the controller answers it: each call takes the next answer
    (a Registration to return, an exception to raise) and records the proposal."""

    def __init__(self, answers) -> None:
        self.answers = list(answers)
        self.calls: queue.Queue[IsrProposal] = queue.Queue()

    def __call__(self, proposal: IsrProposal) -> Registration:
        self.calls.put(proposal)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def _updates(partition: Partition, registry: Registry, on_change=None) -> IsrUpdates:
    updates = IsrUpdates(
        lambda topic, number: partition,
        lambda: [partition],
        LAG_TIME_MAX_MS,
        on_change or (lambda topic, number: None),
    )
    updates.alter_partition = registry
    updates.start()
    return updates


def _propose_follower(partition: Partition, updates: IsrUpdates, replica: int) -> None:
    """The follower's fetch at the leader's log end, as leader_fetches.py records it."""
    proposal = partition.record_follower_fetch(replica, partition.log.log_end_offset, 0)
    assert proposal is not None, "a caught-up follower must be proposed"
    updates.propose(proposal)


def test_a_proposal_that_fails_after_the_registry_answered_leaves_the_sender_running(
    partition,
):
    # The registry took the expansion, then the node's own handling of the answer failed:
    # the sender goes on and the partition proposes again.
    failures = iter([RuntimeError("waking the partition's waiters failed")])

    def on_change(topic: str, number: int) -> None:
        failure = next(failures, None)
        if failure is not None:
            raise failure

    registry = Registry(
        [
            Registration(LOCAL, 5, 10, (3, 1, 2), (3, 1)),
            Registration(LOCAL, 5, 11, (3, 1, 2), (3, 1, 2)),
        ]
    )
    updates = _updates(partition, registry, on_change)
    try:
        _propose_follower(partition, updates, 1)
        assert wait_until(lambda: partition.isr == (3, 1), 5), "follower 1 joins the ISR"
        assert wait_until(lambda: partition.pending_isr is None, 5), (
            "the failed handling ends the proposal"
        )
        _propose_follower(partition, updates, 2)
        assert wait_until(lambda: partition.isr == (3, 1, 2), 5), "follower 2 joins the ISR"
    finally:
        updates.stop()


def test_a_refused_or_unsent_proposal_is_made_again_on_the_next_fetch(partition):
    # The registry holder SIGKILLed mid-call (the call fails) or a stale partition epoch:
    # the next recorded fetch of the same idle follower proposes it again.
    registry = Registry(
        [
            ConnectionError("the gateway went away"),
            InvalidUpdateVersionError("partition epoch 9, the partition is at 10"),
            Registration(LOCAL, 5, 10, (3, 1, 2), (3, 1)),
        ]
    )
    updates = _updates(partition, registry)
    try:
        for attempt in range(3):
            _propose_follower(partition, updates, 1)
            assert registry.calls.get(timeout=5).new_isr == (3, 1)
            assert wait_until(lambda: partition.pending_isr is None, 5), (
                f"attempt {attempt} is over"
            )
        assert partition.isr == (3, 1)
    finally:
        updates.stop()
