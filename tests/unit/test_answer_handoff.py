"""A waiting round answered by the thread whose append made it answerable
(services/storage_node/answer_handoff.py): only a thread that promised to run what it claims
takes a round, only while its owner waits, and whatever happens while it runs it, the owner
learns: the answer sent, the answer left to it, or the error to end its connection with."""

import threading

import pytest

from services.storage_node.answer_handoff import AnswerHandoff, claiming, run_claimed

DEADLINE_S = 10.0


class Owner:
    """The round's own thread, played by the test: what it was woken for, and its handoff."""

    def __init__(self, send=lambda answer: ("sent", answer)) -> None:
        self.woken = threading.Event()
        self.handoff = AnswerHandoff(send)

    def wait_with(self, step) -> None:
        self.handoff.open(step, self.woken.set)


def test_a_round_claimed_inside_claiming_is_answered_by_that_thread_when_it_runs_them():
    owner = Owner()
    ran_on = []

    def step():
        ran_on.append(threading.get_ident())
        return "records"

    owner.wait_with(step)
    with claiming():
        assert owner.handoff.claim()
        assert not ran_on  # claimed during the append, run after it
        run_claimed()
        assert ran_on == [threading.get_ident()]
    assert owner.woken.is_set()
    assert owner.handoff.close()
    assert owner.handoff.outcome == ("sent", "records")
    assert owner.handoff.error is None


def test_what_a_thread_claimed_is_run_when_its_block_ends():
    owner = Owner()
    owner.wait_with(lambda: "records")
    with claiming():
        assert owner.handoff.claim()
    assert owner.handoff.close()
    assert owner.handoff.outcome == ("sent", "records")


def test_a_thread_that_did_not_promise_to_run_it_leaves_the_round_to_its_owner():
    owner = Owner()
    owner.wait_with(lambda: pytest.fail("run by a thread outside claiming"))
    assert not owner.handoff.claim()
    assert not owner.handoff.close()  # the owner's to evaluate again


def test_a_round_whose_owner_is_evaluating_it_cannot_be_claimed():
    owner = Owner()
    owner.wait_with(lambda: "records")
    assert not owner.handoff.close()  # awake: evaluating, not waiting
    with claiming():
        assert not owner.handoff.claim()
    assert owner.handoff.outcome is None
    assert not owner.woken.is_set()


def test_a_round_claimed_once_is_not_claimed_twice():
    owner = Owner()
    runs = []
    owner.wait_with(lambda: runs.append(1) or "records")
    with claiming():
        assert owner.handoff.claim()
        assert not owner.handoff.claim()
    assert runs == [1]


def test_a_claimed_round_with_nothing_to_send_goes_back_to_waiting_without_waking_its_owner():
    owner = Owner()
    found = [None, "records"]
    owner.wait_with(lambda: found.pop(0))
    with claiming():
        assert owner.handoff.claim()
    assert not owner.woken.is_set()
    assert owner.handoff.outcome is None
    with claiming():  # open again: the next append's thread takes it
        assert owner.handoff.claim()
    assert owner.woken.is_set()
    assert owner.handoff.close()
    assert owner.handoff.outcome == ("sent", "records")


def test_what_send_leaves_to_the_owner_reaches_it_as_the_outcome():
    owner = Owner(send=lambda answer: ["left", answer])
    owner.wait_with(lambda: "records")
    with claiming():
        assert owner.handoff.claim()
    assert owner.handoff.close()
    assert owner.handoff.outcome == ["left", "records"]


@pytest.mark.parametrize("failing", ["step", "send"])
def test_an_error_while_the_appender_runs_the_round_is_the_owners_not_the_appenders(failing):
    def fail(*_):
        raise OSError("the follower hung up")

    owner = Owner(send=fail if failing == "send" else (lambda answer: answer))
    owner.wait_with(fail if failing == "step" else (lambda: "records"))
    with claiming():  # raises nothing on the appending thread
        assert owner.handoff.claim()
    assert owner.woken.is_set()
    assert owner.handoff.close()
    assert isinstance(owner.handoff.error, OSError)
    assert owner.handoff.outcome is None


def test_an_owner_that_wakes_while_the_appender_runs_its_round_waits_for_the_outcome():
    running = threading.Event()
    release = threading.Event()

    def step():
        running.set()
        assert release.wait(DEADLINE_S)
        return "records"

    owner = Owner()
    owner.wait_with(step)
    appender_done = threading.Event()

    def append():
        with claiming():
            assert owner.handoff.claim()
        appender_done.set()

    appender = threading.Thread(target=append)
    appender.start()
    assert running.wait(DEADLINE_S)
    closed = []
    owner_thread = threading.Thread(target=lambda: closed.append(owner.handoff.close()))
    owner_thread.start()  # the owner's wait timed out while the appender runs its round
    release.set()
    owner_thread.join(DEADLINE_S)
    appender.join(DEADLINE_S)
    assert appender_done.is_set()
    assert closed == [True]
    assert owner.handoff.outcome == ("sent", "records")


def test_claiming_blocks_nest_each_running_its_own_claims():
    inner_owner, outer_owner = Owner(), Owner()
    inner_owner.wait_with(lambda: "inner")
    outer_owner.wait_with(lambda: "outer")
    with claiming():
        assert outer_owner.handoff.claim()
        with claiming():
            assert inner_owner.handoff.claim()
        assert inner_owner.handoff.close()
        assert outer_owner.woken.is_set() is False
    assert outer_owner.handoff.close()
    assert (inner_owner.handoff.outcome, outer_owner.handoff.outcome) == (
        ("sent", "inner"),
        ("sent", "outer"),
    )
