"""The fault campaign's object-store faults (tests/faults/store_faults.py) against a real
SeaweedFS behind the S3 fault proxy, as a tiered campaign sets them up
(tests/faults/tiered_campaign.py TieredStore): while each fault holds, a client reaching the
store through the proxy (as the nodes do) fails or waits as the fault says; healed, it reads
and writes again, and the store killed comes back with the objects it held. `make
test-long`'s tiered campaign (tests/e2e/test_tiered_fault_campaign.py) runs them under a
cluster."""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from seglog.errors import SeglogError
from seglog.storage.remote_store import RemoteStore
from tests.faults.store_faults import SLOW_DELAYS_S, StoreErrors, StoreKill, StoreSlow
from tests.faults.tiered_campaign import TieredStore
from tests.waiting import wait_until

HOLD_S = (4.0, 4.0)  # long enough to see the fault from here, short for the suite


@dataclass
class StoreOnly:
    """What the store faults use of the campaign's cluster: its object store."""

    store: TieredStore


@pytest.fixture(scope="module")
def tiered_store(tmp_path_factory) -> Iterator[TieredStore]:
    root = tmp_path_factory.mktemp("campaign-store")
    (root / "logs").mkdir()
    store = TieredStore(root)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture(scope="module")
def through_proxy(tiered_store) -> RemoteStore:
    """A client of the store through the fault proxy, reading past the slowest delay."""
    assert tiered_store.proxy is not None
    config = dataclasses.replace(
        tiered_store.weed.storage_config(),
        endpoint_url=tiered_store.proxy.endpoint_url,
        read_timeout_ms=int(max(SLOW_DELAYS_S) * 1000) + 5000,
    )
    return RemoteStore(config)


def _holding(fault: Any, tiered_store: TieredStore) -> tuple[threading.Thread, list[str]]:
    """Start `fault` on a thread of its own (it holds for HOLD_S before returning)."""
    said: list[str] = []
    thread = threading.Thread(
        target=lambda: said.append(fault.start(StoreOnly(tiered_store), random.Random(5)))
    )
    thread.start()
    return thread, said


def _fails(call: Any) -> bool:
    try:
        call()
    except SeglogError:
        return True
    return False


def test_store_errors_fail_requests_while_held_then_pass(tiered_store, through_proxy):
    through_proxy.put_bytes("faults/errors", b"before")
    fault = StoreErrors(hold_s=HOLD_S)
    thread, said = _holding(fault, tiered_store)
    try:
        # whichever requests the fault fails (all, PUTs or GETs), one of these is among them
        assert wait_until(
            lambda: (
                _fails(lambda: through_proxy.get("faults/errors"))
                or _fails(lambda: through_proxy.put_bytes("faults/errors-2", b"x"))
            ),
            HOLD_S[0] - 1,
        )
    finally:
        thread.join()
        fault.heal(StoreOnly(tiered_store))
    assert said and "503" in said[0]
    through_proxy.put_bytes("faults/errors", b"after")
    assert through_proxy.get("faults/errors") == b"after"


def test_a_slow_store_answers_late_while_held(tiered_store, through_proxy):
    through_proxy.put_bytes("faults/slow", b"slow")
    fault = StoreSlow(hold_s=HOLD_S)
    thread, said = _holding(fault, tiered_store)
    try:
        assert wait_until(
            lambda: tiered_store.proxy is not None and tiered_store.proxy.mode == "slow"
        )
        started = time.monotonic()
        assert through_proxy.get("faults/slow") == b"slow"
        assert time.monotonic() - started >= min(SLOW_DELAYS_S)
    finally:
        thread.join()
        fault.heal(StoreOnly(tiered_store))
    assert said and "late" in said[0]
    assert tiered_store.proxy is not None and tiered_store.proxy.mode == "pass"


@pytest.mark.long  # the store's errors and slowness stay in make test
def test_a_killed_store_is_unreachable_while_held_and_back_with_its_objects(
    tiered_store, through_proxy
):
    through_proxy.put_bytes("faults/kept", b"kept across the kill")
    fault = StoreKill(hold_s=HOLD_S)
    thread, said = _holding(fault, tiered_store)
    try:
        assert wait_until(lambda: not tiered_store.weed.alive())
        assert _fails(lambda: through_proxy.get("faults/kept"))
    finally:
        thread.join()
        fault.heal(StoreOnly(tiered_store))
    assert said and "SIGKILL" in said[0]
    assert tiered_store.weed.alive()
    # The restarted store answers S3 once its filer does; its volume server (which holds the
    # object) may register with its master a moment later.
    assert wait_until(lambda: _reads(through_proxy, "faults/kept") == b"kept across the kill", 30)


def _reads(store: RemoteStore, key: str) -> bytes | None:
    try:
        return store.get(key)
    except SeglogError:
        return None
