import signal
import time

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # Tests interrupt the processes they start with SIGINT, as Ctrl-C in a terminal does. A
    # suite started in the background by a shell without job control has SIGINT ignored, and
    # every process it starts would inherit that (an ignored signal stays ignored across exec)
    # and shrug the interrupt off. A handler does not survive exec: children get the default.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def now_ms() -> int:
    return time.time_ns() // 1_000_000
