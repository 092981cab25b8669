"""LogManager: every log of a storage node, over one or more data dirs, and their
background work.

- Logs are created in the data dir holding the fewest logs; opened in parallel at start
  (`num_recovery_threads_per_data_dir` threads per dir), since recovery is per log.
- A partition that cannot be opened or created (an I/O error such as EMFILE or EFBIG, a
  config its files cannot honour) goes offline with the reason instead of failing the node:
  `get_log` answers KAFKA_STORAGE_ERROR naming it, and every other partition keeps serving
  (Kafka takes a whole log dir offline; a single partition is the finer unit here).
- Per-topic overrides sit on top of the default LogConfig, kept across restarts
  (topic_overrides.py).
- Each log knows the id of the topic it belongs to (KIP-516), from its directory's
  `partition.metadata` (partition_metadata.py). Asked for a log under another topic id than
  the one it holds (its topic was deleted and one of the same name created while this node
  did not hear of it), the manager sets the old log aside as `<topic>-<partition>-stray` and
  creates an empty one: the new topic never serves the old topic's records. (Kafka's KRaft
  broker likewise renames such a log `-stray` rather than opening it.) A log without the
  file (written before topic ids) adopts the id it is first asked for.
- One scheduler thread runs the periodic tasks at their intervals: flush by `flush_ms`,
  recovery-point and high-watermark checkpoints, retention (`retention_check_interval_ms`),
  and compaction (`cleaner_backoff_ms`) when the cleaner is enabled. A failure on one log is
  logged and does not stop the other logs' maintenance.
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..errors import (
    SeglogError,
    StorageError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from . import log_files, partition_metadata, set_aside
from .checkpoint import DataDir
from .cleaner import Cleaner
from .clock import SYSTEM_CLOCK, Clock
from .config import LogConfig, LogManagerConfig
from .dirty_logs import DirtyLogs
from .log import Log
from .retention import delete_old_segments
from .topic_overrides import TopicOverrides

logger = logging.getLogger(__name__)
TopicPartition = tuple[str, int]
STRAY_SUFFIX = log_files.STRAY_SUFFIX


class LogManager:
    def __init__(
        self,
        config: LogManagerConfig,
        default_log_config: LogConfig | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.config = config
        self.default_log_config = default_log_config or LogConfig()
        self.clock = clock
        self._logs: dict[TopicPartition, Log] = {}
        self._topic_ids: dict[TopicPartition, str] = {}  # "" or absent: not known yet
        # Directories whose partition.metadata is written but not fsynced yet (its module
        # says why): synced before the next recovery-point checkpoint or clean shutdown.
        self._unsynced_ids: set[Path] = set()
        self._offline: dict[TopicPartition, str] = {}
        self._lock = threading.RLock()
        # A set-aside (close, then rename) and a deletion of set-aside copies never overlap:
        # a deletion between the two found no copy yet, and the copy stayed (set_aside.py).
        self._aside_lock = threading.RLock()
        self.deleted_topics = set_aside.DeletedTopicIds()
        self._stop = threading.Event()
        self._scheduler: threading.Thread | None = None
        self._dirs = [Path(d) for d in config.log_dirs]
        for d in self._dirs:
            d.mkdir(parents=True, exist_ok=True)
        # One object per data dir for its checkpoints and clean-shutdown marker, shared by the
        # logs in it and closed (marker written) by shutdown.
        self._data_dirs = {d: DataDir(d) for d in self._dirs}
        # Every data dir held its clean-shutdown marker: nothing written before was lost. A
        # new, empty dir counts as unclean (it holds none of what this node acknowledged).
        self.started_after_clean_shutdown = all(
            data_dir.clean_shutdown for data_dir in self._data_dirs.values()
        )
        self._dirty_logs = DirtyLogs()
        self.logs_flush_checked = 0  # logs the flush task visited, all time (tests, metrics)
        # Retention passes finished (tests wait on it rather than on time).
        self.retention_passes = 0
        self.cleaner = Cleaner(clock=clock, dedupe_buffer_bytes=config.cleaner_dedupe_buffer_size)
        self._topic_overrides = TopicOverrides(self._dirs[0], self.default_log_config)

    # -- start-up ----------------------------------------------------------------------

    def load_logs(self) -> None:
        """Open every partition directory found under the data dirs, in parallel."""
        found: list[Path] = []
        for d in self._dirs:
            for child in sorted(d.iterdir()):
                if child.is_dir() and child.name.endswith(set_aside.DELETE_SUFFIX):
                    shutil.rmtree(child, ignore_errors=True)  # a delete a crash cut short
                elif child.is_dir():
                    try:
                        log_files.parse_topic_partition(child)
                    except ValueError:
                        continue
                    found.append(child)
        workers = max(1, self.config.num_recovery_threads_per_data_dir * len(self._dirs))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            opened = list(pool.map(self._open_existing, found))
        with self._lock:
            for directory, log, topic_id, reason in opened:
                tp = log_files.parse_topic_partition(directory)
                if log is not None:
                    self._logs[tp] = log
                    self._topic_ids[tp] = topic_id
                else:
                    self._offline[tp] = reason

    def _open_existing(self, directory: Path) -> tuple[Path, Log | None, str, str]:
        topic, partition = log_files.parse_topic_partition(directory)
        try:
            topic_id = partition_metadata.read(directory)
            return directory, self._open_log(directory, topic), topic_id, ""
        except (OSError, SeglogError) as exc:
            reason = f"cannot open {directory.name}: {exc}"
            logger.error("partition %s-%d goes offline: %s", topic, partition, reason)
            return directory, None, "", reason

    def startup(self) -> None:
        self.load_logs()
        self._stop.clear()
        self._scheduler = threading.Thread(
            target=self._run_scheduler, name="log-manager", daemon=True
        )
        self._scheduler.start()

    # -- logs --------------------------------------------------------------------------

    def config_for(self, topic: str) -> LogConfig:
        return self._topic_overrides.config_for(topic)

    def topic_overrides(self, topic: str) -> dict[str, Any]:
        return self._topic_overrides.of(topic)

    def set_topic_overrides(self, topic: str, overrides: Mapping[str, Any]) -> None:
        with self._lock:
            self._topic_overrides.store(topic, overrides)
            for (t, _), log in self._logs.items():
                if t == topic:
                    log.config = self.config_for(topic)

    def create_log(
        self,
        topic: str,
        partition: int,
        overrides: Mapping[str, Any] | None = None,
        *,
        exist_ok: bool = True,
        topic_id: str = "",
    ) -> Log:
        """The partition's log, created if needed; with `topic_id`, the log of that topic
        (one of another topic set aside first, see above)."""
        with self._lock:
            existing = self._logs.get((topic, partition))
            if existing is not None and not self.holds_other_topic(topic, partition, topic_id):
                if not exist_ok:
                    raise TopicAlreadyExistsError(f"{topic}-{partition} already exists")
                if topic_id and not self._topic_ids.get((topic, partition)):
                    self._adopt_topic_id(topic, partition, existing, topic_id)
                return existing
            if existing is not None:
                held = self._topic_ids.get((topic, partition), "")
                aside = self.set_aside_log(topic, partition)
                logger.warning(
                    "%s-%d holds records of an earlier topic of that name (topic id %s, not "
                    "%s): %s, the partition starts empty",
                    topic,
                    partition,
                    held,
                    topic_id,
                    f"set aside as {aside.name}" if aside else "deleted with its topic",
                )
            # Each DataDir counts the logs open in it: counting them here walked every log
            # per creation, quadratic in a node's partitions (7 ms a log at 2,000).
            data_dir = min(self._dirs, key=lambda d: self._data_dirs[d].open_logs)
            directory = log_files.partition_dir(data_dir, topic, partition)
            if overrides:
                self.set_topic_overrides(topic, overrides)
            try:
                self._set_aside_other_topic(directory, topic_id)
                log = self._open_log(directory, topic)
                if topic_id:
                    partition_metadata.write(directory, topic_id, sync=False)
                    self._unsynced_ids.add(directory)
            except (OSError, SeglogError) as exc:
                reason = f"cannot create {directory.name}: {exc}"
                self._offline[(topic, partition)] = reason
                raise StorageError(f"{topic}-{partition} is offline: {reason}") from exc
            self._offline.pop((topic, partition), None)
            self.cleaner.uncleanable.pop((topic, partition), None)
            self._logs[(topic, partition)] = log
            self._topic_ids[(topic, partition)] = topic_id
            return log

    def topic_id(self, topic: str, partition: int) -> str:
        """The id of the topic the partition's log belongs to ("": not known)."""
        return self._topic_ids.get((topic, partition), "")

    def holds_other_topic(self, topic: str, partition: int, topic_id: str) -> bool:
        """Whether the partition's log belongs to another topic than `topic_id` (both known)."""
        held = self._topic_ids.get((topic, partition), "")
        return bool(topic_id and held and held != topic_id)

    def _adopt_topic_id(self, topic: str, partition: int, log: Log, topic_id: str) -> None:
        try:
            partition_metadata.write(log.directory, topic_id, sync=False)
        except (OSError, ValueError) as exc:
            raise StorageError(f"cannot write {topic}-{partition}'s topic id: {exc}") from exc
        self._unsynced_ids.add(log.directory)
        self._topic_ids[(topic, partition)] = topic_id

    def sync_topic_ids(self) -> None:
        """fsync the partition.metadata files written since the last call."""
        with self._lock:
            pending, self._unsynced_ids = self._unsynced_ids, set()
        for directory in pending:
            try:
                partition_metadata.sync(directory)
            except OSError:
                with self._lock:
                    self._unsynced_ids.add(directory)  # owed still: the next call tries again
                raise

    def _open_log(self, directory: Path, topic: str) -> Log:
        return Log.open(
            directory,
            self.config_for(topic),
            clock=self.clock,
            data_dir=self._data_dirs[directory.parent],
            dirty_logs=self._dirty_logs,
        )

    def get_log(self, topic: str, partition: int) -> Log:
        log = self._logs.get((topic, partition))
        if log is None:
            reason = self._offline.get((topic, partition))
            if reason is not None:
                raise StorageError(f"{topic}-{partition} is offline on this node: {reason}")
            raise UnknownTopicOrPartitionError(f"no log for {topic}-{partition} on this node")
        return log

    def logs(self) -> dict[TopicPartition, Log]:
        return dict(self._logs)

    def offline(self) -> dict[TopicPartition, str]:
        """Partitions this node holds but cannot serve, with the reason."""
        return dict(self._offline)

    def mark_offline(self, topic: str, partition: int, reason: str) -> None:
        with self._lock:
            if (topic, partition) not in self._logs:
                self._offline[(topic, partition)] = reason

    def forget_offline(self, topic: str, partition: int) -> None:
        with self._lock:
            self._offline.pop((topic, partition), None)

    def delete_log(self, topic: str, partition: int) -> None:
        with self._lock:
            log = self._logs.pop((topic, partition), None)
            self._topic_ids.pop((topic, partition), None)
            was_offline = self._offline.pop((topic, partition), None) is not None
        if log is None:
            if not was_offline:
                raise UnknownTopicOrPartitionError(f"no log for {topic}-{partition} on this node")
            # An offline partition's files are removed without opening them.
            for data_dir in self._dirs:
                directory = log_files.partition_dir(data_dir, topic, partition)
                if directory.is_dir():
                    shutil.rmtree(directory, ignore_errors=True)
            return
        self._dirty_logs.discard(log)  # gone: nothing left to flush, nothing to keep it alive
        log.delete()
        with self._lock:
            if not any(t == topic for t, _ in self._logs):
                self._topic_overrides.drop(topic)

    def set_aside_log(self, topic: str, partition: int) -> Path | None:
        """Close a log and rename its directory `<topic>-<partition>-stray`, out of the
        manager's sight but on disk: for a log this node holds and the registry no longer
        assigns to it, which an operator may still want back. A log of a topic deleted
        lately is deleted instead (None): its deletion came first (set_aside.py)."""
        with self._aside_lock:
            with self._lock:
                log = self._logs.pop((topic, partition), None)
                held = self._topic_ids.pop((topic, partition), "")
            if log is None:
                raise UnknownTopicOrPartitionError(f"no log for {topic}-{partition} on this node")
            self._dirty_logs.discard(log)
            if held in self.deleted_topics:
                log.delete()
                return None
            log.close()  # flushed: the flush task has nothing left to visit
            self._data_dirs[log.directory.parent].forget((topic, partition))
            return set_aside.rename_aside(log.directory)

    def delete_set_aside(self, topic: str, partition: int, topic_id: str) -> list[Path]:
        """Delete this partition's set-aside copies of topic `topic_id` (set_aside.py), and
        any log of that topic set aside later."""
        self.deleted_topics.add(topic_id)
        with self._aside_lock:
            return set_aside.delete_copies(self._dirs, topic, partition, topic_id)

    def _set_aside_other_topic(self, directory: Path, topic_id: str) -> None:
        """A directory left on disk but not opened (its partition offline) that belongs to
        another topic id is set aside before a log is made there: never reopened as this
        topic's. One whose id cannot be read stays, and so does the partition offline."""
        if not (topic_id and directory.is_dir()):
            return
        held = partition_metadata.read(directory)
        if held and held != topic_id:
            aside = set_aside.rename_aside(directory)
            logger.warning("%s belongs to topic id %s: set aside as %s", directory, held, aside)

    # -- background work ---------------------------------------------------------------

    def _run_scheduler(self) -> None:
        tasks: list[tuple[int, Callable[[], object]]] = [
            (self.config.flush_scheduler_interval_ms, self.flush_dirty_logs),
            (self.config.flush_recovery_point_interval_ms, self.checkpoint_recovery_points),
            (self.config.retention_check_interval_ms, self.cleanup_logs),
            (
                self.config.replica_high_watermark_checkpoint_interval_ms,
                self.checkpoint_high_watermarks,
            ),
        ]
        if self.config.cleaner_enable:
            tasks.append((self.config.cleaner_backoff_ms, self.compact_logs))
        next_run = [self.clock.now_ms() + interval for interval, _ in tasks]
        while not self._stop.is_set():
            now = self.clock.now_ms()
            for i, (interval, task) in enumerate(tasks):
                if now >= next_run[i]:
                    self._run_safely(task)
                    next_run[i] = now + interval
            wait_ms = max(1, min(next_run) - self.clock.now_ms())
            # Bounded wait: a manual clock in tests advances without waking us.
            self._stop.wait(min(wait_ms, 100) / 1000)

    def _run_safely(self, task: Callable[[], object]) -> None:
        try:
            task()
        except Exception:
            logger.exception("log manager task %s failed", task.__name__)

    def _each_log(self, action: Callable[[Log], int | None], logs: list[Log] | None = None) -> int:
        """Run `action` on every log; a failure is logged and the next log still gets its turn."""
        done = 0
        for log in self.logs().values() if logs is None else logs:
            try:
                done += action(log) or 0
            except Exception:
                logger.exception(
                    "log manager task %s failed on %r", getattr(action, "__name__", action), log
                )
        return done

    def flush_dirty_logs(self) -> None:
        """Visit the logs that appended since the last tick (DirtyLogs); one whose
        time-based flush is not due yet stays for the next tick."""
        dirty = self._dirty_logs.take()
        self.logs_flush_checked += len(dirty)
        for log in dirty:
            try:
                if log.maybe_flush():
                    self._dirty_logs.add(log)
            except Exception:
                self._dirty_logs.add(log)  # its flush is still owed: try again next tick
                logger.exception("log manager task flush_dirty_logs failed on %r", log)

    def checkpoint_recovery_points(self) -> None:
        self.sync_topic_ids()  # before any recovery point that vouches for a log's batches
        for data_dir in self._data_dirs.values():
            data_dir.checkpoint()

    def checkpoint_high_watermarks(self) -> None:
        for data_dir in self._data_dirs.values():
            data_dir.checkpoint_high_watermarks()

    def cleanup_logs(self) -> int:
        """One retention pass over every log; returns how many segments were deleted."""
        now = self.clock.now_ms()
        deleted = self._each_log(lambda log: delete_old_segments(log, now))
        self.retention_passes += 1
        return deleted

    def compact_logs(self) -> int:
        """One cleaner pass over every log whose policy includes compact (a partition the
        cleaner failed on is skipped until it is re-created)."""
        return self._each_log(
            self.cleaner.maybe_clean, [log for log in self.logs().values() if log.config.compact]
        )

    def shutdown(self) -> None:
        """Stop background work, then flush and close every log (clean-shutdown marker)."""
        self._stop.set()
        if self._scheduler is not None:
            self._scheduler.join(timeout=30)
            self._scheduler = None
        try:
            self.sync_topic_ids()  # before the clean-shutdown marker
        except OSError:
            logger.exception("syncing partition.metadata files failed")
        with self._lock:
            logs = list(self._logs.values())
            self._logs.clear()
        for log in logs:
            log.close()
        for data_dir in self._data_dirs.values():
            data_dir.close()
