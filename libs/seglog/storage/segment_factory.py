"""SegmentFactory: the one place the log, its loader and the cleaner open segments from, with
the log's index settings and a rolling jitter drawn per segment."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from .clock import Clock
from .config import LogConfig
from .open_files import SHARED, OpenFileCache
from .segment import LogSegment


@dataclass(frozen=True)
class SegmentFactory:
    """Opens (or creates) the segments of one log directory with the log's settings: the
    one place the log, its loader and the cleaner get segments from."""

    directory: Path
    config: LogConfig
    clock: Clock
    open_files: OpenFileCache = SHARED

    def open(self, base_offset: int, suffix: str = "") -> LogSegment:
        return LogSegment.open(
            self.directory,
            base_offset,
            suffix=suffix,
            index_interval_bytes=self.config.index_interval_bytes,
            index_size_max_bytes=self.config.index_size_max_bytes,
            rolling_jitter_ms=random_segment_jitter_ms(self.config),
            now_ms=self.clock.now_ms(),
            open_files=self.open_files,
        )


def random_segment_jitter_ms(config: LogConfig) -> int:
    """As Kafka's LogConfig.randomSegmentJitter: drawn per segment, uniformly from
    [0, min(segment.jitter.ms, segment.ms)), so segments of many partitions created together
    do not all roll in the same instant."""
    if config.segment_jitter_ms == 0:
        return 0
    return random.randrange(min(config.segment_jitter_ms, config.segment_ms))
