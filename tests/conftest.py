import gc
import signal
import time
from collections.abc import Iterator

import pytest

from devtools.seaweedfs import SeaweedProcess
from services import long_lived
from tests import scheduling


def pytest_configure(config: pytest.Config) -> None:
    # Tests interrupt the processes they start with SIGINT, as Ctrl-C in a terminal does. A
    # suite started in the background by a shell without job control has SIGINT ignored, and
    # every process it starts would inherit that (an ignored signal stays ignored across exec)
    # and shrug the interrupt off. A handler does not survive exec: children get the default.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The longest files first, so the two workers of make test end together (tests/scheduling.py).
    scheduling.longest_first(items, scheduling.load_durations())


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    return scheduling.make_scheduler(config, log)


@pytest.fixture
def now_ms() -> int:
    return time.time_ns() // 1_000_000


@pytest.fixture
def settling(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The cyclic collector as a server process has it (long_lived.enable()): what lives now
    is settled at once, and settle() settles from then on; what the test froze is given back
    after. A node tested inside the test process otherwise meets full collections that walk
    the whole test run's heap, which no server process does."""
    monkeypatch.setattr(long_lived, "_enabled", True)
    monkeypatch.setattr(long_lived, "_settles", 0)  # no full pass comes by the count's chance
    long_lived.settle()
    try:
        yield
    finally:
        gc.unfreeze()


@pytest.fixture(scope="module")
def seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedProcess]:
    """A real S3 object store (SeaweedFS) for tiered storage's tests, one per test module,
    stopped by its pid. Each test takes a key prefix of its own (`storage_config(prefix)`) so
    that no test sees another's objects."""
    directory = tmp_path_factory.mktemp("seaweedfs")
    store = SeaweedProcess(directory, log_path=directory / "weed.log")
    store.start()
    yield store
    store.kill()  # nothing to keep: a kill spares its filer's 15 s drain
