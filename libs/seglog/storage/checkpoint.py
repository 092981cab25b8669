"""Per-data-dir state files, in Kafka's formats.

`recovery-point-offset-checkpoint`, `log-start-offset-checkpoint`,
`replication-offset-checkpoint` (each partition's high watermark, leader or follower, written
every `replica.high.watermark.checkpoint.interval.ms` and at shutdown, as Kafka's
ReplicaManager does) and `cleaner-offset-checkpoint` (the first offset the cleaner has not
compacted, per compacted log; rewritten after each cleaning as Kafka's LogCleanerManager
does) are text files:

    0                 <- version
    2                 <- number of entries
    orders 0 1042     <- topic partition offset
    orders 1 977

written atomically (temp file, fsync, rename, fsync of the directory), and only when one of
their entries changed since the last write: the scheduler asks for the high watermarks every
5 s and the recovery points every minute, and on a node of 10,000 mostly idle partitions
each rewrite is a 200 KiB file and three fsyncs for nothing. `.kafka_cleanshutdown`
is the marker written when every log of the data dir closed cleanly, in Kafka's format
(`{"version":0,"brokerEpoch":N}`, the epoch kept from the marker found at open, -1 when none);
its presence at start-up means no segment needs recovery.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

from ..errors import CorruptRecordError
from .log_files import atomic_write, fsync_directory

logger = logging.getLogger(__name__)

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"
CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"
_VERSION = 0

TopicPartition = tuple[str, int]


def read_checkpoint(path: Path) -> dict[TopicPartition, int]:
    if not path.exists():
        return {}
    lines = path.read_text().splitlines()
    try:
        version, count = int(lines[0]), int(lines[1])
        if version != _VERSION or len(lines) - 2 != count:
            raise ValueError(f"version {version}, {count} entries declared, {len(lines) - 2} found")
        out = {}
        for line in lines[2:]:
            topic, partition, offset = line.rsplit(" ", 2)
            out[(topic, int(partition))] = int(offset)
        return out
    except (ValueError, IndexError) as exc:
        raise CorruptRecordError(f"malformed checkpoint file {path}: {exc}") from None


def write_checkpoint(path: Path, entries: dict[TopicPartition, int]) -> None:
    lines = [str(_VERSION), str(len(entries))]
    lines += [
        f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(entries.items())
    ]
    atomic_write(path, ("\n".join(lines) + "\n").encode())


class DataDir:
    """One data directory's checkpoint files and clean-shutdown marker, owned by whoever
    opened the logs in it: the LogManager (one per directory it manages), or a Log opened
    alone (which then owns its parent directory and must be its only log)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        marker = path / CLEAN_SHUTDOWN_MARKER
        self.clean_shutdown = marker.exists()
        self.broker_epoch = _read_broker_epoch(marker) if self.clean_shutdown else -1
        if self.clean_shutdown:
            # From now on a crash is unclean again until every log closes cleanly.
            marker.unlink()
            fsync_directory(path)
        self.unreadable: list[str] = []  # checkpoint files that did not parse
        self.recovery_points = self._read_or_forget(RECOVERY_POINT_CHECKPOINT)
        self.log_start_offsets = self._read_or_forget(LOG_START_OFFSET_CHECKPOINT)
        self.cleaner_offsets = self._read_or_forget(CLEANER_OFFSET_CHECKPOINT)
        self.high_watermarks = self._read_or_forget(HIGH_WATERMARK_CHECKPOINT)
        if self.unreadable:
            # Damaged files beside the logs: the logs are checked whole, as after a crash.
            self.clean_shutdown = False
        self._lock = threading.Lock()
        self._open: set[TopicPartition] = set()
        self._all_closed_cleanly = True
        # Changed since written: a file that did not parse is rewritten at the first chance.
        self._offsets_changed = bool(
            {RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT} & set(self.unreadable)
        )
        self._high_watermarks_changed = HIGH_WATERMARK_CHECKPOINT in self.unreadable

    def _read_or_forget(self, name: str) -> dict[TopicPartition, int]:
        """A checkpoint that does not parse (a flipped bit, a torn write) is logged and read
        as empty rather than refusing the whole data dir: every value in these files is a
        hint that is safe to lose (recovery points: recover everything; high watermarks:
        the leader moves them again; log start offsets: the first segment's base; cleaner
        offsets: clean again)."""
        try:
            return read_checkpoint(self.path / name)
        except CorruptRecordError as exc:
            logger.error("%s; read as empty", exc)
            self.unreadable.append(name)
            return {}

    @property
    def open_logs(self) -> int:
        return len(self._open)

    def opened(self, tp: TopicPartition) -> None:
        with self._lock:
            self._open.add(tp)

    def closed(self, tp: TopicPartition, *, clean: bool) -> None:
        with self._lock:
            self._open.discard(tp)
            self._all_closed_cleanly &= clean

    def close(self) -> None:
        """The owner's last step: checkpoint, and mark the directory cleanly shut down when
        every log opened in it closed cleanly (none is left open) and every checkpoint was
        written. A checkpoint that cannot be written (a full disk) is logged and the marker
        is left out: the next start recovers from the files, which is always safe, instead
        of trusting checkpoints older than the logs."""
        try:
            self.checkpoint()
        except OSError as exc:
            logger.error(
                "%s: checkpoints not written at shutdown (%s); no clean marker", self.path, exc
            )
            return
        with self._lock:
            clean = self._all_closed_cleanly and not self._open
        if clean:
            # Kafka's CleanShutdownFileHandler content; the broker epoch read at open is kept.
            content = json.dumps({"version": 0, "brokerEpoch": self.broker_epoch})
            try:
                atomic_write(self.path / CLEAN_SHUTDOWN_MARKER, content.encode())
            except OSError as exc:
                logger.error("%s: clean-shutdown marker not written: %s", self.path, exc)

    def update(self, tp: TopicPartition, *, recovery_point: int, log_start_offset: int) -> None:
        with self._lock:
            if (
                self.recovery_points.get(tp) != recovery_point
                or self.log_start_offsets.get(tp) != log_start_offset
            ):
                self.recovery_points[tp] = recovery_point
                self.log_start_offsets[tp] = log_start_offset
                self._offsets_changed = True

    def set_high_watermark(self, tp: TopicPartition, offset: int) -> None:
        # Called on every append: a lookup, and a store only when the value moved. No lock:
        # the writer clears the flag before it copies the dict, so a store it misses leaves
        # the flag set for the next write.
        if self.high_watermarks.get(tp) != offset:
            self.high_watermarks[tp] = offset
            self._high_watermarks_changed = True

    def set_cleaner_offset(self, tp: TopicPartition, offset: int) -> None:
        with self._lock:
            self.cleaner_offsets[tp] = offset
            write_checkpoint(self.path / CLEANER_OFFSET_CHECKPOINT, dict(self.cleaner_offsets))

    def forget(self, tp: TopicPartition) -> None:
        with self._lock:
            if self.recovery_points.pop(tp, None) is not None:
                self._offsets_changed = True
            if self.log_start_offsets.pop(tp, None) is not None:
                self._offsets_changed = True
            if self.high_watermarks.pop(tp, None) is not None:
                self._high_watermarks_changed = True
            if self.cleaner_offsets.pop(tp, None) is not None:
                write_checkpoint(self.path / CLEANER_OFFSET_CHECKPOINT, dict(self.cleaner_offsets))

    def checkpoint(self) -> None:
        """Write the recovery points, log start offsets and high watermarks that changed
        since their last write (a failed write leaves them owed)."""
        with self._lock:
            if self._offsets_changed:
                self._offsets_changed = False
                try:
                    write_checkpoint(
                        self.path / RECOVERY_POINT_CHECKPOINT, dict(self.recovery_points)
                    )
                    write_checkpoint(
                        self.path / LOG_START_OFFSET_CHECKPOINT, dict(self.log_start_offsets)
                    )
                except BaseException:
                    self._offsets_changed = True
                    raise
        self.checkpoint_high_watermarks()

    def checkpoint_high_watermarks(self) -> None:
        with self._lock:
            if not self._high_watermarks_changed:
                return
            self._high_watermarks_changed = False  # before the copy: see set_high_watermark
            try:
                write_checkpoint(self.path / HIGH_WATERMARK_CHECKPOINT, dict(self.high_watermarks))
            except BaseException:
                self._high_watermarks_changed = True
                raise


def _read_broker_epoch(marker: Path) -> int:
    """Kafka writes `{"version":0,"brokerEpoch":N}`; older brokers and seglog before this
    wrote an empty file, which still means a clean shutdown."""
    try:
        epoch = json.loads(marker.read_text()).get("brokerEpoch", -1)
        return epoch if isinstance(epoch, int) else -1
    except (ValueError, AttributeError, OSError):
        return -1
