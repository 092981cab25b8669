"""The scale benchmark's steady producer (bench.steady_producer) groups latencies by when a
record was sent: a record sent in a window and answered after it closes is that window's, a
window waits for its records' answers, and a window shorter than one send interval takes the
next record instead of coming back empty. The producer here is a stand-in that keeps each
record's callback for the test to answer."""

from __future__ import annotations

import threading
from collections.abc import Callable

from bench.steady_producer import SteadySender

DEADLINE_S = 20.0


class HeldSender(SteadySender):
    def __init__(self) -> None:
        super().__init__("topic", rate_per_s=10)
        self.callbacks: list[Callable[[BaseException | None], None]] = []
        self.sent = threading.Semaphore(0)

    def send(self, acknowledged: Callable[[BaseException | None], None]) -> None:
        self.callbacks.append(acknowledged)
        self.sent.release()

    def close(self) -> None:
        pass


def window_in_thread(sender: SteadySender, timeout_s: float = DEADLINE_S):
    """Start `sender.window()` in a thread: (the thread, a dict that gets its answer, an
    Event set once the window waits, its cutoff taken)."""
    got: dict[str, object] = {}
    waiting = threading.Event()
    wait_for = sender._changed.wait_for

    def noted_wait_for(predicate, timeout=None):
        waiting.set()
        return wait_for(predicate, timeout)

    sender._changed.wait_for = noted_wait_for  # type: ignore[method-assign]
    thread = threading.Thread(target=lambda: got.update(sender.window(timeout_s)))
    thread.start()
    return thread, got, waiting


def test_a_record_answered_after_its_window_closes_counts_in_that_window() -> None:
    sender = HeldSender()
    for _ in range(3):
        sender.send_one()
    sender.callbacks[0](None)
    sender.callbacks[2](None)
    thread, got, waiting = window_in_thread(sender)
    assert waiting.wait(DEADLINE_S)
    assert thread.is_alive(), "the window closed with a record of it unanswered"
    sender.send_one()  # sent after the window was asked for: the next window's
    sender.callbacks[1](None)
    thread.join(DEADLINE_S)
    assert not thread.is_alive()
    assert len(got["latencies_s"]) == 3 and got["failures"] == 0
    sender.callbacks[3](RuntimeError("not acknowledged"))
    assert sender.window(DEADLINE_S) == {"latencies_s": [], "failures": 1}


def test_a_window_with_no_record_sent_takes_the_next_one() -> None:
    sender = HeldSender()
    thread, got, _ = window_in_thread(sender)
    sender.send_one()
    sender.callbacks[0](None)
    thread.join(DEADLINE_S)
    assert not thread.is_alive() and len(got["latencies_s"]) == 1


def test_a_record_never_answered_is_left_out_once_the_window_gives_up() -> None:
    sender = HeldSender()
    sender.send_one()
    sender.send_one()
    sender.callbacks[1](None)
    assert len(sender.window(0.05)["latencies_s"]) == 1
    sender.callbacks[0](None)  # too late for its window, and no other window's
    sender.send_one()
    sender.callbacks[2](None)
    assert len(sender.window(DEADLINE_S)["latencies_s"]) == 1
