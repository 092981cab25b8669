import time

import pytest


@pytest.fixture
def now_ms() -> int:
    return time.time_ns() // 1_000_000
