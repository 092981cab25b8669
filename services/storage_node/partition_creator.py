"""Partition creation for the metadata applier (metadata_applier.py): the costly part of a
new partition (its directory and files: mostly the kernel's work, mkdir, open) runs on a
thread of its own at a lower OS priority, in short steps, each followed by a rest as long as
the step, so a burst of topic creations takes about half of a node's time. When the CPUs are
busy the scheduler runs appends, fetches and the session before the creation thread. Roles,
role changes and removals stay on the applier thread at the node's priority: a failover is
never applied at the lower one, and threads started for a role (a replica fetcher) do not
inherit it."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from seglog.v1 import gateway_pb2

from .replica_manager import ReplicaManager

logger = logging.getLogger(__name__)

# After a step of creations the applier rests CREATION_REST_RATIO times as long as the step
# took before creating more, so the data path's latency holds up better meanwhile (a ratio of
# 2 made 10,000 partitions take longer than a minute to create on etcd). Role changes (a
# failover) are never paced.
CREATION_REST_RATIO = 1.0
CREATION_STEP_S = 0.005  # creations in short steps, so a rest comes every few ms of work
# Added to the creation thread's nice value (Linux schedules threads, so only that thread is
# affected). An unprivileged thread can lower its priority but never raise it back, hence a
# thread of its own rather than the applier's changing its priority around each step.
CREATION_NICE_INCREMENT = 10

TopicPartition = tuple[str, int]
Created = list[tuple[TopicPartition, Exception | None]]


class PartitionCreator:
    """Creates queued partitions' logs a paced step at a time; the caller (the applier
    thread) waits for each step, so the queue it reads stays the caller's own."""

    def __init__(self, replicas: ReplicaManager) -> None:
        self.replicas = replicas
        self.resume_at = 0.0  # time.monotonic() before which creations rest
        self._thread = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="partition-creator", initializer=_lower_priority
        )

    def close(self) -> None:
        self._thread.shutdown(wait=False)

    def resting(self) -> bool:
        return time.monotonic() < self.resume_at

    def rest_s(self) -> float:
        return max(self.resume_at - time.monotonic(), 0.0)

    def step(
        self, creations: Mapping[TopicPartition, gateway_pb2.AssignedPartition | None], limit: int
    ) -> Created:
        """The logs of up to `limit` queued creations (None entries skipped), each with the
        error that stopped it, if any."""
        return self._thread.submit(self._create_logs, creations, limit).result()

    def rest_after(self, started: float) -> None:
        """A step that began at `started` (time.monotonic(), its roles given too) is over:
        creations rest CREATION_REST_RATIO times as long."""
        now = time.monotonic()
        self.resume_at = now + (now - started) * CREATION_REST_RATIO

    def _create_logs(
        self, creations: Mapping[TopicPartition, gateway_pb2.AssignedPartition | None], limit: int
    ) -> Created:
        """On the creation thread, for about CREATION_STEP_S (at least one creation)."""
        started = time.monotonic()
        created: Created = []
        for tp, state in creations.items():
            if len(created) >= limit or (created and time.monotonic() - started > CREATION_STEP_S):
                break
            if state is None:  # never queued as a creation (removals are changes)
                continue
            try:
                self.replicas.create_log(tp[0], tp[1], state.configs, state.topic_id)
                created.append((tp, None))
            except Exception as exc:
                created.append((tp, exc))
        return created


def _lower_priority() -> None:
    """The creation thread's initializer: its own nice value raised (Linux: per thread)."""
    if sys.platform != "linux":
        return  # elsewhere the call would lower the whole process
    thread_id = threading.get_native_id()
    try:
        nice = os.getpriority(os.PRIO_PROCESS, thread_id)
        os.setpriority(os.PRIO_PROCESS, thread_id, nice + CREATION_NICE_INCREMENT)
    except OSError as exc:  # a sandbox refusing it: creations then run at the usual priority
        logger.warning("partition creations keep the node's priority: %s", exc)
