"""Python's cyclic garbage collector, kept from stalling a server as the cluster grows.

A full collection walks every object the collector tracks, and every thread of the process
waits while it does. A storage node tracks about 40 objects per hosted partition (its log,
segments, indexes, states): at 10,000 partitions about 400,000, and one full collection
stalled a node 150-180 ms on a 2-core machine (a gateway's metadata image at 10,000
partitions: 136,000 objects, 66 ms). CPython starts one whenever the objects that survived
earlier collections have grown by a quarter since the last, which is exactly while topics
are being created: produce latency then rose with the cluster's size, during the
operator's own creations.

So what lives as long as the process or a partition is settled once made: after startup and
after each batch of created partitions, `settle()` collects what was made since the last
settle (the rest is already out of view: the pause grows with the batch, not the cluster)
and moves every survivor out of the collector's view (gc.freeze, a list splice). Later full
collections walk only what was made after. Settled objects are still freed by reference
counting the moment nothing refers to them; only a garbage cycle among them would outlive
its use, and a removed partition leaves none (tests/unit/test_long_lived.py). What does: the
objects of requests and connections in flight at a settle that end in a cycle (about 600
objects per settle with clients connecting and leaving, measured in one process with its
clients). So every FULL_PASS_EVERY settles, one settle gives everything back to the
collector first (gc.unfreeze) and collects it all: the pause of an ordinary full collection,
once per that many batches of creations, and no garbage kept longer.

Only a server process settles (`enable()` in serving.run_until_signalled): a library's
objects in someone else's process, a test run's among them, are that process's to manage.
"""

from __future__ import annotations

import gc
import threading

# One settle in this many collects everything, settled objects included.
FULL_PASS_EVERY = 64

_settling = threading.Lock()
_enabled = False
_settles = 0


def enable() -> None:
    """This process is a server: settle() settles from now on, starting now."""
    global _enabled
    _enabled = True
    settle()


def settle() -> None:
    """Collect what is garbage now, then move every surviving object out of the
    collector's view (nothing unless enabled). Called from any thread (a collection holds
    the GIL throughout anyway); concurrent calls run one after the other."""
    global _settles
    if not _enabled:
        return
    with _settling:
        _settles += 1
        if _settles % FULL_PASS_EVERY == 0:
            gc.unfreeze()  # cycles that died since they were settled are collected too
        gc.collect()
        gc.freeze()


def settled_objects() -> int:
    """How many objects settle() has moved out of the collector's view."""
    return gc.get_freeze_count()
