"""The gateway's pool for requests in flight (services/gateway/request_memory.py): waits for
room, refuses retriably past its wait, lets a lone request larger than the pool through, and
never takes more than the limit otherwise."""

from __future__ import annotations

import threading

import pytest

from seglog.errors import MemoryBudgetExhaustedError
from services.memory_pool import RequestMemoryPool
from tests.waiting import wait_until


def test_a_full_pool_makes_a_request_wait_until_another_finishes():
    pool = RequestMemoryPool(100, wait_s=30)
    pool.acquire(80)
    admitted = threading.Event()

    def second() -> None:
        pool.acquire(40)
        admitted.set()

    waiter = threading.Thread(target=second)
    waiter.start()
    assert wait_until(lambda: pool.waited == 1)
    assert not admitted.is_set()
    pool.release(80)
    waiter.join(timeout=30)
    assert admitted.is_set() and pool.used_bytes == 40 and pool.peak_bytes == 80


def test_past_its_wait_a_request_is_refused_retriably_and_takes_nothing():
    pool = RequestMemoryPool(100, wait_s=0.01)
    pool.acquire(60)
    with pytest.raises(MemoryBudgetExhaustedError) as refused:
        pool.acquire(60)
    assert refused.value.retriable and pool.refused == 1 and pool.used_bytes == 60


def test_a_request_larger_than_the_pool_runs_alone():
    pool = RequestMemoryPool(100, wait_s=0.01)
    with pool.holding() as share:
        share.acquire(500)
        assert not pool.try_acquire(1)
    assert pool.used_bytes == 0


def test_an_answer_is_added_without_waiting_and_given_back_with_its_request():
    pool = RequestMemoryPool(100, wait_s=0.01)
    with pool.holding() as share:
        share.acquire(90)
        share.add(50)
        assert pool.used_bytes == 140
        with pytest.raises(MemoryBudgetExhaustedError):
            pool.acquire(1)
    assert pool.used_bytes == 0
