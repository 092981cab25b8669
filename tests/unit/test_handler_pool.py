"""The Kafka listener's request handler pool (services/gateway/kafka/handler_pool.py)."""

from __future__ import annotations

import threading

from services.gateway.kafka.handler_pool import RequestHandlerPool
from tests.waiting import wait_until


def test_requests_submitted_together_to_one_idle_thread_each_get_a_thread():
    """Two requests submitted before the pool's one idle thread wakes: each runs at once,
    the second on a new thread, rather than waiting for the first to finish (a group join
    may wait a whole session)."""
    pool = RequestHandlerPool("test-pool", 4, 10)
    release = threading.Event()
    started: list[str] = []
    try:
        assert pool.try_submit(lambda: None)
        assert wait_until(lambda: pool.started_threads == 1 and pool.idle == 1, 5)

        def blocking(name: str):
            def work() -> None:
                started.append(name)
                release.wait(10)

            return work

        # Under the pool's (reentrant) lock, so the idle thread cannot wake in between.
        with pool._lock:
            assert pool.try_submit(blocking("first"))
            assert pool.try_submit(blocking("second"))
        assert wait_until(lambda: len(started) == 2, 5), started
        assert pool.started_threads == 2
    finally:
        release.set()
        pool.stop()
