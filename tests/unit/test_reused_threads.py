"""seglog.reused_threads: kept daemon threads, never a task queued behind another, idle ones
ending, a task that raises leaving its thread alive, and futures of what tasks return."""

from __future__ import annotations

import threading

import pytest

from seglog.reused_threads import ReusedThreads
from tests.waiting import wait_until

BOUND_S = 10.0


def test_pump_threads_are_reused_and_never_queue_a_task_behind_another():
    threads = ReusedThreads("test-pump-reuse")
    ran_on: list[int] = []
    threads.run(lambda: ran_on.append(threading.get_ident()))
    assert wait_until(lambda: threads._idle == 1, BOUND_S)  # done, and waiting for more
    threads.run(lambda: ran_on.append(threading.get_ident()))
    assert wait_until(lambda: len(ran_on) == 2, BOUND_S)
    assert ran_on[0] == ran_on[1]
    # Tasks that each wait for all the others to start: one queued behind another would
    # break the barrier.
    barrier = threading.Barrier(5, timeout=BOUND_S)
    passed: list[int] = []
    for _ in range(5):
        threads.run(lambda: passed.append(barrier.wait()))
    assert wait_until(lambda: len(passed) == 5, BOUND_S)
    assert not barrier.broken


def test_an_idle_pump_thread_ends():
    threads = ReusedThreads("test-pump-idle", idle_s=0.05)
    threads.run(lambda: None)

    def named() -> int:
        return sum(t.name == "test-pump-idle" for t in threading.enumerate())

    assert wait_until(lambda: named() == 0, BOUND_S)
    assert threads._idle == 0
    done = threading.Event()
    threads.run(done.set)  # a new thread for it
    assert done.wait(BOUND_S)


def test_a_pump_task_that_raises_leaves_its_thread_to_run_the_next():
    threads = ReusedThreads("test-pump-raises")

    def fails() -> None:
        raise RuntimeError("a relay's bug")

    threads.run(fails)
    assert wait_until(lambda: threads._idle == 1, BOUND_S)
    done = threading.Event()
    threads.run(done.set)  # claims the thread that ran `fails`: it must still be there
    assert done.wait(BOUND_S)
    assert sum(t.name == "test-pump-raises" for t in threading.enumerate()) == 1


def test_submit_answers_a_future_of_the_result_or_the_error():
    threads = ReusedThreads("test-submit")
    assert threads.submit(lambda a, b: a + b, 2, 3).result(BOUND_S) == 5

    def fails() -> None:
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        threads.submit(fails).result(BOUND_S)
    assert all(t.daemon for t in threading.enumerate() if t.name == "test-submit")
