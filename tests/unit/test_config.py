"""Configs are parsed strictly and range-checked with Kafka's types and bounds."""

from __future__ import annotations

import pytest

from seglog.errors import InvalidConfigError
from seglog.storage import LogConfig, LogManagerConfig


@pytest.mark.parametrize("text", [" 5", "5 ", "5_000", "+5", "５", "٥", "0x10", "5.0", "", "1e3"])
def test_integer_configs_take_only_plain_ascii_digits(text):
    with pytest.raises(InvalidConfigError, match="segment.ms must be an integer"):
        LogConfig().with_overrides({"segment.ms": text})


def test_plain_integers_and_negative_sentinels_parse():
    config = LogConfig().with_overrides({"segment.ms": "5000", "retention.ms": "-1"})
    assert (config.segment_ms, config.retention_ms) == (5000, -1)


@pytest.mark.parametrize(
    ("key", "value", "bound"),
    [
        ("segment.bytes", str(1 << 31), "2147483647"),  # int32 in Kafka
        ("segment.bytes", "13", "14"),
        ("segment.index.bytes", str(1 << 40), "2147483647"),  # fits 4-byte positions
        ("index.interval.bytes", str(1 << 31), "2147483647"),
        ("max.message.bytes", str(1 << 31), "2147483647"),
        ("segment.ms", str(1 << 63), "9223372036854775807"),  # int64
        ("retention.ms", "-2", "-1"),
        ("flush.messages", "0", "1"),
    ],
)
def test_numeric_configs_are_range_checked_with_kafkas_types(key, value, bound):
    with pytest.raises(InvalidConfigError, match=rf"{key} must be in \[.*{bound}.*\]"):
        LogConfig().with_overrides({key: value})


@pytest.mark.parametrize("text", ["nan", "inf", " 0.5", "0,5", "1.5", "-0.1"])
def test_the_dirty_ratio_is_a_plain_decimal_in_0_to_1(text):
    with pytest.raises(InvalidConfigError, match="min"):
        LogConfig().with_overrides({"min.cleanable.dirty.ratio": text})


def test_manager_configs_are_bounded_too():
    with pytest.raises(InvalidConfigError, match="cleaner.dedupe.buffer.size"):
        LogManagerConfig.from_overrides(("d",), {"cleaner_dedupe_buffer_size": "1024"})
    with pytest.raises(InvalidConfigError, match="must be an integer"):
        LogManagerConfig.from_overrides(("d",), {"cleaner_backoff_ms": "1_000"})
