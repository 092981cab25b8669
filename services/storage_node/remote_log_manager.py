"""The node's tiered storage work (Kafka's RemoteLogManager): one background thread per node,
however many partitions it holds, passing over every hosted partition of a topic with
remote.storage.enable=true every `remote_log_manager_task_interval_ms`:

- as leader (and not fenced): copy the rolled, committed segments (remote_copier.py), delete
  leftovers of failed copies, then apply the total retention (retention.ms / retention.bytes)
  to the remote segments: DELETE_SEGMENT_STARTED, the objects, DELETE_SEGMENT_FINISHED, and
  the log start offset moves past them;
- as leader or follower: keep the log's `highest_offset_in_remote_storage` at what the store
  holds, which is what lets local retention (local.retention.*) delete a segment.

One thread, not one per partition: the work is I/O to one store, and a node with thousands of
partitions must not hold thousands of threads for it. A pass that meets a store error stops
there (the store is likely down for every partition) and the next pass comes after a backoff
that doubles from `remote_log_manager_task_retry_backoff_ms` up to
`remote_log_manager_task_retry_backoff_max_ms` (Kafka's defaults, 500 ms and 30 s); local
segments stay until their copy is FINISHED, so nothing is lost while the store is away, and
the node keeps serving (this thread touches no request path).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from seglog.errors import SeglogError
from seglog.storage.log import Log
from seglog.storage.remote_layout import metadata_partition_prefix, topic_prefix
from seglog.storage.remote_metadata import RemoteLogMetadata
from seglog.storage.remote_store import RemoteStorageConfig, RemoteStorageError, RemoteStore

from .partition import Partition
from .remote_copier import PartitionCopier
from .remote_deletions import FILE_NAME as DELETIONS_FILE
from .remote_deletions import PendingDeletion, PendingDeletions
from .remote_retention import expire_remote_segments
from .replica_manager import ReplicaManager

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class RemoteLogManagerConfig:
    """Kafka's remote.log.manager.* broker settings that apply here (their defaults)."""

    remote_log_manager_task_interval_ms: int = 30_000
    remote_log_manager_task_retry_backoff_ms: int = 500
    remote_log_manager_task_retry_backoff_max_ms: int = 30_000
    # How long a reader's view of a partition's remote segments may be stale.
    remote_log_metadata_cache_ms: int = 1000

    def __post_init__(self) -> None:
        for name in (
            "remote_log_manager_task_interval_ms",
            "remote_log_manager_task_retry_backoff_ms",
            "remote_log_manager_task_retry_backoff_max_ms",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name.replace('_', '.')} must be at least 1")


class RemoteLogManager:
    def __init__(
        self,
        replicas: ReplicaManager,
        storage: RemoteStorageConfig,
        config: RemoteLogManagerConfig | None = None,
        *,
        state_dir: Path | None = None,
    ) -> None:
        self.replicas = replicas
        self.config = config or RemoteLogManagerConfig()
        self.store = RemoteStore(storage)
        self.metadata = RemoteLogMetadata(
            self.store,
            cache_ms=self.config.remote_log_metadata_cache_ms,
            broker_id=replicas.node_id,
        )
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._backoff_ms = 0
        # Deleted topics' partitions whose objects are still to go, kept in `state_dir` (the
        # node's data dir) so that a restart before the store answers does not forget them.
        self.deletions = PendingDeletions(
            state_dir / DELETIONS_FILE if state_dir is not None else None
        )
        # Passes completed without a store error, passes that met one (tests read them).
        self.passes = 0
        self.failures = 0
        self.last_error = ""

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="remote-log-manager", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def delete_partition_data(self, topic: str, topic_id: str, partition: int) -> None:
        """A deleted topic's partition: its objects and metadata go on the next pass (Kafka
        deletes a deleted tiered topic's remote segments too)."""
        self.deletions.add(PendingDeletion(topic, topic_id, partition))
        self.wake()

    def _delete_deleted(self) -> None:
        for deletion in self.deletions.pending():
            topic, topic_id, partition = deletion
            keys = self.store.list(f"{topic_prefix(topic, topic_id)}{partition}/")
            keys += self.store.list(metadata_partition_prefix(topic_id, partition))
            self.store.delete(keys)
            self.metadata.invalidate(topic_id, partition)
            self.deletions.discard(deletion)
            if keys:
                logger.info("%s-%d: %d remote objects deleted", topic, partition, len(keys))

    def wake(self) -> None:
        """Pass now (a roll, a leadership change) rather than at the next interval."""
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            wait_ms = self.config.remote_log_manager_task_interval_ms
            try:
                self.run_once()
                self._backoff_ms = 0
                self.passes += 1
                self.last_error = ""
            except SeglogError as exc:
                c = self.config
                self._backoff_ms = min(
                    max(self._backoff_ms * 2, c.remote_log_manager_task_retry_backoff_ms),
                    c.remote_log_manager_task_retry_backoff_max_ms,
                )
                wait_ms = self._backoff_ms
                self.failures += 1
                if str(exc) != self.last_error:
                    logger.warning("tiered storage: %s; retrying in %d ms", exc, wait_ms)
                self.last_error = str(exc)
            except Exception:
                logger.exception("tiered storage pass failed")
            self._wake.wait(wait_ms / 1000)
            self._wake.clear()

    def run_once(self) -> None:
        """One pass over every hosted tiered partition. A store error ends the pass (raised:
        the store is likely down for all); any other error is the partition's own (a
        metadata record it cannot parse, a file gone under it) and the pass goes on."""
        self._delete_deleted()
        for topic, number in self.replicas.hosted():
            if self._stop.is_set():
                return
            held = self.replicas.partition_if_hosted(topic, number)
            if held is None:
                continue
            log = held.log
            if not log.config.remote_storage_enable:
                continue
            topic_id = self.replicas.logs.topic_id(topic, number)
            if not topic_id:
                continue  # the registry has not named the topic's id yet
            try:
                leading = held.is_leader and held.fenced is None
                self._sync_remote_end(topic_id, log, fresh=leading)
                if leading:
                    self._lead(held, topic, topic_id, log)
            except RemoteStorageError:
                raise
            except SeglogError as exc:
                logger.warning("tiered storage: %s-%d skipped this pass: %s", topic, number, exc)

    def _sync_remote_end(self, topic_id: str, log: Log, *, fresh: bool) -> None:
        if fresh:  # a leader acts on what the store holds now, not on a cached view
            self.metadata.invalidate(topic_id, log.partition)
        end = self.metadata.remote_end_offset(topic_id, log.partition)
        log.highest_offset_in_remote_storage = -1 if end is None else end

    def _lead(self, held: Partition, topic: str, topic_id: str, log: Log) -> None:
        epoch = held.leader_epoch

        def still_leading() -> bool:
            return held.is_leader and held.fenced is None and held.leader_epoch == epoch

        copier = PartitionCopier(self.store, self.metadata, still_leading=still_leading)
        copier.clean_up_failed(topic_id, log.partition)
        if not log.config.remote_log_copy_disable:
            for segment, end in copier.candidates(log):
                if self._stop.is_set() or not still_leading():
                    return
                copier.copy(topic, topic_id, log, segment, end)
        expire_remote_segments(copier, topic_id, log, now_ms=int(time.time() * 1000))
