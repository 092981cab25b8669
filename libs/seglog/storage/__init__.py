"""The segment/index engine: Kafka's on-disk layout, byte for byte.

`Log.open(directory, LogConfig(...))` opens one partition directory; `LogManager` holds many
and runs their background work (flush, retention, compaction).
"""

from .clock import SYSTEM_CLOCK, Clock, ManualClock, SystemClock
from .config import LogConfig, LogManagerConfig
from .file_records import FileRecords
from .log import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    Log,
    LogAppendInfo,
    TimestampAndOffset,
)
from .offset_index import OffsetIndex
from .segment import LogSegment
from .time_index import TimeIndex

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "SYSTEM_CLOCK",
    "Clock",
    "FileRecords",
    "Log",
    "LogAppendInfo",
    "LogConfig",
    "LogManagerConfig",
    "LogSegment",
    "ManualClock",
    "OffsetIndex",
    "SystemClock",
    "TimeIndex",
    "TimestampAndOffset",
]
