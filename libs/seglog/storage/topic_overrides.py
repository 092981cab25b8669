"""Per-topic config overrides a storage node holds on top of its default LogConfig, kept in
`topic-config-overrides.json` in its first data dir (atomic write) so that a restarted node
opens its logs with the same settings before anyone tells it again."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import SeglogError
from . import log_files
from .config import LogConfig

logger = logging.getLogger(__name__)
TOPIC_OVERRIDES_FILE = "topic-config-overrides.json"


class TopicOverrides:
    """The stored overrides of each topic; not thread-safe: the log manager calls it under
    its lock."""

    def __init__(self, data_dir: Path, default_config: LogConfig) -> None:
        self._path = data_dir / TOPIC_OVERRIDES_FILE
        self._default = default_config
        self._by_topic = self._read()

    def _read(self) -> dict[str, dict[str, Any]]:
        if not self._path.exists():
            return {}
        stored: dict[str, dict[str, Any]] = json.loads(self._path.read_text())
        for topic, overrides in stored.items():
            try:
                self._default.with_overrides(overrides)
            except SeglogError as exc:
                # Its partitions go offline with this reason when they open; the rest serve.
                logger.error("stored configs of topic %s are invalid: %s", topic, exc)
        return stored

    def config_for(self, topic: str) -> LogConfig:
        overrides = self._by_topic.get(topic)
        return self._default.with_overrides(overrides) if overrides else self._default

    def of(self, topic: str) -> dict[str, Any]:
        """A copy of the topic's overrides (empty: none)."""
        return dict(self._by_topic.get(topic) or {})

    def store(self, topic: str, overrides: Mapping[str, Any]) -> None:
        """Validate and keep the topic's overrides, durably."""
        self._default.with_overrides(overrides)  # validate before storing
        self._by_topic[topic] = dict(overrides)
        self._write()

    def drop(self, topic: str) -> None:
        """Forget a topic's overrides (its last log is gone), durably."""
        if self._by_topic.pop(topic, None) is not None:
            self._write()

    def _write(self) -> None:
        payload = json.dumps(self._by_topic, sort_keys=True, indent=1).encode()
        log_files.atomic_write(self._path, payload)
