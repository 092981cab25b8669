"""Object-store faults (issue 56), for campaigns with a tiered topic (tiered_campaign.py): the
real SeaweedFS store SIGKILLed and restarted after a while, or the S3 fault proxy the nodes
reach it through (tests/s3_fault_proxy.py) stalling or answering 503 SlowDown. Each lasts a
bounded, seeded time; their target is the store, so they overlap with node, gateway and
network faults (never with one another).

What the cluster must do meanwhile (docs/tiered-storage.md): copies fail and are retried,
local segments stay until their copy is recorded, reads below the local log start answer
retriable errors, and nothing acknowledged is lost or read twice."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any

STORE = "store"
# How long a store fault lasts: from a blip to most of a copy backoff's ceiling, and past the
# consumers' request timeout at the top.
HOLD_MIN_S = 3.0
HOLD_MAX_S = 20.0
# A slow store's delay per request: within and past remote.fetch.max.wait.ms (500 ms).
SLOW_DELAYS_S = (0.3, 1.0, 3.0)
# Which requests a 5xx fault fails: all, the copies' writes only, the remote reads only.
ERROR_METHODS: tuple[tuple[str, frozenset[str] | None], ...] = (
    ("every request", None),
    ("PUTs", frozenset({"PUT", "POST"})),
    ("GETs", frozenset({"GET", "HEAD"})),
)


def hold_store_fault(rng: random.Random, bounds_s: tuple[float, float]) -> float:
    """Hold a store fault for its seeded duration within `bounds_s`; returns it."""
    hold_s = rng.uniform(*bounds_s)
    time.sleep(hold_s)  # the fault's length is part of the fault
    return hold_s


def _store(cluster: Any) -> Any:
    store = getattr(cluster, "store", None)
    if store is None:
        raise RuntimeError("object-store faults need a campaign with a tiered topic (--tiered)")
    return store


@dataclass
class StoreKill:
    """SIGKILL the object store; restarted (on its data) once the fault's time is up."""

    name: str = "store-kill"
    target: str = STORE
    hold_s: tuple[float, float] = (HOLD_MIN_S, HOLD_MAX_S)  # the fault's length's bounds

    def start(self, cluster: Any, rng: random.Random) -> str:
        store = _store(cluster)
        store.weed.kill()
        hold_s = hold_store_fault(rng, self.hold_s)
        return f"SIGKILL the object store, down {hold_s:.1f} s"

    def heal(self, cluster: Any) -> None:
        store = _store(cluster)
        if not store.weed.alive():
            store.weed.start()


@dataclass
class StoreSlow:
    """Every request to the store delayed (a store answering late)."""

    name: str = "store-slow"
    target: str = STORE
    hold_s: tuple[float, float] = (HOLD_MIN_S, HOLD_MAX_S)  # the fault's length's bounds

    def start(self, cluster: Any, rng: random.Random) -> str:
        delay_s = rng.choice(SLOW_DELAYS_S)
        _store(cluster).proxy.set("slow", delay_s=delay_s)
        hold_s = hold_store_fault(rng, self.hold_s)
        return f"object store answering {delay_s} s late for {hold_s:.1f} s"

    def heal(self, cluster: Any) -> None:
        _store(cluster).proxy.set("pass")


@dataclass
class StoreErrors:
    """The store answering 503 SlowDown to all requests, to writes or to reads."""

    name: str = "store-errors"
    target: str = STORE
    hold_s: tuple[float, float] = (HOLD_MIN_S, HOLD_MAX_S)  # the fault's length's bounds

    def start(self, cluster: Any, rng: random.Random) -> str:
        what, methods = rng.choice(ERROR_METHODS)
        _store(cluster).proxy.set("fail", methods=set(methods) if methods else None)
        hold_s = hold_store_fault(rng, self.hold_s)
        return f"object store answering 503 to {what} for {hold_s:.1f} s"

    def heal(self, cluster: Any) -> None:
        _store(cluster).proxy.set("pass")
